package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/node-resized/node-resized/test/vm"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// DefaultReadyTimeout bounds Boot's wait for the Node to become Ready when
// Config.ReadyTimeout is zero.
const DefaultReadyTimeout = 10 * time.Minute

// File is an extra file in the guest, e.g. a package, a unit or a drop-in.
// Files are written into the guest's overlay before systemd starts, so a
// unit enabled through Config.Enable starts at boot.
type File struct {
	Path string // absolute path in the guest
	// Source is a file on this machine. It is copied into the guest
	// through the initramfs, or, with Link, the guest path becomes a
	// symlink to it: the guest sees this machine's root read-only, so
	// large binaries need no copy (Source must then not be under a folder
	// the guest mounts over: /tmp, /run, /proc, /sys, /dev).
	Source string
	Link   bool
	Data   []byte      // contents when Source is ""
	Mode   fs.FileMode // 0: Source's permissions, or 0644 for Data
}

// Config describes the node. Zero fields take the defaults noted.
type Config struct {
	// Name is the Node's name and the guest's hostname; default "node-1".
	Name string
	// API is a client configuration for this node's identity
	// (system:node:<Name>, group system:nodes) as this machine reaches the
	// API server: https on 127.0.0.1 or localhost, a bearer token and the
	// CA (e.g. test/cluster's Cluster.NodeConfig). Required. The kubelet
	// uses the same identity, at https://kubernetes:<port>.
	API *rest.Config

	// Kernel is the guest kernel; zero means vm.FindKernel("").
	Kernel vm.Kernel
	// BinDir holds the kubelet and fakecri; "" means DefaultBinDir.
	BinDir string
	// Kubelet is the kubelet binary the guest runs as /usr/bin/kubelet, a
	// path on this machine (e.g. BinDir/kubelet-v1.36.3, which
	// test/node/build-matrix builds); "" means BinDir/kubelet, the version
	// the test module requires. Like a File with Link, it must not be
	// under a folder the guest mounts over (/tmp, /run, ...).
	Kubelet string
	// SkipBuild uses the binaries in BinDir (and RuntimeDir) as they are
	// instead of running Build (and BuildRuntime) first.
	SkipBuild bool
	// Runtime is the container runtime: RuntimeFakeCRI (the default) or
	// RuntimeContainerd, whose parts and images come from RuntimeDir (""
	// means DefaultRuntimeDir; test/node/build-runtime builds them).
	Runtime    string
	RuntimeDir string
	// Dir receives console.log, qemu.log and, at Close, guest/journal.log.
	// "" uses a temporary folder that Close removes unless KeepDir is set.
	Dir     string
	KeepDir bool

	// Machine size; defaults 2 CPUs of 4 slots, 2 GiB of 4 GiB in 4 DIMM
	// slots. NUMA as in vm.Config (nil: two nodes, node 0 with CPUs 0-1
	// and all boot memory, node 1 with CPUs 2-3 and no memory).
	CPUs    int
	MaxCPUs int
	Mem     uint64
	MaxMem  uint64
	Slots   int
	NUMA    []vm.NUMANode
	// Accel is QEMU's -accel; default $NODE_RESIZED_VM_ACCEL, else
	// test/vm's default (single-threaded TCG, or multi-threaded with
	// UnplugCPUs).
	Accel string
	// CPUModel is QEMU's -cpu; default $NODE_RESIZED_VM_CPU, else test/vm's.
	CPUModel string
	// UnplugCPUs: the test will unplug a hot-added CPU (vm.Config).
	UnplugCPUs bool
	// Append is added to the kernel command line.
	Append string
	// OverlaySize is the size of the tmpfs that holds every write to the
	// guest's root; default "1G".
	OverlaySize string
	// QEMUArgs are added to QEMU's command line, e.g. "-device",
	// "virtio-balloon-pci,id=balloon0" for Balloon.
	QEMUArgs []string
	// VirtioMem are virtio-mem devices the guest boots with (see
	// vm.VirtioMemDevice; the guest loads virtio_mem). QEMU counts their
	// sizes against MaxMem, whose default then grows by them. Drive them
	// with the VM's SetVirtioMemRequested and WaitVirtioMemSize.
	VirtioMem []vm.VirtioMemDevice
	// KubeletDisk, when set, puts the kubelet's root directory
	// (/var/lib/kubelet) on a virtio-blk disk of its own (the guest's
	// /dev/vda, QEMU block node KubeletDiskID), a raw image of
	// KubeletDisk.Size bytes in Dir made by mkfs of KubeletDisk.FS
	// ("ext4" or "xfs") on this machine, mounted before the kubelet
	// starts: the kubelet's filesystem, which the host grows with the
	// VM's BlockResize and the guest with resize2fs or xfs_growfs.
	KubeletDisk *KubeletDisk

	// KubeletConfig is the KubeletConfiguration YAML; "" means
	// DefaultKubeletConfig.
	KubeletConfig string
	// KubeletArgs are extra kubelet flags (KUBELET_EXTRA_ARGS in
	// /etc/default/kubelet), e.g. "--v=4".
	KubeletArgs string
	// Files are extra files in the guest.
	Files []File
	// Enable lists units (by file name, e.g. "node-resized.service") to
	// start at boot: they are linked into multi-user.target.wants. Their
	// files come from Files or from this machine's root.
	Enable []string

	// BootTimeout bounds the boot to the agent's first answer; default
	// vm.DefaultBootTimeout. ReadyTimeout bounds the wait from then on for
	// the Node to be Ready; default DefaultReadyTimeout.
	BootTimeout  time.Duration
	ReadyTimeout time.Duration
	// Logf receives a line for each boot step; nil discards them.
	Logf func(format string, args ...any)
}

