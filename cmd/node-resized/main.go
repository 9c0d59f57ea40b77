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
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/resources"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/autoonline"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// reapplyInterval is how often the kubepods limits are checked against the
// last decision.
const reapplyInterval = 30 * time.Second

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usageHead = `node-resized follows CPU and memory hotplug on this machine and keeps an
exact model of it: kernel uevents (NETLINK_KOBJECT_UEVENT) trigger a rebuild
of the NUMA topology from sysfs within milliseconds, a MemTotal watch catches
balloon and virtio-mem changes that send no uevent, and a periodic resync is
the safety net. The model, the kubelet-exact physical capacity and every
change are served on a unix socket (ask it with node-resizectl or
curl --unix-socket).

As a Kubernetes node agent (the default) it also reads the Node's configured
capacity (spec.configuredCapacity, or the annotation
node-resized.io/configured-capacity), decides the capacity to publish with
KEP-3953's rules, and patches the Node's status, its CapacityConfigured
condition and events through the API server.

Usage:
  node-resized [flags]                 node agent (kubeconfig: the kubelet's own)
  node-resized --standalone [flags]    no cluster: detect, model, protect kubepods, serve locally

Examples:
  node-resized                                   node agent with the kubelet's kubeconfig
  node-resized --kubeconfig ~/.kube/config --node-name worker-1
  node-resized --standalone                      run against this machine
  node-resized --standalone --socket /tmp/nr.sock --log-level debug
  node-resized --standalone --sysfs-root /tmp/tree/sys --procfs-root /tmp/tree/proc --uevents=false
                                                 a synthetic machine (see topology/topologytest)

Run under systemd with: systemctl enable --now node-resized
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
	metricsAddress string
	uevents        bool
	ueventBuffer   int
	quiet          time.Duration
	maxWait        time.Duration
	memPoll        time.Duration
	resync         time.Duration
	history        int
	logLevel       string
	logFormat      string
	showVersion    bool

	kubeconfig       string
	nodeName         string
	kubeletConfig    string
	kubeletConfigSet bool
	kubeletConfigDir string
	stateFile        string
	memoryJitter     string
	evict            bool
	enforce          bool
	cgroupRoot       string
	autoOnline       bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("node-resized", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.standalone, "standalone", false, "run without a Kubernetes cluster: detect, model, clamp the kubepods cgroups and serve the local API (no Node patches, events or evictions)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "where sysfs is mounted (point at a synthetic tree for tests)")
	fs.StringVar(&o.procfsRoot, "procfs-root", "/proc", "where procfs is mounted")
	fs.StringVar(&o.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root directory; its filesystem's size is the ephemeral-storage capacity (empty: not measured)")
	fs.StringVar(&o.socket, "socket", api.DefaultSocket, "unix socket of the local API (created 0660, parent directory created)")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group that owns the socket, so its members can use node-resizectl without root")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "also serve /metrics on this TCP address, e.g. 127.0.0.1:9477 (empty: only on the socket)")
	fs.BoolVar(&o.uevents, "uevents", true, "listen to kernel uevents (turn off only with a synthetic --sysfs-root; the MemTotal watch and resyncs still run)")
	fs.IntVar(&o.ueventBuffer, "uevent-buffer", 16<<20, "receive buffer of the uevent socket in bytes (SO_RCVBUFFORCE when permitted)")
	fs.DurationVar(&o.quiet, "coalesce-quiet", 20*time.Millisecond, "rebuild once no event has arrived for this long (a burst of events becomes one change)")
	fs.DurationVar(&o.maxWait, "coalesce-max", 500*time.Millisecond, "rebuild at the latest this long after the first event of a burst")
	fs.DurationVar(&o.memPoll, "memtotal-interval", time.Second, "how often to check MemTotal for changes that send no uevent (0: off)")
	fs.DurationVar(&o.resync, "resync-interval", 5*time.Minute, "how often to rebuild the model in full as a safety net (0: off)")
	fs.IntVar(&o.history, "history", 256, "how many changes to keep for /v1/events")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto (journal under systemd, text otherwise), journal, text or json")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	hostname, _ := os.Hostname()
	fs.StringVar(&o.kubeconfig, "kubeconfig", kube.DefaultKubeconfig, "kubeconfig of the node's identity (the kubelet's own, so the Node authorizer applies); in a pod, the in-cluster config is used when this file is absent")
	fs.StringVar(&o.nodeName, "node-name", strings.ToLower(hostname), "the Node this daemon speaks for")
	fs.StringVar(&o.kubeletConfig, "kubelet-config", kubelet.DefaultPath, "the kubelet's KubeletConfiguration file (systemReserved, kubeReserved, evictionHard)")
	fs.StringVar(&o.kubeletConfigDir, "kubelet-config-dir", "", "the kubelet's --config-dir of drop-in files, if it uses one")
	fs.StringVar(&o.stateFile, "state-file", agent.DefaultStatePath, "where the decision state is kept across restarts (an emergency clamp survives a restart)")
	fs.StringVar(&o.memoryJitter, "memory-jitter", "100Mi", "memory drift that is not a change")
	fs.BoolVar(&o.enforce, "enforce", true, "clamp the kubepods cgroups at once when hardware goes away, and grow them back when it returns (cgroup v2; on v1 the daemon only reports)")
	fs.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup v2 hierarchy is mounted")
	fs.BoolVar(&o.autoOnline, "auto-online", false, "bring hot-added CPUs online and hot-added memory blocks online as movable (for nodes without udev rules that do it)")
	fs.BoolVar(&o.evict, "evict", true, "evict pods that no longer fit after a capacity loss, in the kubelet's memory-pressure order, through the Eviction API")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "kubelet-config" {
			o.kubeletConfigSet = true
		}
	})
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (node-resized takes flags only; see --help)", fs.Arg(0))
	}
	switch {
	case o.showVersion:
		return o, nil
	case !o.standalone && o.nodeName == "":
		return nil, errors.New("--node-name is empty and the hostname is unknown: set --node-name")
	case o.quiet <= 0:
		return nil, fmt.Errorf("--coalesce-quiet must be positive, got %s", o.quiet)
	case o.maxWait < o.quiet:
		return nil, fmt.Errorf("--coalesce-max (%s) must not be shorter than --coalesce-quiet (%s)", o.maxWait, o.quiet)
	case o.memPoll < 0 || o.resync < 0:
		return nil, errors.New("--memtotal-interval and --resync-interval must not be negative (0 turns them off)")
	case o.history <= 0:
		return nil, fmt.Errorf("--history must be positive, got %d", o.history)
	case o.socket == "":
		return nil, errors.New("--socket must not be empty")
	}
	if _, err := resource.ParseQuantity(o.memoryJitter); err != nil {
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
	o, err := parseFlags(os.Args[1:], os.Stderr)
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(o, os.Stderr)
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

// run runs the daemon until ctx is done.
func run(ctx context.Context, o *options, log *slog.Logger) error {
	fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
	if err != nil {
		return err
	}
	fsys = fsys.WithKubeletRootDir(o.kubeletRootDir)
	m := metrics.New()

	var src monitor.Source
	if o.uevents {
		l, err := uevent.Listen(uevent.Options{
			ReceiveBuffer: o.ueventBuffer,
			Logger:        log,
			OnEvent: func(subsystem string, action uevent.Action) {
				m.UeventsTotal.WithLabelValues(subsystem, action.String()).Inc()
			},
			OnDrop: func(reason uevent.DropReason, n int) {
				m.UeventsDropped.WithLabelValues(string(reason)).Add(float64(n))
			},
		})
		if err != nil {
			return fmt.Errorf("listen for kernel uevents: %w (run with --uevents=false to rely on the MemTotal watch and resyncs only)", err)
		}
		src = l
	}

	// Kubernetes mode: connect first (a missing kubeconfig is the one
	// error to report), then read the kubelet's configuration, then the
	// Node's configured capacity before the hardware (bootstrap parity).
	var (
		relay    *kube.Relay
		evictor  *kube.Evictor
		enforcer *cgroup.Enforcer
		agt      *agent.Agent
		mon      *monitor.Monitor
	)
	if !o.standalone {
		relay, err = kube.Connect(kube.Options{Kubeconfig: o.kubeconfig, NodeName: o.nodeName, Logger: log, Metrics: m})
		if err != nil {
			return err
		}
	}
	// The kubelet's configuration: reservations and the cgroup layout.
	kcfg, err := loadKubeletConfig(o, log)
	if err != nil {
		return err
	}

	if o.enforce && !kcfg.CgroupsPerQOS {
		log.Info("the kubelet runs without cgroupsPerQOS: there is no kubepods cgroup to enforce")
	}
	if o.enforce && kcfg.CgroupsPerQOS {
		enforcer, err = cgroup.New(cgroup.Options{
			Root: o.cgroupRoot, Driver: kcfg.CgroupDriver, CgroupRoot: kcfg.CgroupRoot,
			Logger: log, Metrics: m,
		})
		if err != nil {
			return fmt.Errorf("kubepods cgroup enforcer: %w (run with --enforce=false to only detect and report)", err)
		}
	}
	jitter := resource.MustParse(o.memoryJitter)
	acfg := agent.Config{
		Reservations: kcfg.Reservations,
		JitterMemory: jitter.Value(),
		StatePath:    o.stateFile,
		Logger:       log,
		Metrics:      m,
	}
	if enforcer != nil {
		acfg.Enforcer = enforcer
	}
	var pub agent.Relay = agent.LocalRelay{}
	if relay != nil {
		pub = relay
		if o.evict {
			eopts := kube.EvictorOptions{
				NodeName: o.nodeName,
				OnlineCPUs: func() []int {
					if snap, _ := mon.Snapshot(); snap != nil {
						return snap.CPUs.Online
					}
					return nil
				},
				ExclusiveCPUs: kubelet.ExclusiveCPUsFunc(filepath.Join(o.kubeletRootDirOrDefault(), "cpu_manager_state")),
				Report:        func(r decide.EvictionReport) { agt.ReportEviction(r) },
				Event:         relay.Event,
				Logger:        log,
				Metrics:       m,
			}
			if enforcer != nil {
				eopts.WorkingSet = enforcer.PodWorkingSet
			}
			evictor = kube.NewEvictor(relay.EvictionClient(), eopts)
			acfg.Evictor = evictor
		}
	}
	agt = agent.New(acfg, pub)
	if relay != nil {
		gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := relay.GetNode(gctx)
		gcancel()
		if err != nil {
			// Node-local work must not wait for the API server: go on
			// with the configured capacity the state file remembers.
			m.ResizeErrors.WithLabelValues("api_watch").Inc()
			log.Warn("read the Node at start; deciding from the remembered configured capacity until the API server answers", "node", o.nodeName, "err", err)
		} else {
			agt.OnNode(v)
			log.Info("read the Node", "node", o.nodeName, "configured_source", v.Source, "configured", v.Configured.Key())
		}
	} else {
		agt.OnNode(kube.NodeView{}) // standalone: no configured capacity
	}
	var subs []monitor.Subscriber
	var onliner *autoonline.Onliner
	if o.autoOnline {
		onliner = autoonline.New(o.sysfsRoot, log, m)
		subs = append(subs, onliner)
	}
	subs = append(subs, agt)

	mon = monitor.New(fsys, src, monitor.Config{
		Quiet:       o.quiet,
		MaxWait:     o.maxWait,
		MemPoll:     disabledIfZero(o.memPoll),
		Resync:      disabledIfZero(o.resync),
		History:     o.history,
		Subscribers: subs,
		Logger:      log,
		Metrics:     m,
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}

	goRun("detection loop", func() error { return mon.Run(ctx) })
	select {
	case <-mon.Ready():
	case <-ctx.Done():
		wg.Wait()
		return firstErr(errs)
	}

	ln, err := api.Listen(o.socket, o.socketGroup)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	hostname, _ := os.Hostname()
	info := api.Info{Version: version, Hostname: hostname, Mode: "standalone"}
	info.Kubernetes = func() *api.KubernetesStatus { return kubernetesStatus(o.nodeName, agt, relay) }
	if enforcer != nil {
		info.Enforcement = func() any { return enforcer.Status() }
	}
	goRun("decision loop", func() error { return agt.Run(ctx) })
	if onliner != nil {
		goRun("auto-online", func() error { return onliner.Run(ctx) })
	}
	if enforcer != nil {
		// A kubelet that (re)starts writes kubepods from its own view of
		// the machine; put back what the last decision enforces. Reapply
		// reads a few files and writes nothing while they hold.
		goRun("kubepods re-assert", func() error {
			t := time.NewTicker(reapplyInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
					snap, _ := mon.Snapshot()
					if err := enforcer.Reapply(ctx, snap); err != nil {
						log.Warn("re-assert the kubepods limits", "err", err)
					}
				}
			}
		})
	}
	if relay != nil {
		info.Mode = "kubernetes"
		goRun("API relay", func() error { return relay.Run(ctx) })
		if evictor != nil {
			goRun("evictor", func() error { return evictor.Run(ctx) })
		}
		goRun("Node watch", func() error {
			return relay.Watch(ctx, func(v kube.NodeView) {
				agt.OnNode(v)
				relay.Republish(v)
			})
		})
	}
	srv := api.NewServer(mon, m, info, log)
	goRun("local API", func() error { return srv.Serve(ctx, ln) })
	if o.metricsAddress != "" {
		mln, err := net.Listen("tcp", o.metricsAddress)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("--metrics-address %s: %w", o.metricsAddress, err)
		}
		goRun("metrics listener", func() error { return srv.ServeMetrics(ctx, mln) })
	}
	goRun("systemd watchdog", func() error {
		return systemd.Watchdog(ctx, func() bool {
			c, done := context.WithTimeout(ctx, 5*time.Second)
			defer done()
			return mon.Alive(c)
		})
	})

	snap, capac := mon.Snapshot()
	log.Info("node-resized ready",
		"version", version, "mode", info.Mode, "node", o.nodeName, "socket", o.socket, "metrics_address", o.metricsAddress,
		"sysfs_root", o.sysfsRoot, "procfs_root", o.procfsRoot, "uevents", o.uevents,
		"capacity", capac.String(), "cpus_online", snap.CPUs.Online.String())
	if err := systemd.Ready(fmt.Sprintf("watching %s CPUs, %s memory", resources.Format(resources.CPU, capac[resources.CPU]), api.FormatBytes(uint64(capac[resources.Memory])))); err != nil {
		log.Warn("tell systemd we are ready", "err", err)
	}

	<-ctx.Done()
	systemd.Stopping()
	log.Info("shutting down")
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func firstErr(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// loadKubeletConfig reads the kubelet's configuration. A missing file at
// the default path means a kubelet with defaults; a missing file that was
// named explicitly is an error.
func loadKubeletConfig(o *options, log *slog.Logger) (*kubelet.Config, error) {
	var opts []kubelet.Option
	if o.kubeletConfigDir != "" {
		opts = append(opts, kubelet.WithDropInDir(o.kubeletConfigDir))
	}
	cfg, err := kubelet.Load(o.kubeletConfig, opts...)
	if errors.Is(err, fs.ErrNotExist) && !o.kubeletConfigSet {
		log.Info("no kubelet configuration file; using the kubelet's defaults (no reservations, evictionHard memory.available 100Mi, cgroupfs driver)", "path", o.kubeletConfig)
		return kubelet.Default(), nil
	}
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		log.Warn("kubelet configuration", "path", o.kubeletConfig, "warning", w)
	}
	return cfg, nil
}

// kubeletRootDirOrDefault is the kubelet's root directory for its
// checkpoints, also when ephemeral-storage is not measured.
func (o *options) kubeletRootDirOrDefault() string {
	if o.kubeletRootDir == "" {
		return "/var/lib/kubelet"
	}
	return o.kubeletRootDir
}

// kubernetesStatus renders the agent's and the relay's view for the API.
func kubernetesStatus(node string, a *agent.Agent, r *kube.Relay) *api.KubernetesStatus {
	st := a.Status()
	var rs kube.Stats
	if r != nil {
		rs = r.Stats()
	} else {
		node = ""
	}
	out := &api.KubernetesStatus{
		NodeName:         node,
		Configured:       st.Configured.Raw,
		ConfiguredSource: st.ConfiguredSource,
		Target:           st.Target,
		Allocatable:      st.Allocatable,
		Condition: api.Condition{
			Status:             string(st.Condition.Status),
			Reason:             string(st.Condition.Reason),
			Message:            st.Condition.Message,
			LastTransitionTime: st.Condition.LastTransitionTime,
		},
		Error:        st.Error,
		Patches:      rs.Patches,
		LastPatch:    rs.LastPatch,
		PatchError:   rs.LastError,
		PatchPending: rs.Pending,
	}
	if st.Configured.Invalid != "" {
		out.Configured = map[string]string{"invalid": st.Configured.Invalid}
	}
	return out
}
