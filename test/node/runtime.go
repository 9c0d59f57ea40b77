package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The container runtimes a node can run (Config.Runtime).
const (
	// RuntimeFakeCRI is test/cmd/fakecri: pods without images or
	// processes, whose cgroups the kubelet still makes. The default: it
	// boots fast and is enough wherever no container process matters.
	RuntimeFakeCRI = "fakecri"
	// RuntimeContainerd is containerd with runc and the CNI bridge, built
	// by test/node/build-runtime: real containers from the images in
	// RuntimeImages, each pod with its own network namespace and address.
	RuntimeContainerd = "containerd"
)

// Guest paths of the real runtime.
const (
	// ContainerdSocket is containerd's CRI socket in the guest.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// ContainerdRoot is containerd's root, a tmpfs of its own: the
	// overlayfs snapshotter cannot put its layers on the guest's root,
	// which is an overlay itself.
	ContainerdRoot = "/var/lib/containerd"
	// PodSubnet is the CNI bridge's address range in the guest.
	PodSubnet = "10.88.0.0/24"
	// PauseImage is the pod sandbox's image (test/cmd/pause).
	PauseImage = "localhost/node-resized/pause:test"
	// BusyboxImage is Debian's static busybox, an applet link for each
	// command, and /bin/memhog (test/cmd/memhog). Pods that use it need
	// imagePullPolicy Never: no registry is reachable.
	BusyboxImage = "localhost/node-resized/busybox:test"

	// GuestImagesDir holds the images imported into containerd at boot
	// (every *.tar in it, an OCI image layout each, by
	// node-images.service): RuntimeImages, and a test's own as a File with
	// Link.
	GuestImagesDir = "/usr/local/share/node-images"
	// KubernetesServiceIP is the default/kubernetes Service's address in
	// test/cluster's service range (10.96.0.0/16), which pods' in-cluster
	// configuration dials (KUBERNETES_SERVICE_HOST, port 443). No
	// kube-proxy runs in the guest: kubernetes-service.socket listens there
	// and systemd-socket-proxyd forwards each connection to the API server,
	// as kube-proxy's rules would to the Service's endpoint. The API
	// server's self-signed certificate is valid for the address.
	KubernetesServiceIP = "10.96.0.1"

	guestRuntimeBin = "/usr/local/bin"
	guestCNIBin     = "/opt/cni/bin"
	guestImages     = GuestImagesDir
)

// runtimeModules are the kernel modules the CNI bridge needs.
var runtimeModules = []string{"bridge", "veth"}

// EnvRuntimeDir names the environment variable that overrides
// [DefaultRuntimeDir].
const EnvRuntimeDir = "NODE_RESIZED_NODE_RUNTIME"

// RuntimeBinaries are the programs test/node/build-runtime puts in the
// runtime folder; RuntimeCNIPlugins are in its cni folder, RuntimeImages
// in its images folder.
var (
	RuntimeBinaries   = []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc", "crictl"}
	RuntimeCNIPlugins = []string{"bridge", "loopback", "host-local", "portmap"}
	RuntimeImages     = []string{"pause.tar", "busybox.tar"}
)

// DefaultRuntimeDir returns $NODE_RESIZED_NODE_RUNTIME when set, otherwise
// node-resized/node/runtime under the user's cache directory.
func DefaultRuntimeDir() (string, error) {
	if d := os.Getenv(EnvRuntimeDir); d != "" {
		return filepath.Abs(d)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("node: finding the runtime directory (set %s): %w", EnvRuntimeDir, err)
	}
	return filepath.Join(cache, "node-resized", "node", "runtime"), nil
}

// BuildRuntime runs the script test/node/build-runtime, which builds
// containerd, runc, the CNI plugins, crictl and the images into dir (""
// means [DefaultRuntimeDir]); seconds when they are up to date, minutes
// the first time.
func BuildRuntime(ctx context.Context, dir string) error {
	if dir == "" {
		d, err := DefaultRuntimeDir()
		if err != nil {
			return err
		}
		dir = d
	}
	pkg, err := packageDir()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(pkg, "build-runtime"), dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("node: building the container runtime: %w\n%s", err, tail(out.String(), 40))
	}
	return checkRuntime(dir)
}

func checkRuntime(dir string) error {
	for _, b := range RuntimeBinaries {
		if err := checkExecutable(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("%w (run test/node/build-runtime)", err)
		}
	}
	for _, b := range RuntimeCNIPlugins {
		if err := checkExecutable(filepath.Join(dir, "cni", b)); err != nil {
			return fmt.Errorf("%w (run test/node/build-runtime)", err)
		}
	}
	for _, i := range RuntimeImages {
		if _, err := os.Stat(filepath.Join(dir, "images", i)); err != nil {
			return fmt.Errorf("node: image %w (run test/node/build-runtime)", err)
		}
	}
	return nil
}

// RuntimeVersions reads the versions test/node/build-runtime built, one
// "NAME VERSION" a line.
func RuntimeVersions(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "versions"))
	if err != nil {
		return nil, fmt.Errorf("node: runtime versions: %w", err)
	}
	v := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if name, version, ok := strings.Cut(l, " "); ok {
			v[name] = version
		}
	}
	return v, nil
}