// Node is a running guest whose PID 1 is systemd and whose kubelet is
// registered with the control plane. The embedded VM gives Exec, the QMP
// hotplug helpers (HotAddCPU, HotAddDIMM, DeviceDel,
// QueryHotpluggableCPUs) and the console log.
type Node struct {
	*vm.VM
	cfg       Config
	start     time.Time
	name      string
	dir       string
	removeDir bool
	client    kubernetes.Interface
	initrd    string

	agentReady time.Duration // boot to the agent's first answer
	ready      time.Duration // boot to Node Ready

	closeOnce sync.Once
	closeErr  error
}

func (c *Config) setDefaults() error {
	if c.Name == "" {
		c.Name = "node-1"
	}
	if c.API == nil {
		return errors.New("node: Config.API (the node identity's client configuration) is required")
	}
	if c.CPUs == 0 {
		c.CPUs = 2
	}
	if c.MaxCPUs == 0 {
		c.MaxCPUs = 4
	}
	if c.Mem == 0 {
		c.Mem = 2 * gib
	}
	if c.MaxMem == 0 {
		c.MaxMem = 4 * gib
		for _, d := range c.VirtioMem {
			c.MaxMem += d.Size
		}
	}
	if c.Accel == "" {
		c.Accel = os.Getenv("NODE_RESIZED_VM_ACCEL")
	}
	if c.CPUModel == "" {
		c.CPUModel = os.Getenv("NODE_RESIZED_VM_CPU")
	}
	if c.OverlaySize == "" {
		c.OverlaySize = "1G"
	}
	if c.KubeletConfig == "" {
		c.KubeletConfig = DefaultKubeletConfig
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = vm.DefaultBootTimeout
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	switch c.Runtime {
	case "":
		c.Runtime = RuntimeFakeCRI
	case RuntimeFakeCRI, RuntimeContainerd:
	default:
		return fmt.Errorf("node: Config.Runtime %q: want %q or %q", c.Runtime, RuntimeFakeCRI, RuntimeContainerd)
	}
	return nil
}

// guestKubeconfig returns the kubelet's kubeconfig: the API server as the
// guest reaches it, the node identity's token.
func guestKubeconfig(api *rest.Config, name string) ([]byte, error) {
	u, err := url.Parse(api.Host)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("node: API server URL %q: want https://127.0.0.1:PORT", api.Host)
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
	default:
		return nil, fmt.Errorf("node: API server %s is not on this machine's loopback, which is all the guest reaches", api.Host)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	ca := api.TLSClientConfig.CAData
	if len(ca) == 0 && api.TLSClientConfig.CAFile != "" {
		if ca, err = os.ReadFile(api.TLSClientConfig.CAFile); err != nil {
			return nil, fmt.Errorf("node: API server CA: %w", err)
		}
	}
	token := api.BearerToken
	if token == "" && api.BearerTokenFile != "" {
		b, err := os.ReadFile(api.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("node: node token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, errors.New("node: Config.API has no bearer token for the node identity")
	}
	cfg := clientcmdapi.NewConfig()
	user := "system:node:" + name
	cfg.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   "https://" + net.JoinHostPort(APIServerHost, port),
		CertificateAuthorityData: ca,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	cfg.CurrentContext = user
	return clientcmd.Write(*cfg)
}

// Boot builds (unless SkipBuild) the kubelet and fakecri, boots the guest
// and waits until the Node is Ready through the API server: Start, then
// WaitReady. The boot log (console.log) and QEMU's log are in Dir. On
// error nothing is left running; the error carries the guest's failed
// units and the kubelet's last journal lines when the guest got that far.
func Boot(ctx context.Context, cfg Config) (*Node, error) {
	n, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := n.WaitReady(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Start is Boot without the wait for Node Ready: it returns once the
// guest's agent answers (early in systemd's boot), for tests that look at
// the node before or while the kubelet starts.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	start := time.Now()
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	logf := cfg.Logf

	if cfg.Kernel.Image == "" {
		if cfg.Kernel, err = vm.FindKernel(""); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	}
	if err := binDirSeen(binDir); err != nil {
		return nil, err
	}
	if cfg.SkipBuild {
		err = checkBinaries(binDir)
	} else {
		t0 := time.Now()
		err = Build(ctx, binDir)
		logf("node: kubelet and fakecri in %s ready after %v", binDir, time.Since(t0).Round(time.Millisecond))
	}
	if err != nil {
		return nil, err
	}
	kubelet := filepath.Join(binDir, "kubelet")
	if cfg.Kubelet != "" {
		if kubelet, err = filepath.Abs(cfg.Kubelet); err != nil {
			return nil, fmt.Errorf("node: kubelet %s: %w", cfg.Kubelet, err)
		}
		if err := checkExecutable(kubelet); err != nil {
			return nil, err
		}
		if err := guestSees(kubelet, "the kubelet", "build it elsewhere"); err != nil {
			return nil, err
		}
	}
	var runtimeDir string
	if cfg.Runtime == RuntimeContainerd {
		if runtimeDir = cfg.RuntimeDir; runtimeDir == "" {
			if runtimeDir, err = DefaultRuntimeDir(); err != nil {
				return nil, err
			}
		}
		if runtimeDir, err = filepath.Abs(runtimeDir); err != nil {
			return nil, err
		}
		if err := guestSees(runtimeDir, "the container runtime's folder", "set XDG_CACHE_HOME or Config.RuntimeDir elsewhere"); err != nil {
			return nil, err
		}
		if cfg.SkipBuild {
			err = checkRuntime(runtimeDir)
		} else {
			t0 := time.Now()
			err = BuildRuntime(ctx, runtimeDir)
			logf("node: containerd, runc, the CNI plugins, crictl and the images in %s ready after %v", runtimeDir, time.Since(t0).Round(time.Millisecond))
		}
		if err != nil {
			return nil, err
		}
	}
	kubeconfig, err := guestKubeconfig(cfg.API, cfg.Name)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg.API)
	if err != nil {
		return nil, fmt.Errorf("node: client: %w", err)
	}

	n := &Node{cfg: cfg, start: start, name: cfg.Name, dir: cfg.Dir, client: client}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.dir == "" {
		if n.dir, err = os.MkdirTemp("", "node-resized-node-"); err != nil {
			return nil, err
		}
		n.removeDir = !cfg.KeepDir
	} else if n.dir, err = filepath.Abs(n.dir); err != nil {
		return nil, err
	}
	outDir := filepath.Join(n.dir, "guest")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}

	tree, err := baseTree(cfg.Name, kubeconfig, cfg.KubeletConfig, cfg.KubeletArgs,
		kubelet, filepath.Join(binDir, "fakecri"))
	if err != nil {
		return nil, err
	}
	if cfg.KubeletDisk != nil {
		tree.addKubeletDisk()
	}
	if cfg.Runtime == RuntimeContainerd {
		u, err := url.Parse(cfg.API.Host)
		if err != nil {
			return nil, fmt.Errorf("node: API server address %q: %w", cfg.API.Host, err)
		}
		port := u.Port()
		if port == "" {
			port = "443"
		}
		tree.addContainerd(runtimeDir, net.JoinHostPort(vm.GuestHostIP, port))
	}
	var files []vm.File
	for _, f := range cfg.Files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("node: file %q: guest path must be absolute", f.Path)
		}
		if f.Link {
			src, err := filepath.Abs(f.Source)
			if err != nil {
				return nil, err
			}
			if err := guestSees(src, "the source of "+f.Path, "keep it elsewhere, e.g. under /var/tmp, or copy it (Link false)"); err != nil {
				return nil, err
			}
			tree.symlink(f.Path, src)
			continue
		}
		delete(tree, path.Clean(f.Path))
		files = append(files, vm.File{Path: "/node/root" + path.Clean(f.Path), Source: f.Source, Data: f.Data, Mode: f.Mode})
	}
	for _, u := range cfg.Enable {
		if strings.Contains(u, "/") {
			return nil, fmt.Errorf("node: Enable %q: give a unit file name", u)
		}
		tree.symlink("/etc/systemd/system/multi-user.target.wants/"+u, unitPath(u, cfg.Files))
	}
	for p, f := range tree {
		if f.link == "" {
			files = append(files, vm.File{Path: "/node/root" + p, Data: f.data, Mode: fs.FileMode(f.mode)})
		}
	}
	files = append(files, vm.File{Path: "/node/links", Data: []byte(tree.links())})

	modules := append(append(append([]string{}, vm.DefaultModules...), vm.ShareModules...), vm.NetModules...)
	if cfg.Runtime == RuntimeContainerd {
		modules = append(modules, runtimeModules...) // the CNI bridge's
	}
	var disks []vm.Disk
	if d := cfg.KubeletDisk; d != nil {
		img, err := d.make(ctx, n.dir)
		if err != nil {
			return nil, err
		}
		disks = append(disks, vm.Disk{ID: KubeletDiskID, File: img})
		modules = append(modules, vm.DiskModules...)
	}
	n.initrd = filepath.Join(n.dir, "initramfs.cpio")
	if _, err := vm.BuildInitramfs(vm.InitramfsConfig{
		Kernel:  cfg.Kernel,
		Output:  n.initrd,
		Modules: modules,
		Files:   files,
		Init:    fmt.Sprintf(initScript, cfg.OverlaySize),
	}); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	append_ := "systemd.show_status=1 systemd.log_target=console"
	if cfg.Append != "" {
		append_ += " " + cfg.Append
	}
	vcfg := vm.Config{
		Kernel:     cfg.Kernel.Image,
		Initramfs:  n.initrd,
		Accel:      cfg.Accel,
		CPUModel:   cfg.CPUModel,
		UnplugCPUs: cfg.UnplugCPUs,
		Dir:        n.dir,
		CPUs:       cfg.CPUs,
		MaxCPUs:    cfg.MaxCPUs,
		Mem:        cfg.Mem,
		MaxMem:     cfg.MaxMem,
		Slots:      cfg.Slots,
		NUMA:       cfg.NUMA,
		Append:     append_,
		UserNet:    true,
		VirtioMem:  cfg.VirtioMem,
		Disks:      disks,
		ExtraArgs:  cfg.QEMUArgs,
		Shares: []vm.Share{
			{Tag: rootTag, Path: "/", ReadOnly: true},
			{Tag: outTag, Path: outDir},
		},
		EarlyStall: earlyStall,
		EarlyDone:  initDone,
	}
	// A boot whose kernel or initramfs stops printing is booted once
	// more: two guests in one day's runs stopped after their modules were
	// loaded and before systemd, and never recovered. Nothing of the node
	// has run yet at that point.
	for attempt := 1; ; attempt++ {
		bctx, cancel := context.WithTimeout(ctx, cfg.BootTimeout)
		n.VM, err = vm.Boot(bctx, vcfg)
		cancel()
		if err == nil {
			break
		}
		if attempt > 1 || !errors.Is(err, vm.ErrEarlyStall) {
			return nil, fmt.Errorf("node: %w", err)
		}
		stalled := filepath.Join(n.dir, "console-stalled.log")
		os.Rename(filepath.Join(n.dir, "console.log"), stalled)
		logf("node: the boot stalled before systemd (its console: %s; last line %q); booting again", stalled, lastLine(stalled))
	}
	n.agentReady = time.Since(start)
	logf("node: guest agent answers after %v", n.agentReady.Round(time.Millisecond))
	return n, nil
}

