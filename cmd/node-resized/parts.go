package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/hotplug"
	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/kube/evict"
	"github.com/node-resized/node-resized/kube/nrt"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/kubelet/lifecycle"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
	"github.com/node-resized/node-resized/uevent"
)

// parts are the daemon's pieces, built and wired but not running. The
// optional ones are nil when the options leave them out.
type parts struct {
	monitor  *monitor.Monitor
	agent    *agent.Agent
	onliner  *hotplug.AutoOnliner
	releaser *hotplug.Releaser // --release: the planned release's offlines and give backs
	writer   *hotplug.Writer   // the one writer of the hotplug files (auto-onliner, releaser)
	enforcer *cgroup.Enforcer
	relay    *kube.Relay
	nrt      *nrt.Publisher
	evictor  *evict.Evictor
	watcher  *kubelet.Watcher
	recovery *lifecycle.Restarter // starts a kubelet a restart left stopped
	systemd  *systemd.Client
	api      *api.Server
	info     api.Info
	socket   net.Listener
	tcp      net.Listener
}

// assemble builds every part. The detection inputs come first (a wrong
// --sysfs-root is the error to report before any other), then the API
// client (then a missing kubeconfig), then the data path read backwards:
// the kubelet's configuration, the actuators, the decision loop that
// drives them, and the detection loop that feeds it.
func assemble(ctx context.Context, o *options, log *slog.Logger) (*parts, error) {
	p := &parts{}
	m := metrics.New()
	m.RegisterBuildInfo(version)
	fsys, src, err := detectionInputs(o, log, m)
	if err != nil {
		return nil, err
	}
	if !o.standalone {
		if p.relay, err = kube.Connect(kube.Options{
			Kubeconfig: o.kubeconfig, NodeName: o.nodeName, QPS: float32(o.kubeAPIQPS), Burst: o.kubeAPIBurst, Logger: log, Metrics: m,
			Taint: o.taintWhileStale, EvictAsNode: o.evictAsNode, GainWindow: o.gainWindow,
		}); err != nil {
			return nil, err
		}
		// Said once the kubeconfig is known good: a bad one is the one
		// error line to give.
		args := []any{"node", o.nodeName, "nodeNameSource", o.nodeNameSource}
		if o.nodeNameSkipped != nil {
			args = append(args, "kubeconfig_identity", o.nodeNameSkipped.Error())
		}
		log.Info("node name", args...)
	}
	kcfg, err := loadKubeletConfig(o, log)
	if err != nil {
		return nil, err
	}
	if p.enforcer, err = newEnforcer(o, kcfg, log, m); err != nil {
		return nil, err
	}
	if p.relay != nil && o.evict {
		p.evictor = newEvictor(o, p.relay, p.enforcer, log, m)
	}
	var restarter agent.KubeletRestarter
	if p.relay != nil {
		p.systemd = systemd.NewClient()
		if restarter, err = newRestarter(o, kcfg, p.systemd, log); err != nil {
			return nil, err
		}
		p.recovery = p.withRecovery(restarter, o, log, m)
	}
	if o.autoOnline || o.release {
		p.writer = hotplug.NewWriter(o.sysfsRoot, hotplug.Config{Metrics: m, BlockTimeout: o.offlineTimeout, CPUTimeout: o.offlineTimeout})
	}
	if o.release {
		if p.releaser, err = newReleaser(o, kcfg, fsys, p.writer, log); err != nil {
			return nil, err
		}
	}
	p.agent = newAgent(o, kcfg, p.relay, p.enforcer, p.evictor, restarter, p.releaser, log, m)
	if p.recovery != nil {
		// A recovery's start counts in the restart budget.
		p.recovery.Started = p.agent.KubeletStarted
	}
	if p.relay != nil {
		p.watcher = newWatcher(o, kcfg, p.systemd, p.agent, log)
		p.agent.SetAfterRestart(p.watcher.Poke)
		// The watcher reads the kubelet's status writes first, so that the
		// agent decides on a Node and a kubelet view of the same moment.
		p.relay.Subscribe(p.watcher, p.agent) // both take every view of the Node the relay's watch sees
	}
	if p.relay != nil && o.publishTopology {
		p.nrt = newTopologyPublisher(o, kcfg, p.relay, log, m)
	}
	p.readNode(ctx, o, log, m)
	subs := p.subscribers(o, log, m)
	var busy func() bool
	if p.relay != nil {
		// A gain is held until the agent's pass on the newest model is
		// done, so that a status it is about to replace does not go out
		// first.
		pending := p.agent.Deciding
		if p.onliner != nil {
			// And while the onliner has blocks to bring online, or has
			// brought some that no model shows yet.
			pending = func() bool { return p.onliner.Settling() || p.agent.Deciding() }
		}
		p.relay.HoldGainsWhile(pending) // one patch, however slowly a DIMM's blocks reach the model and the agent
	}
	if p.onliner != nil {
		busy = p.onliner.Busy // a DIMM being onlined block by block is one burst
	}
	p.monitor = newMonitor(o, fsys, src, subs, busy, log, m)
	if p.releaser != nil {
		// A finished release is taken on a model that shows it.
		p.agent.SetResync(func(ctx context.Context) error {
			_, err := p.monitor.Resync(ctx)
			return err
		})
	}
	if p.socket, p.tcp, err = listeners(o); err != nil {
		return nil, err
	}
	p.info = p.apiInfo(o)
	p.api = api.NewServer(p.monitor, m, p.info, log)
	return p, nil
}