// containerdConfig is containerd's configuration (version 3, containerd
// 2.x): the CRI plugin with runc under the systemd cgroup driver (the
// kubelet's), the pause image made here as the sandbox image, and the CNI
// bridge.
const containerdConfig = `version = 3
root = "` + ContainerdRoot + `"
state = "/run/containerd"

[grpc]
  address = "` + ContainerdSocket + `"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "` + PauseImage + `"

[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "` + guestRuntimeBin + `/runc"
        SystemdCgroup = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["` + guestCNIBin + `"]
    conf_dir = "/etc/cni/net.d"
`

// cniConfig is the pod network: a bridge in the guest with host-local
// addresses. No masquerading and no port mappings (the portmap plugin is
// built but not chained): the guest has no iptables, and the tests reach
// pods only from inside the guest.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "node-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + PodSubnet + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`

// containerdUnit is containerd.service as containerd ships it, after the
// mount of its root.
const containerdUnit = `[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target
RequiresMountsFor=` + ContainerdRoot + `

[Service]
ExecStart=` + guestRuntimeBin + `/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`

// containerdRootMount is the tmpfs under containerd's root.
const containerdRootMount = `[Unit]
Description=containerd's root on a tmpfs (overlayfs snapshots cannot sit on the root overlay)

[Mount]
What=tmpfs
Where=` + ContainerdRoot + `
Type=tmpfs
Options=mode=0711
`

// imagesUnit imports the images made by test/node/build-runtime, and any
// a test adds to GuestImagesDir, before the kubelet starts: no registry is
// reachable.
var imagesUnit = `[Unit]
Description=Import the node's container images into containerd (no registry is reachable)
Requires=containerd.service
After=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'for i in ` + guestImages + `/*.tar; do ` + guestRuntimeBin + `/ctr --address ` + ContainerdSocket + ` -n k8s.io images import "$$i"; done'

[Install]
WantedBy=multi-user.target
`

// kubernetesServiceSocket and kubernetesServiceUnit stand in for
// kube-proxy's rules for the one Service that pods on this node dial: the
// API server's (see KubernetesServiceIP). %s is the API server's address
// as the guest reaches it (host:port).
const kubernetesServiceSocket = `[Unit]
Description=The kubernetes Service's address for pods (in place of kube-proxy)

[Socket]
ExecStartPre=-/sbin/ip address add ` + KubernetesServiceIP + `/32 dev lo
ListenStream=` + KubernetesServiceIP + `:443
FreeBind=yes

[Install]
WantedBy=sockets.target
`

const kubernetesServiceUnit = `[Unit]
Description=Forward the kubernetes Service's connections to the API server (in place of kube-proxy)
Requires=kubernetes-service.socket
After=kubernetes-service.socket

[Service]
ExecStart=/lib/systemd/systemd-socket-proxyd %s
`

// kubeletAfterContainerd orders the kubelet after the runtime and its
// images, as a distribution's kubelet package does with containerd.
const kubeletAfterContainerd = `[Unit]
Wants=containerd.service node-images.service
After=containerd.service node-images.service
`

// crictlConfig points crictl at containerd.
const crictlConfig = "runtime-endpoint: unix://" + ContainerdSocket + "\nimage-endpoint: unix://" + ContainerdSocket + "\ntimeout: 10\n"

// addContainerd puts containerd, runc, the CNI plugins, crictl and the
// images (links to dir, on this machine's read-only root) into the tree,
// with their configuration and units, and points the kubelet at
// containerd. apiServer is the API server's host:port as the guest
// reaches it, for the kubernetes Service's stand-in.
func (t guestTree) addContainerd(dir, apiServer string) {
	for _, b := range RuntimeBinaries {
		t.symlink(guestRuntimeBin+"/"+b, filepath.Join(dir, b))
	}
	for _, p := range RuntimeCNIPlugins {
		t.symlink(guestCNIBin+"/"+p, filepath.Join(dir, "cni", p))
	}
	for _, i := range RuntimeImages {
		t.symlink(guestImages+"/"+i, filepath.Join(dir, "images", i))
	}
	t.file("/etc/containerd/config.toml", 0o644, containerdConfig)
	t.file("/etc/cni/net.d/10-node-test.conflist", 0o644, cniConfig)
	t.file("/etc/crictl.yaml", 0o644, crictlConfig)
	t.file("/etc/systemd/system/var-lib-containerd.mount", 0o644, containerdRootMount)
	t.file("/etc/systemd/system/containerd.service", 0o644, containerdUnit)
	t.symlink("/etc/systemd/system/multi-user.target.wants/containerd.service", "/etc/systemd/system/containerd.service")
	t.file("/etc/systemd/system/node-images.service", 0o644, imagesUnit)
	t.symlink("/etc/systemd/system/multi-user.target.wants/node-images.service", "/etc/systemd/system/node-images.service")
	t.file("/etc/systemd/system/kubelet.service.d/20-containerd.conf", 0o644, kubeletAfterContainerd)
	t.file("/etc/systemd/system/kubernetes-service.socket", 0o644, kubernetesServiceSocket)
	t.file("/etc/systemd/system/kubernetes-service.service", 0o644, fmt.Sprintf(kubernetesServiceUnit, apiServer))
	t.symlink("/etc/systemd/system/sockets.target.wants/kubernetes-service.socket", "/etc/systemd/system/kubernetes-service.socket")
	t.file("/var/lib/kubelet/kubeadm-flags.env", 0o644,
		fmt.Sprintf("KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix://%s\"\n", ContainerdSocket))
	// The fake runtime stays out of the way.
	delete(t, "/etc/systemd/system/multi-user.target.wants/fakecri.service")
}