// WaitReady waits, at most Config.ReadyTimeout, until the Node's Ready
// condition is True, and records the time from Start to then.
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.waitReady(ctx, n.cfg.ReadyTimeout, n.cfg.Logf); err != nil {
		return fmt.Errorf("node %s: %w%s", n.name, err, n.diagnostics())
	}
	n.ready = time.Since(n.start)
	n.cfg.Logf("node: Node %s Ready after %v", n.name, n.ready.Round(time.Millisecond))
	return nil
}

// unitPath is where an enabled unit's file lives in the guest: one of
// files, else the system unit folder.
func unitPath(unit string, files []File) string {
	for _, f := range files {
		if path.Base(f.Path) == unit {
			return path.Clean(f.Path)
		}
	}
	return "/lib/systemd/system/" + unit
}

// waitReady polls the Node until its Ready condition is True, reporting
// progress (registered, the kubelet's Ready reason) as it changes.
func (n *Node) waitReady(ctx context.Context, timeout time.Duration, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	var lastErr error // set by every poll, before the first wait
	for {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err == nil {
			state := "registered, no Ready condition yet"
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					state = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
					if c.Status == corev1.ConditionTrue {
						return nil
					}
				}
			}
			if state != last {
				logf("node: %s", state)
				last = state
			}
			lastErr = errors.New(state)
		} else {
			lastErr = err
		}
		select {
		case <-n.Done():
			return fmt.Errorf("qemu exited while waiting for the Node to be Ready (last: %v)", lastErr)
		case <-ctx.Done():
			return fmt.Errorf("waited %v for the Node to be Ready: %v", timeout, lastErr)
		case <-time.After(time.Second):
		}
	}
}