// newEnforcer builds the kubepods enforcer, or nil when there is nothing
// to enforce.
func newEnforcer(o *options, kcfg *kubelet.Config, log *slog.Logger, m *metrics.Metrics) (*cgroup.Enforcer, error) {
	if !o.enforce {
		return nil, nil
	}
	if !kcfg.CgroupsPerQOS {
		log.Info("the kubelet runs without cgroupsPerQOS: there is no kubepods cgroup to enforce")
		return nil, nil
	}
	e, err := cgroup.New(cgroup.Options{
		Root: o.cgroupRoot, Driver: kcfg.CgroupDriver, CgroupRoot: kcfg.CgroupRoot, Logger: log, Metrics: m,
	})
	if err != nil {
		return nil, fmt.Errorf("kubepods cgroup enforcer: %w (run with --enforce=false to only detect and report)", err)
	}
	return e, nil
}

// newTopologyPublisher builds the writer of the Node's
// NodeResourceTopology object, with what the kubelet's configuration says
// about topology.
func newTopologyPublisher(o *options, kcfg *kubelet.Config, relay *kube.Relay, log *slog.Logger, m *metrics.Metrics) *nrt.Publisher {
	kt := nrt.KubeletTopology{
		TopologyManagerPolicy: kcfg.TopologyManagerPolicy,
		ReservedCPUs:          topology.CPUSet(kcfg.ReservedCPUs),
	}
	if kcfg.Raw != nil {
		kt.TopologyManagerScope = kcfg.Raw.TopologyManagerScope
	}
	if rm, err := kcfg.ReservedMemory(); err == nil {
		kt.ReservedMemory = rm
	}
	no := nrt.Options{NodeName: o.nodeName, Kubelet: kt, Logger: log, Metrics: m}
	if o.kubeletPodResources {
		// The pod fingerprint, from the pods the kubelet lists, as
		// node-feature-discovery computes it.
		socket := filepath.Join(o.kubeletRootDirOrDefault(), "pod-resources", "kubelet.sock")
		no.Pods = func(ctx context.Context) ([]nrt.Pod, error) {
			names, err := kubelet.ListPods(ctx, socket)
			pods := make([]nrt.Pod, len(names))
			for i, n := range names {
				pods[i] = nrt.Pod{Namespace: n.Namespace, Name: n.Name}
			}
			return pods, err
		}
	}
	return nrt.New(relay.Client(), no)
}

