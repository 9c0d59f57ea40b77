// Command node-resized is the node-resized daemon: it follows the kernel's
// CPU and memory hotplug events, keeps an exact model of the machine and
// serves it on a local unix socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/types"
)

// fixProcs keeps the Go runtime's processor count from following CPU
// hotplug. By default the runtime re-reads the CPU affinity every second
// and resizes with a stop-the-world pause when it moved: on a hotplug, just
// as the detection loop handles the event. And while a 2-CPU machine has
// one CPU offline it would run on a single processor, which a slow sysfs
// read in the loop hands to another thread. The count is fixed at start,
// at least 2; a GOMAXPROCS in the environment is left as it is. It returns
// the count.
func fixProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := max(2, runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(n) // an explicit setting turns the runtime's updates off
	return n
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usageHead = `node-resized follows CPU and memory hotplug on this machine and keeps an
exact model of it: kernel uevents (NETLINK_KOBJECT_UEVENT) trigger a rebuild
of the NUMA topology from sysfs within milliseconds, a MemTotal watch catches
balloon and virtio-mem changes that send no uevent, a filesystem watch follows
the kubelet root filesystem grown online, and a periodic resync is the safety
net. The model, the kubelet-exact physical capacity and every change are
served on a unix socket (ask it with node-resizectl or curl --unix-socket).

As a Kubernetes node agent (the default) it also reads the Node's configured
capacity (spec.configuredCapacity, or the annotation
node-resized.io/configured-capacity), decides the capacity to publish with
KEP-3953's rules, and patches the Node's status, its CapacityConfigured
condition and events through the API server. It follows what the running
kubelet believes (systemd over D-Bus, the kubelet's own status writes, its
pod-resources API) and, once a change has settled, restarts the kubelet's
unit so that it adopts it, its CPU and memory manager checkpoints made safe
first (--kubelet-restart). With --publish-topology it also keeps the Node's
NodeResourceTopology object (one zone per NUMA node) equal to the machine.

Usage:
  node-resized [flags]                 node agent (kubeconfig: the kubelet's own)
  node-resized --standalone [flags]    no cluster: detect, model, protect kubepods, serve locally
  node-resized --uninstall [flags]     undo what it set on this node (stop the daemon first), and exit
  node-resized kubelet-prestart [flags] make the kubelet's checkpoints fit the machine: run by
                                       kubelet.service before it starts (see its --help)
  node-resized kubelet-recover [flags] start a kubelet a restart left stopped (the unit's ExecStopPost)

Examples:
  node-resized                                   node agent with the kubelet's kubeconfig
  node-resized --kubeconfig ~/.kube/config --node-name worker-1
  node-resized --standalone                      run against this machine
  node-resized --standalone --socket /run/node-resized/node-resized.sock --log-level debug
  node-resized --standalone --sysfs-root /tmp/tree/sys --procfs-root /tmp/tree/proc --uevents=false
                                                 a synthetic machine (see topology/topologytest)

Run under systemd with: systemctl enable --now node-resized
Signals: SIGTERM and SIGINT stop it cleanly; SIGHUP (systemctl reload) resyncs
the model from sysfs (flags are read only at start: restart to change them).
Logs: journalctl -u node-resized (structured fields with -o verbose)

Flags:
`

// options are the daemon's settings, filled from flags.
type options struct {
	standalone     bool
	sysfsRoot      string
	procfsRoot     string
	kubeletRootDir string
	socket         string
	socketGroup    string
	listenAddress  string
	apiLimits      api.Limits
	metricsAddress string // the deprecated name of --listen-address
	uevents        bool
	ueventBuffer   int
	quiet          time.Duration
	maxWait        time.Duration
	gainWindow     time.Duration
	memPoll        time.Duration
	fsPoll         time.Duration
	resync         time.Duration
	history        int
	logLevel       string
	logFormat      string
	showVersion    bool
	uninstall      bool

	kubeconfig       string
	nodeName         string
	nodeNameSource   string // where nodeName came from (resolveNodeName)
	nodeNameSkipped  error  // why the kubeconfig named no node, when it did not
	kubeletConfig    string
	kubeletConfigSet bool
	kubeletConfigDir string
	stateFile        string
	memoryJitter     string
	jitterBytes      int64 // memoryJitter parsed
	kubeAPIQPS       float64
	kubeAPIBurst     int
	evict            bool
	evictAsNode      bool
	enforce          bool
	cgroupRoot       string
	autoOnline       bool
	release          bool
	offlineTimeout   time.Duration

	kubeletUnit           string
	kubeletRestart        string
	kubeletSettle         time.Duration
	kubeletMinInterval    time.Duration
	kubeletRestartTimeout time.Duration
	kubeletBudget         string
	kubeletBudgetN        int
	kubeletBudgetWindow   time.Duration
	kubeletFieldManager   string
	kubeletPodResources   bool
	taintWhileStale       bool
	publishTopology       bool
}

// parseFlags reads the flags. --help prints the usage to help and returns
// flag.ErrHelp; a wrong flag is one error that points at --help.
func parseFlags(args []string, help io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("node-resized", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the flag package would print the whole usage after an error
	fs.BoolVar(&o.standalone, "standalone", false, "run without a Kubernetes cluster: detect, model, clamp the kubepods cgroups and serve the local API (no Node patches, events or evictions)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "where sysfs is mounted (point at a synthetic tree for tests)")
	fs.StringVar(&o.procfsRoot, "procfs-root", "/proc", "where procfs is mounted")
	fs.StringVar(&o.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root directory; its filesystem's size is the ephemeral-storage capacity (empty: not measured)")
	fs.StringVar(&o.socket, "socket", api.DefaultSocket, "unix socket of the local API (created 0660, parent directory created)")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group that owns the socket, so its members can use node-resizectl without root")
	fs.StringVar(&o.listenAddress, "listen-address", "", "also serve /metrics, /healthz and /readyz (nothing else) on this TCP address, e.g. 127.0.0.1:9477 (empty: only on the socket)")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "deprecated: the old name of --listen-address")
	fs.DurationVar(&o.apiLimits.IdleTimeout, "api-idle-timeout", api.DefaultIdleTimeout, "close a keep-alive connection of the local API (socket and TCP) idle this long between requests")
	fs.DurationVar(&o.apiLimits.ReadTimeout, "api-read-timeout", api.DefaultReadTimeout, "close a connection of the local API whose request's headers and body are not read within this long")
	fs.IntVar(&o.apiLimits.MaxConnections, "api-max-connections", api.DefaultMaxConnections, "connections open at once on the socket, and on the TCP listener; one more is answered 503 and closed. Lowered at start to leave the detection loop room below the open-files limit (RLIMIT_NOFILE)")
	fs.IntVar(&o.apiLimits.MaxStreams, "api-max-streams", api.DefaultMaxStreams, "event streams (GET /v1/events?follow=1) open at once; one more is answered 503")
	fs.BoolVar(&o.uevents, "uevents", true, "listen to kernel uevents (turn off only with a synthetic --sysfs-root; the MemTotal and filesystem watches and resyncs still run)")
	fs.IntVar(&o.ueventBuffer, "uevent-buffer", 16<<20, "receive buffer of the uevent socket in bytes (SO_RCVBUFFORCE when permitted)")
	fs.DurationVar(&o.quiet, "coalesce-quiet", 20*time.Millisecond, "an event after this long without one (a quarter of it, outside a burst) is rebuilt at once, and so is every loss; events that follow closer together are a burst, rebuilt as one change once none has arrived for this long")
	fs.DurationVar(&o.maxWait, "coalesce-max", 500*time.Millisecond, "rebuild a burst's held events at the latest this long after the first of them")
	fs.DurationVar(&o.gainWindow, "coalesce-gains", 250*time.Millisecond, "hold a Node status patch that only adds capacity until the wanted status has not changed for this long, at most twice as long (while --auto-online is still onlining a hot-add or the decision on the newest machine model is not done, until this long after, at most 10s), so that a hot-add costs one patch; a loss and every other status are patched at once (0: every status at once)")
	fs.DurationVar(&o.memPoll, "memtotal-interval", time.Second, "how often to check MemTotal for changes that send no uevent (0: off)")
	fs.DurationVar(&o.fsPoll, "fs-interval", 10*time.Second, "how often to check the size of the filesystem that holds --kubelet-root-dir, the ephemeral-storage capacity (0: off). "+
		"A filesystem grown online (resize2fs, xfs_growfs after a cloud disk resize and growpart) sends no uevent; the kernel tells only of the block device (its change uevent with RESIZE=1), after which the check runs every --memtotal-interval (1s when that is off) for 5m, to see the partition and the filesystem grown next. "+
		"Each check is one statfs, a few microseconds")
	fs.DurationVar(&o.resync, "resync-interval", 5*time.Minute, "how often to rebuild the model in full as a safety net (0: off)")
	fs.IntVar(&o.history, "history", 256, "how many changes to keep for /v1/events")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto (journal under systemd, text otherwise), journal, text or json")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.BoolVar(&o.uninstall, "uninstall", false, "undo on this node what node-resized set, print one line per item and exit (1 if an item could not be undone): "+
		"the kubepods limits back to what the kubelet writes for the machine as it is now (a configured capacity's clamp is lifted; a clamp for lost hardware is that already and stays), "+
		"its "+types.ConditionType+" condition and "+types.TaintKey+" taint off the Node, its --state-file and make install's kubelet drop-in removed; "+
		"give it the daemon's other flags, and stop the daemon first (the packages do both when they are removed)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", kube.DefaultKubeconfig, "kubeconfig of the node's identity (the kubelet's own, so the Node authorizer applies); in a pod, the in-cluster config is used when this file is absent")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", kube.DefaultQPS, "queries per second to the API server (the kubelet's own default)")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", kube.DefaultBurst, "burst of queries to the API server (the kubelet's own default)")
	fs.StringVar(&o.nodeName, "node-name", "", "the Node this daemon speaks for (default: $NODE_NAME, else the node identity of --kubeconfig, system:node:<name> in its client certificate or user name, else the hostname lower-cased)")
	fs.StringVar(&o.kubeletConfig, "kubelet-config", kubelet.DefaultPath, "the kubelet's KubeletConfiguration file (systemReserved, kubeReserved, evictionHard)")
	fs.StringVar(&o.kubeletConfigDir, "kubelet-config-dir", "", "the kubelet's --config-dir of drop-in files, if it uses one")
	fs.StringVar(&o.stateFile, "state-file", agent.DefaultStatePath, "where the decision state is kept across restarts (an emergency clamp survives a restart)")
	fs.StringVar(&o.memoryJitter, "memory-jitter", "100Mi", "memory drift that is not a change")
	fs.BoolVar(&o.enforce, "enforce", true, "clamp the kubepods cgroups at once when hardware goes away, and grow them back when it returns (cgroup v2; on v1 the daemon only reports)")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup v2 hierarchy is mounted")
	fs.BoolVar(&o.autoOnline, "auto-online", false, "bring hot-added CPUs online and hot-added memory blocks online as movable (for nodes without udev rules that do it)")
	fs.BoolVar(&o.release, "release", false, "allow planned releases: a configured capacity below the hardware whose request asks for one (the Node annotation "+types.AnnotationRelease+"=true, or node-resizectl resize --release) is carried out in the kernel: "+
		"once the pods that no longer fit are evicted, node-resized takes the CPUs and memory blocks above it offline, restarts the kubelet onto the smaller machine and says what the hypervisor may unplug; "+
		"a later request without it, or none, brings them back online. Off, a configured capacity below the hardware is only published and enforced")
	fs.DurationVar(&o.offlineTimeout, "release-offline-timeout", 30*time.Second, "with --release: give up on one CPU or memory block that has not gone offline within this long (the kernel may retry a memory block's page migration for ever) and try another")
	fs.StringVar(&o.kubeletUnit, "kubelet-unit", kubelet.DefaultUnit, "the kubelet's systemd unit: its state is read, and it is restarted, over systemd's D-Bus API")
	fs.StringVar(&o.kubeletRestart, "kubelet-restart", agent.RestartAuto, "auto: restart the kubelet (checkpoints made safe first) so that it adopts a changed machine; never: only say in the condition and node_resized_kubelet_restart_needed that a restart is needed")
	fs.DurationVar(&o.kubeletSettle, "kubelet-restart-settle", 10*time.Second, "restart the kubelet once the capacity has not changed for this long")
	fs.DurationVar(&o.kubeletMinInterval, "kubelet-restart-min-interval", 2*time.Minute, "at most one kubelet restart per this long")
	fs.StringVar(&o.kubeletBudget, "kubelet-restart-budget", decide.FormatBudget(decide.DefaultRestartBudget, decide.DefaultRestartBudgetWindow),
		"at most N kubelet restarts in any WINDOW (N/WINDOW); changes made meanwhile wait for the next restart it allows, with the clamp and the taint in place (node-problem-detector's FrequentKubeletRestart counts 5 starts in 20m)")
	fs.DurationVar(&o.kubeletRestartTimeout, "kubelet-restart-timeout", 2*time.Minute, "a restarted kubelet must be back Ready with the new capacity within this long; otherwise a KubeletRestartFailed event, and no second restart for that change")
	fs.StringVar(&o.kubeletFieldManager, "kubelet-field-manager", kubelet.DefaultFieldManager, "the kubelet's field manager in the Node's managedFields: its status.capacity writes are its view of the machine")
	fs.BoolVar(&o.kubeletPodResources, "kubelet-pod-resources", true, "ask the kubelet's pod-resources API (<kubelet-root-dir>/pod-resources/kubelet.sock) which CPUs and memory per NUMA node it knows")
	fs.BoolVar(&o.taintWhileStale, "taint-while-stale", false, "keep new pods off the node with the NoSchedule taint "+types.TaintKey+" from a capacity loss until the kubelet has adopted it; needs an identity that may patch the Node object (packaging/rbac.yaml): the NodeRestriction admission plugin forbids the kubelet's own identity to change taints")
	fs.BoolVar(&o.publishTopology, "publish-topology", false, "keep the Node's NodeResourceTopology object (topology.node.k8s.io/v1alpha2, for the scheduler's NodeResourceTopologyMatch plugin) equal to the NUMA topology, rewritten on every change; needs the CRD installed and an identity that may write it (packaging/rbac.yaml): the Node authorizer gives the kubelet's own identity no such right")
	fs.BoolVar(&o.evict, "evict", true, "evict pods that no longer fit after a capacity loss, in the kubelet's memory-pressure order, through the Eviction API")
	fs.BoolVar(&o.evictAsNode, "evict-as-node", false, "list and evict the node's pods as the node's own identity (system:node:<node-name>, constrained impersonation), so that the API server lets only pods on this node be evicted; for a DaemonSet's ServiceAccount (packaging/kubernetes)")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(help, usageHead)
			fs.SetOutput(help)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, fmt.Errorf("%w (see node-resized --help)", err)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "kubelet-config" {
			o.kubeletConfigSet = true
		}
	})
	if o.metricsAddress != "" {
		if o.listenAddress != "" && o.listenAddress != o.metricsAddress {
			return nil, fmt.Errorf("--metrics-address %s and --listen-address %s differ: --metrics-address is the old name of --listen-address; give only --listen-address", o.metricsAddress, o.listenAddress)
		}
		o.listenAddress = o.metricsAddress
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (node-resized takes flags only; see --help)", fs.Arg(0))
	}
	switch {
	case o.showVersion:
		return o, nil
	case o.standalone && o.publishTopology:
		return nil, errors.New("--publish-topology writes to the API server: drop it, or --standalone")
	case o.quiet <= 0:
		return nil, fmt.Errorf("--coalesce-quiet must be positive, got %s", o.quiet)
	case o.maxWait < o.quiet:
		return nil, fmt.Errorf("--coalesce-max (%s) must not be shorter than --coalesce-quiet (%s)", o.maxWait, o.quiet)
	case o.gainWindow < 0:
		return nil, fmt.Errorf("--coalesce-gains must not be negative (0 turns it off), got %s", o.gainWindow)
	case o.memPoll < 0 || o.resync < 0 || o.fsPoll < 0:
		return nil, errors.New("--memtotal-interval, --fs-interval and --resync-interval must not be negative (0 turns them off)")
	case o.history <= 0:
		return nil, fmt.Errorf("--history must be positive, got %d", o.history)
	case o.socket == "":
		return nil, errors.New("--socket must not be empty")
	case o.apiLimits.IdleTimeout <= 0 || o.apiLimits.ReadTimeout <= 0:
		return nil, errors.New("--api-idle-timeout and --api-read-timeout must be positive")
	case o.apiLimits.MaxConnections <= 0 || o.apiLimits.MaxStreams <= 0:
		return nil, fmt.Errorf("--api-max-connections (%d) and --api-max-streams (%d) must be positive", o.apiLimits.MaxConnections, o.apiLimits.MaxStreams)
	case o.kubeAPIQPS <= 0 || o.kubeAPIBurst <= 0:
		return nil, fmt.Errorf("--kube-api-qps (%v) and --kube-api-burst (%d) must be positive", o.kubeAPIQPS, o.kubeAPIBurst)
	case o.kubeletRestart != agent.RestartAuto && o.kubeletRestart != agent.RestartNever:
		return nil, fmt.Errorf("--kubelet-restart: want auto or never, got %q", o.kubeletRestart)
	case o.kubeletSettle <= 0 || o.kubeletMinInterval <= 0 || o.kubeletRestartTimeout <= 0:
		return nil, errors.New("--kubelet-restart-settle, --kubelet-restart-min-interval and --kubelet-restart-timeout must be positive")
	case o.kubeletUnit == "":
		return nil, errors.New("--kubelet-unit must not be empty")
	}
	var err error
	if o.kubeletBudgetN, o.kubeletBudgetWindow, err = decide.ParseBudget(o.kubeletBudget); err != nil {
		return nil, fmt.Errorf("--kubelet-restart-budget: %w", err)
	}
	if o.jitterBytes, err = resources.Parse(resources.Memory, o.memoryJitter); err != nil || o.jitterBytes < 0 {
		return nil, fmt.Errorf("--memory-jitter: want a quantity such as 100Mi, got %q", o.memoryJitter)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	switch o.logFormat {
	case "auto", "journal", "text", "json":
	default:
		return nil, fmt.Errorf("--log-format: want auto, journal, text or json, got %q", o.logFormat)
	}
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", s)
	}
	return l, nil
}