// diagnostics returns what the guest says about a boot that did not reach
// Node Ready: failed units, and the runtime's and the kubelet's journals' tails.
func (n *Node) diagnostics() string {
	if n.VM == nil {
		return ""
	}
	select {
	case <-n.Done():
		return "\n--- last lines of console.log ---\n" + n.TailConsole(40)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	for _, c := range []string{
		"systemctl is-system-running; systemctl --failed --no-legend --plain",
		"journalctl -u fakecri -u containerd -u node-images -b --no-pager -n 30 -o cat",
		"journalctl -u kubelet -b --no-pager -n 40 -o cat",
	} {
		out, _, err := n.Exec(ctx, c)
		if err != nil {
			out = err.Error()
		}
		fmt.Fprintf(&b, "\n--- guest: %s ---\n%s", c, strings.TrimRight(out, "\n"))
	}
	return b.String()
}

// Name is the Node's name.
func (n *Node) Name() string { return n.name }

// Client is a client with the node's identity.
func (n *Node) Client() kubernetes.Interface { return n.client }

// AgentReadyTime is how long Boot took to the guest agent's first answer;
// ReadyTime how long it took to Node Ready.
func (n *Node) AgentReadyTime() time.Duration { return n.agentReady }

// ReadyTime is how long Boot took from its start to the Node being Ready.
func (n *Node) ReadyTime() time.Duration { return n.ready }

// Dir is the folder with console.log, qemu.log and guest/.
func (n *Node) Dir() string { return n.dir }

// Run runs cmd with sh -c in the guest and returns its output, or an error
// that includes the output when it exits non-zero.
func (n *Node) Run(ctx context.Context, cmd string) (string, error) {
	out, code, err := n.Exec(ctx, cmd)
	if err != nil {
		return out, err
	}
	if code != 0 {
		return out, fmt.Errorf("guest: %q exited %d: %s", cmd, code, strings.TrimSpace(out))
	}
	return out, nil
}

// Balloon asks the guest's virtio-balloon device (Config.QEMUArgs must
// add one) to bring the guest's memory to bytes (QMP balloon): the driver
// inflates or deflates the balloon, which changes MemTotal and sends no
// uevent.
func (n *Node) Balloon(ctx context.Context, bytes uint64) error {
	ctx, cancel := context.WithTimeout(ctx, vm.DefaultQMPTimeout)
	defer cancel()
	if err := n.QMP().Execute(ctx, "balloon", map[string]any{"value": bytes}, nil); err != nil {
		return fmt.Errorf("balloon to %d bytes: %w", bytes, err)
	}
	return nil
}

// Systemctl runs systemctl with args in the guest; like Exec it returns
// the output and exit code (is-active and friends answer with it).
func (n *Node) Systemctl(ctx context.Context, args ...string) (string, int, error) {
	return n.Exec(ctx, "systemctl --no-pager "+shellJoin(args))
}

// JournalEntry is one journal record as journalctl -o json prints it
// (MESSAGE, _PID, PRIORITY, __REALTIME_TIMESTAMP, ... as strings; a
// binary MESSAGE as an array of bytes).
type JournalEntry map[string]any

// Message is the entry's MESSAGE field as text.
func (e JournalEntry) Message() string {
	switch m := e["MESSAGE"].(type) {
	case string:
		return m
	case []any:
		b := make([]byte, 0, len(m))
		for _, v := range m {
			if f, ok := v.(float64); ok {
				b = append(b, byte(f))
			}
		}
		return string(b)
	}
	return ""
}

// Journal returns the current boot's journal of a unit (journalctl -u
// UNIT -b -o json).
func (n *Node) Journal(ctx context.Context, unit string) ([]JournalEntry, error) {
	return n.JournalSince(ctx, unit, time.Time{})
}

// JournalSince is Journal from since on (the guest's clock; the zero time
// means the whole boot), less a second for rounding: callers filter by
// time themselves. journalctl skips the rest with its index, so that a
// test polling for a record since a mark does not have the guest format
// the unit's whole journal at every poll (the kubelet's, by the end of a
// long test, is thousands of records: seconds of emulated CPU each time).
func (n *Node) JournalSince(ctx context.Context, unit string, since time.Time) ([]JournalEntry, error) {
	args := []string{"journalctl", "-b", "--no-pager", "-o", "json", "-u", unit}
	if !since.IsZero() {
		args = append(args, fmt.Sprintf("--since=@%d", since.Add(-time.Second).Unix()))
	}
	out, err := n.Run(ctx, shellJoin(args))
	if err != nil {
		return nil, err
	}
	var entries []JournalEntry
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16*mib)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "-- No entries --" {
			continue
		}
		var e JournalEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return entries, fmt.Errorf("journal of %s: %w in %.200q", unit, err, line)
		}
		entries = append(entries, e)
	}
	return entries, sc.Err()
}