// newEvictor builds the emergency evictor of the node's pods.
func newEvictor(o *options, relay *kube.Relay, enforcer *cgroup.Enforcer, log *slog.Logger, m *metrics.Metrics) *evict.Evictor {
	eo := evict.Options{
		NodeName:      o.nodeName,
		ExclusiveCPUs: checkpoint.ExclusiveCPUsFunc(filepath.Join(o.kubeletRootDirOrDefault(), "cpu_manager_state")),
		Event:         relay.Event,
		Logger:        log,
		Metrics:       m,
	}
	if enforcer != nil {
		eo.WorkingSet = enforcer.PodWorkingSet
	}
	return evict.New(relay.EvictionClient(), eo)
}

// newReleaser builds the planned release's actuator: it records what it
// takes offline beside the state file, never releases the kubelet's
// reserved CPUs, and reads the exclusive CPU assignments from the
// kubelet's CPU manager checkpoint before each step. A record it cannot
// use is moved aside (and said so); it then starts with nothing released.
func newReleaser(o *options, kcfg *kubelet.Config, fsys topology.FS, w *hotplug.Writer, log *slog.Logger) (*hotplug.Releaser, error) {
	exclusive := checkpoint.ExclusiveCPUsFunc(filepath.Join(o.kubeletRootDirOrDefault(), "cpu_manager_state"))
	r, err := hotplug.NewReleaser(hotplug.ReleaserConfig{
		FS:           fsys,
		Writer:       w,
		RecordPath:   filepath.Join(filepath.Dir(o.stateFile), hotplug.RecordFile),
		ReservedCPUs: topology.CPUSet(kcfg.ReservedCPUs),
		Exclusive: func() (map[int]string, error) {
			byPod, err := exclusive()
			if err != nil {
				return nil, err
			}
			out := map[int]string{}
			for uid, cpus := range byPod {
				for _, c := range cpus {
					out[c] = uid
				}
			}
			return out, nil
		},
		Logger: log,
	})
	if err != nil {
		log.Warn("the planned release's record was not used; nothing is held released", "err", err)
	}
	if r == nil {
		return nil, fmt.Errorf("the planned release: %w", err)
	}
	return r, nil
}

// newRestarter builds the kubelet's restarter: its unit over D-Bus, its
// checkpoints under the kubelet's root directory.
func newRestarter(o *options, kcfg *kubelet.Config, sd *systemd.Client, log *slog.Logger) (agent.KubeletRestarter, error) {
	r, err := lifecycle.NewRestarter(sd, o.kubeletUnit, o.kubeletRootDirOrDefault(), kcfg)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's restart: %w", err)
	}
	r.Rollback.HoldPath = filepath.Join(filepath.Dir(o.stateFile), lifecycle.HoldFile)
	r.Logger = log
	return restarter{r}, nil
}

// restarter adapts *lifecycle.Restarter to the agent's interface.
type restarter struct{ *lifecycle.Restarter }

func (r restarter) Restart(ctx context.Context, snap *topology.Snapshot) (string, error) {
	res, err := r.Restarter.Restart(ctx, snap)
	return string(res), err
}

// newWatcher builds the part that follows what the running kubelet
// believes; it feeds the agent.
func newWatcher(o *options, kcfg *kubelet.Config, sd *systemd.Client, sink kubelet.Sink, log *slog.Logger) *kubelet.Watcher {
	wo := kubelet.WatcherOptions{
		Unit:         o.kubeletUnit,
		Systemd:      sd,
		ReservedCPUs: topology.CPUSet(kcfg.ReservedCPUs),
		FieldManager: o.kubeletFieldManager,
		JitterMemory: o.jitterBytes,
		Sink:         sink,
		Logger:       log,
	}
	if rm, err := kcfg.ReservedMemory(); err == nil && len(rm) > 0 {
		wo.ReservedMemory = rm
	}
	if o.kubeletPodResources {
		socket := filepath.Join(o.kubeletRootDirOrDefault(), "pod-resources", "kubelet.sock")
		wo.PodResources = func(ctx context.Context) (kubelet.Allocatable, error) {
			return kubelet.AllocatableResources(ctx, socket)
		}
	}
	return kubelet.NewWatcher(wo)
}