func newLogger(o *options, stderr io.Writer) *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	format := o.logFormat
	if format == "auto" {
		format = "text"
		if systemd.UnderJournal() {
			format = "journal"
		}
	}
	switch format {
	case "journal":
		return slog.New(systemd.NewJournalHandler("node-resized", level))
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	default:
		return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "kubelet-prestart" {
		os.Exit(kubeletPrestart(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "kubelet-recover" {
		os.Exit(kubeletRecover(os.Args[2:]))
	}
	o, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-resized:", err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("node-resized", version)
		return
	}
	if err := o.resolveNodeName(nodeNameLookup{getenv: os.Getenv, hostname: os.Hostname, identity: kube.NodeIdentity}); err != nil {
		fmt.Fprintln(os.Stderr, "node-resized:", err)
		os.Exit(2)
	}
	fixProcs(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(o, os.Stderr)
	if o.uninstall {
		if err := uninstall(ctx, o, log, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "node-resized:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, o, log); err != nil {
		// One clear line: to the journal with fields under systemd, plain
		// on stderr otherwise.
		if _, journal := log.Handler().(*systemd.JournalHandler); journal {
			log.Error("node-resized failed", "err", err)
		} else {
			fmt.Fprintln(os.Stderr, "node-resized:", err)
		}
		os.Exit(1)
	}
}
