package node

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Guest paths and names.
const (
	// GuestIP is the guest's address on QEMU's user network.
	GuestIP = "10.0.2.15"
	// APIServerHost is the name the guest reaches the API server by. The
	// guest's /etc/hosts maps it to vm.GuestHostIP (this machine's
	// loopback); kube-apiserver's self-signed serving certificate is
	// valid for it.
	APIServerHost = "kubernetes"
	// CRISocket is the fake runtime's socket in the guest.
	CRISocket = "/run/fakecri/fakecri.sock"
	// KubeletConfigPath is the kubelet's --config file in the guest.
	KubeletConfigPath = "/var/lib/kubelet/config.yaml"
	// KubeletKubeconfigPath is the kubelet's --kubeconfig file in the guest.
	KubeletKubeconfigPath = "/etc/kubernetes/kubelet.conf"
	// KubeletDropIn is the kubeadm-style drop-in that gives kubelet.service
	// its command line.
	KubeletDropIn = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
	// GuestOutDir is where the guest mounts the writable share of
	// Config.Dir/guest, which Close fills with the journal.
	GuestOutDir = "/mnt/node-out"

	rootTag = "noderoot" // 9p tag of this machine's root, read-only
	outTag  = "nodeout"  // 9p tag of the writable output share

	guestKubelet = "/usr/bin/kubelet"
	guestFakeCRI = "/usr/local/bin/fakecri"
)

// The reservations in DefaultKubeletConfig, for tests that check the
// kubelet's arithmetic.
const (
	DefaultSystemReservedMemory = 256 << 20
	DefaultKubeReservedMemory   = 128 << 20
)

// DefaultKubeletConfig is the KubeletConfiguration written to
// KubeletConfigPath when Config.KubeletConfig is empty: the systemd cgroup
// driver, reservations that make kubepods.slice's MemoryMax easy to check,
// disk eviction thresholds low enough for the guest's small tmpfs root, and
// no webhook authentication (nothing calls the kubelet's API).
const DefaultKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
staticPodPath: /etc/kubernetes/manifests
failSwapOn: false
rotateCertificates: false
systemReserved:
  cpu: 100m
  memory: 256Mi
kubeReserved:
  cpu: 100m
  memory: 128Mi
enforceNodeAllocatable:
- pods
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
`

// kubeletUnit is kubelet.service as the Kubernetes packages ship it.
const kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// kubeadmDropIn is kubeadm's drop-in for kubelet.service.
const kubeadmDropIn = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig=` + KubeletKubeconfigPath + `"
Environment="KUBELET_CONFIG_ARGS=--config=` + KubeletConfigPath + `"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// fakeCRIUnit runs the fake runtime the way containerd.service runs
// containerd: Type=notify, KillMode=process and Delegate=yes. Delegate is
// what enables the cpuset controller at the root of the hierarchy: systemd
// turns on in every ancestor's cgroup.subtree_control the controllers that
// some unit below needs, and without a delegated unit nothing needs cpuset,
// so the kubelet stops at "cgroup [kubepods] has some missing controllers:
// cpuset".
const fakeCRIUnit = `[Unit]
Description=Fake CRI container runtime for the test kubelet (k8s.io/cri-client/pkg/fake)
After=local-fs.target
Before=kubelet.service

[Service]
Type=notify
ExecStart=` + guestFakeCRI + ` --listen=` + CRISocket + `
Delegate=yes
KillMode=process
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`

// agentUnit keeps test/vm's command agent running from early boot, before
// basic.target, so a boot that stalls can still be inspected. The agent
// runs each command under the guest's own /bin/sh (dash), not busybox sh:
// busybox's shell prefers its own applets, so commands would get
// busybox's ip, stat or grep instead of the node's. Busybox's applets come
// last on PATH (usleep, for the tests' scripts).
const agentUnit = `[Unit]
Description=Test harness command agent on the virtio-serial port
DefaultDependencies=no
After=systemd-journald.socket

[Service]
ExecStart=/etc/vm/agent
Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/etc/vm/bin
Restart=always
RestartSec=1

[Install]
WantedBy=sysinit.target
`

// initDone is what the initramfs's /init prints as it hands over to
// systemd, and earlyStall how long its console may stay silent before
// that (vm.Config.EarlyStall): each step below says itself first, and
// none takes more than a few seconds even on a loaded machine.
const (
	initDone   = "node-init: switching to systemd"
	earlyStall = 90 * time.Second
)

// lastLine returns the last non-empty line of a file, "" if it cannot be
// read.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// initScript is the initramfs's /init. It mounts this machine's root
// read-only over 9p, puts a tmpfs overlay on it, writes the node's files
// into the overlay, configures the network card and hands over to systemd.
// %[1]s is the tmpfs size.
const initScript = `#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "node-init: $*" >/dev/console 2>/dev/null || echo "node-init: $*"; }
fail() { say "FAILED: $*"; exit 1; } # PID 1 exits: panic, reboot, QEMU quits
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say "loading modules"
while read -r m; do
	insmod "/lib/modules/vm/$m.ko" || say "insmod $m failed"