// newAgent builds the decision loop over its actuators.
func newAgent(o *options, kcfg *kubelet.Config, relay *kube.Relay, enforcer *cgroup.Enforcer, evictor *evict.Evictor,
	restarter agent.KubeletRestarter, releaser *hotplug.Releaser, log *slog.Logger, m *metrics.Metrics) *agent.Agent {
	cfg := agent.Config{
		Reservations: kcfg.Reservations,
		ReservedCPUs: kcfg.ReservedCPUs,
		JitterMemory: o.jitterBytes,
		StatePath:    o.stateFile,
		Logger:       log,
		Metrics:      m,
		Policy: decide.Policy{
			SettleDelay:         o.kubeletSettle,
			RestartInterval:     o.kubeletMinInterval,
			RestartTimeout:      o.kubeletRestartTimeout,
			RestartBudget:       o.kubeletBudgetN,
			RestartBudgetWindow: o.kubeletBudgetWindow,
			// Standalone there is no Node to taint.
			TaintWhileStale: o.taintWhileStale && relay != nil,
		},
		KubeletRestart: o.kubeletRestart,
		KubeletUnit:    o.kubeletUnit,
		Restarter:      restarter,
	}
	// Typed nils must not become non-nil interfaces.
	if enforcer != nil {
		cfg.Enforcer = enforcer
	}
	if evictor != nil {
		cfg.Evictor = evictor
	}
	if releaser != nil {
		cfg.Release, cfg.Releaser = true, releaser
	}
	var pub agent.Relay = agent.LocalRelay{}
	if relay != nil {
		pub = relay
		cfg.StatusSettled = relay.StatusSettled
	}
	return agent.New(cfg, pub)
}