// WaitJournal blocks, in the guest, until the unit's journal of this
// boot has a record after cursor (a __CURSOR of JournalSince's; "" means
// any record after since), or for at most max. One journalctl follows the
// journal and sleeps until then: each journalctl the guest starts costs
// most of a second of emulated CPU, so a test that polled JournalSince
// every 250 ms kept its guest's CPU busy with the polling alone. It
// returns nil when a record came or max passed (the caller reads the
// journal again either way), an error only when the guest did not answer.
func (n *Node) WaitJournal(ctx context.Context, unit, cursor string, since time.Time, max time.Duration) error {
	follow := []string{"journalctl", "-b", "--no-pager", "-o", "cat", "-n", "all", "-f", "-u", unit}
	switch {
	case cursor != "":
		follow = append(follow, "--after-cursor="+cursor)
	case !since.IsZero():
		follow = append(follow, fmt.Sprintf("--since=@%d", since.Add(-time.Second).Unix()))
	}
	secs := int(max.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	// bash does not wait for a process substitution: the first line read
	// (or read's own timeout) ends the wait, and the follower is stopped
	// with it (timeout passes the signal on to journalctl).
	script := fmt.Sprintf("exec 3< <(exec timeout %d %s 2>/dev/null); read -r -t %d _ <&3; kill $! 2>/dev/null; exit 0",
		secs, shellJoin(follow), secs)
	_, err := n.Run(ctx, "bash -c "+shellJoin([]string{script}))
	return err
}

// Close saves the guest's journal to Dir/guest/journal.log (when the guest
// still answers and Dir is kept), quits QEMU and removes a temporary Dir.
// It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.VM != nil {
			if !n.removeDir {
				select {
				case <-n.Done():
				default:
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					n.Exec(ctx, "journalctl -b --no-pager -o short-precise >"+GuestOutDir+"/journal.log 2>&1; sync")
					cancel()
				}
			}
			n.closeErr = n.VM.Close()
		}
		if n.removeDir && n.dir != "" {
			os.RemoveAll(n.dir)
		}
	})
	return n.closeErr
}

// shellJoin quotes words for sh.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		if w != "" && !strings.ContainsAny(w, " \t\n'\"\\$`;&|<>()*?[]{}!#~") {
			q[i] = w
			continue
		}
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// binDirSeen fails, saying what to set, when the guest cannot see binDir.
func binDirSeen(binDir string) error {
	return guestSees(binDir, "the kubelet's folder", "set "+EnvBinDir+" or XDG_CACHE_HOME elsewhere")
}

// guestMounts are the folders the guest mounts its own file systems over,
// hiding this machine's.
var guestMounts = []string{"/tmp", "/run", "/proc", "/sys", "/dev"}

// guestSees fails for a path on this machine that the guest is to reach
// through its read-only view of this machine's root but cannot, because
// the guest mounts over a folder above it: a symlink to it would dangle in
// the guest, and its kubelet or runtime would never start. what names the
// path, how says what to do.
func guestSees(p, what, how string) error {
	if a, err := filepath.Abs(p); err == nil {
		p = a
	}
	for _, m := range guestMounts {
		if p == m || strings.HasPrefix(p, m+"/") {
			return fmt.Errorf("node: %s %s is under %s, which the guest mounts over, so the guest cannot see it: %s", what, p, m, how)
		}
	}
	return nil
}