done </lib/modules/vm/load-order

say "mounting the root share"
mkdir -p /lower /rw /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=mmap,msize=262144 ` + rootTag + ` /lower ||
	fail "mount the root share"
mount -t tmpfs -o mode=0755,size=%[1]s tmpfs /rw || fail "mount the overlay's tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
	fail "mount the overlay"

say "writing the node's files"
# This machine's own enablement (its services, timers, gettys, default
# target) is not the node's: start from the distribution's units.
rm -rf /newroot/etc/systemd/system/*.wants /newroot/etc/systemd/system/*.requires \
	/newroot/etc/systemd/system/default.target
# Nor are its node agents' state and configuration: a state file of a
# node-resized run on this machine would be the guest's history.
rm -rf /newroot/var/lib/node-resized /newroot/var/lib/kubelet /newroot/etc/kubernetes \
	/newroot/etc/default/node-resized /newroot/etc/systemd/system/node-resized.service
# No man-db index rebuild on dpkg's trigger (the package installs manual
# pages): under TCG, over the root share, it takes minutes. Cloud and
# container images turn it off the same way.
rm -f /newroot/var/lib/man-db/auto-update
cp -a /node/root/. /newroot/ || fail "copy the node's files"
while read -r target link; do
	mkdir -p "/newroot${link%%/*}"
	ln -sfn "$target" "/newroot$link" || fail "link $link"
done </node/links
mkdir -p /newroot/etc/vm/bin /newroot/etc/kubernetes/manifests /newroot/var/lib/kubelet /newroot` + GuestOutDir + `
cp /bin/busybox /newroot/etc/vm/bin/busybox && ln -sf busybox /newroot/etc/vm/bin/usleep &&
	cp /etc/vm/agent /newroot/etc/vm/agent || fail "install the agent"

say "configuring the network"
if [ -e /sys/class/net/eth0 ]; then
	ip link set lo up
	ip link set eth0 up
	ip addr add ` + GuestIP + `/24 dev eth0
	ip route add default via 10.0.2.2 || say "no default route"
else
	say "no network card"
fi
# The node's own /tmp: this machine's would be walked over 9p and emptied
# (in the overlay) by systemd-tmpfiles at boot, which took 15 s.
say "mounting /tmp and the output share"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /newroot/tmp || fail "mount /tmp"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=262144 ` + outTag + ` /newroot` + GuestOutDir + ` ||
	say "no output share"

mount --move /dev /newroot/dev
mount --move /sys /newroot/sys
mount --move /proc /newroot/proc
say "switching to systemd"
exec switch_root /newroot /lib/systemd/systemd
`

// guestFile is a file of the node's overlay: written through the
// initramfs, or a symlink.
type guestFile struct {
	data []byte
	mode uint32
	link string // symlink target when not ""
}

// guestTree is the set of files Boot writes into the guest's overlay.
type guestTree map[string]guestFile

func (t guestTree) file(p string, mode uint32, data string) {
	t[path.Clean(p)] = guestFile{data: []byte(data), mode: mode}
}

func (t guestTree) symlink(p, target string) {
	t[path.Clean(p)] = guestFile{link: target}
}

// links renders the symlinks as "TARGET LINK" lines, sorted.
func (t guestTree) links() string {
	var lines []string
	for p, f := range t {
		if f.link != "" {
			lines = append(lines, f.link+" "+p)
		}
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// bootUnitsMasked are the host's boot units the guest does without: kernel
// modules nothing in the guest uses (the kubelet, containerd, runc and
// node-resized load what they need), debug and trace file systems, the
// POSIX message queue mount (runc mounts its own in each container), user
// accounts and logins (the root is this machine's, read-only, and nobody
// logs in), and udev (where this machine has it: a node onlines its
// hot-added hardware with node-resized's --auto-online; the one scenario
// that runs a distribution's udev rule starts udevd itself, see
// startDistroUdev).
var bootUnitsMasked = []string{
	"modprobe@drm.service", "modprobe@fuse.service", "modprobe@dm_mod.service", "modprobe@configfs.service", "modprobe@loop.service",
	"sys-kernel-debug.mount", "sys-kernel-tracing.mount", "sys-kernel-config.mount", "dev-mqueue.mount",
	"systemd-sysusers.service", "systemd-logind.service", "systemd-user-sessions.service",
	"systemd-update-utmp.service", "systemd-update-utmp-runlevel.service",
	"systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
	"systemd-udev-trigger.service", "systemd-udev-settle.service", "systemd-hwdb-update.service",
}

// generatorDirs are where systemd looks for system generators
// (systemd.generator(7)); the guest's root is this machine's.
var generatorDirs = []string{
	"/etc/systemd/system-generators", "/run/systemd/system-generators",
	"/usr/local/lib/systemd/system-generators", "/usr/lib/systemd/system-generators",
	"/lib/systemd/system-generators",
}

// generatorKept are the generators the node keeps: the one that turns
// /etc/fstab (the node's, empty) into mount units.
var generatorKept = map[string]bool{"systemd-fstab-generator": true}

// hostGenerators returns the names of this machine's system generators.
func hostGenerators() []string {
	seen := map[string]bool{}
	var names []string
	for _, dir := range generatorDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	return names
}

// baseTree returns the node's own files: identity, name resolution,
// units and their enablement, the kubelet's configuration.
func baseTree(name string, kubeconfig []byte, kubeletConfig, kubeletArgs string, kubelet, fakecri string) (guestTree, error) {
	t := guestTree{}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	t.file("/etc/machine-id", 0o444, hex.EncodeToString(id)+"\n")
	t.file("/etc/hostname", 0o644, name+"\n")
	t.file("/etc/hosts", 0o644, fmt.Sprintf("127.0.0.1\tlocalhost\n%s\t%s\n%s\t%s\n", GuestIP, name, "10.0.2.2", APIServerHost))
	// This machine's mounts are not the guest's.
	t.file("/etc/fstab", 0o644, "# node test bed: the root is an overlay set up by the initramfs\n")

	// Mask the gettys: the serial console is the boot log.
	t.symlink("/etc/systemd/system/getty.target", "/dev/null")
	t.symlink("/etc/systemd/system/serial-getty@ttyS0.service", "/dev/null")
	t.symlink("/etc/systemd/system/default.target", "/lib/systemd/system/multi-user.target")
	// Units a node needs none of, masked: each costs the emulated guest
	// seconds of CPU at every boot (systemd-analyze blame: 1 - 3.5 s
	// each), and no test reads what they set up.
	for _, u := range bootUnitsMasked {
		t.symlink("/etc/systemd/system/"+u, "/dev/null")
	}

	// This machine's generators, but for fstab's, masked too: systemd runs
	// each of them at boot and again at every daemon-reload, which the
	// package's scripts and the tests' drop-ins ask for often. They cost
	// the emulated guest about 5 s of CPU each time (a daemon-reload took
	// 7.3 - 9.7 s with them, 2.6 - 3.7 s without), and what they make
	// (units for this machine's SysV scripts and database clusters,
	// encrypted or GPT-discovered volumes, gettys) is no node's.
	for _, g := range hostGenerators() {
		if !generatorKept[g] {
			t.symlink("/etc/systemd/system-generators/"+g, "/dev/null")
		}
	}

	t.file("/etc/systemd/system/node-agent.service", 0o644, agentUnit)
	t.symlink("/etc/systemd/system/sysinit.target.wants/node-agent.service", "/etc/systemd/system/node-agent.service")
	t.file("/etc/systemd/system/fakecri.service", 0o644, fakeCRIUnit)
	t.symlink("/etc/systemd/system/multi-user.target.wants/fakecri.service", "/etc/systemd/system/fakecri.service")
	t.file("/usr/lib/systemd/system/kubelet.service", 0o644, kubeletUnit)
	t.file(KubeletDropIn, 0o644, kubeadmDropIn)
	t.symlink("/etc/systemd/system/multi-user.target.wants/kubelet.service", "/usr/lib/systemd/system/kubelet.service")

	// The binaries are this machine's files, which the guest sees through
	// its read-only root.
	t.symlink(guestKubelet, kubelet)
	t.symlink(guestFakeCRI, fakecri)

	t.file(KubeletKubeconfigPath, 0o600, string(kubeconfig))
	t.file(KubeletConfigPath, 0o644, kubeletConfig)
	t.file("/var/lib/kubelet/kubeadm-flags.env", 0o644,
		fmt.Sprintf("KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix://%s\"\n", CRISocket))
	t.file("/etc/default/kubelet", 0o644, fmt.Sprintf("KUBELET_EXTRA_ARGS=%q\n", kubeletArgs))
	return t, nil
}