// readNode gives the agent the Node's configured capacity before the
// hardware (bootstrap parity). Node-local work must not wait for the API
// server: when it does not answer, the agent goes on with the configured
// capacity its state file remembers.
func (p *parts) readNode(ctx context.Context, o *options, log *slog.Logger, m *metrics.Metrics) {
	if p.relay == nil {
		p.agent.OnNode(types.NodeView{}) // standalone: no configured capacity
		return
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := p.relay.GetNode(gctx)
	if err != nil {
		m.ResizeErrors.WithLabelValues("api_watch").Inc()
		log.Warn("read the Node at start; deciding from the remembered configured capacity until the API server answers", "node", o.nodeName, "err", err)
		return
	}
	if p.watcher != nil {
		p.watcher.OnNode(v)
	}
	p.agent.OnNode(v)
	log.Info("read the Node", "node", o.nodeName, "configured_source", v.Source, "configured", v.Configured.Key())
}

// subscribers are the parts told of every model change, in order: the
// onliner and the NodeResourceTopology publisher first (they only queue
// work), then the decision loop, then the kubelet watcher.
func (p *parts) subscribers(o *options, log *slog.Logger, m *metrics.Metrics) []monitor.Subscriber {
	var subs []monitor.Subscriber
	if o.autoOnline {
		p.onliner = hotplug.NewAutoOnliner(p.writer, log, m)
		subs = append(subs, p.onliner)
	}
	if p.nrt != nil {
		// Only queues the newest model for the publisher's worker.
		subs = append(subs, monitor.SubscriberFunc(func(c monitor.Change, snap *topology.Snapshot) {
			var since time.Time
			if c.LatencySeconds > 0 {
				since = c.Time.Add(-c.Latency())
			}
			p.nrt.Publish(snap, since)
		}))
	}
	subs = append(subs, p.agent)
	if p.watcher != nil {
		// Is the kubelet stale against the new machine? A view that
		// says so wakes the agent, which must have taken the machine
		// first: told before it, the watcher woke a pass on the machine
		// as it was before the change.
		subs = append(subs, p.watcher)
	}
	return subs
}

// detectionInputs opens sysfs and procfs and, unless turned off, the
// kernel's uevent socket.
func detectionInputs(o *options, log *slog.Logger, m *metrics.Metrics) (topology.FS, monitor.Source, error) {
	fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
	if err != nil {
		return topology.FS{}, nil, err
	}
	fsys = fsys.WithKubeletRootDir(o.kubeletRootDir)
	var src monitor.Source
	if o.uevents {
		l, err := uevent.Listen(listenerOptions(o, log, m))
		if err != nil {
			return topology.FS{}, nil, fmt.Errorf("listen for kernel uevents: %w (run with --uevents=false to rely on the MemTotal and filesystem watches and resyncs only)", err)
		}
		src = l
	}
	return fsys, src, nil
}

// listenerOptions are the uevent listener's: the subsystems whose uevents
// change the capacity (the listener's default cpu, memory and node), and
// block while the filesystem watch runs, for a disk's resize (RESIZE=1),
// which makes it poll fast for a while. Every uevent delivered is counted
// by subsystem and action.
func listenerOptions(o *options, log *slog.Logger, m *metrics.Metrics) uevent.Options {
	var subsystems []string
	if o.fsWatch() {
		subsystems = append(uevent.DefaultSubsystems(), uevent.SubsystemBlock)
	}
	return uevent.Options{
		Subsystems:    subsystems,
		ReceiveBuffer: o.ueventBuffer,
		Logger:        log,
		OnEvent: func(subsystem string, action uevent.Action) {
			m.UeventsTotal.WithLabelValues(subsystem, action.String()).Inc()
		},
		OnDrop: func(reason uevent.DropReason, n int) {
			m.UeventsDropped.WithLabelValues(string(reason)).Add(float64(n))
		},
	}
}

// newMonitor builds the detection loop.
func newMonitor(o *options, fsys topology.FS, src monitor.Source, subs []monitor.Subscriber, busy func() bool,
	log *slog.Logger, m *metrics.Metrics) *monitor.Monitor {
	return monitor.New(fsys, src, monitor.Config{
		Quiet:       o.quiet,
		MaxWait:     o.maxWait,
		Busy:        busy,
		MemPoll:     disabledIfZero(o.memPoll),
		FSPoll:      o.fsPollOrOff(),
		Resync:      disabledIfZero(o.resync),
		History:     o.history,
		Subscribers: subs,
		Logger:      log,
		Metrics:     m,
	})
}

// apiInfo names what the local API shows.
func (p *parts) apiInfo(o *options) api.Info {
	hostname, _ := os.Hostname()
	info := api.Info{Version: version, Hostname: hostname, Mode: "standalone", Decisions: p.agent}
	if p.enforcer != nil {
		info.Enforcement = p.enforcer
	}
	if p.relay != nil {
		info.Mode, info.NodeName, info.NodeNameSource, info.Relay = "kubernetes", o.nodeName, o.nodeNameSource, p.relay
	}
	return info
}

// fsWatch says whether the filesystem watch runs: --fs-interval is not 0
// and there is a kubelet root directory to measure.
func (o *options) fsWatch() bool {
	return o.fsPoll > 0 && o.kubeletRootDir != ""
}

// fsPollOrOff is the monitor's FSPoll: --fs-interval, or negative (off) when
// the filesystem watch does not run.
func (o *options) fsPollOrOff() time.Duration {
	if !o.fsWatch() {
		return -1
	}
	return o.fsPoll
}

// disabledIfZero maps the flags' 0 (off) to the monitor's negative.
func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
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
