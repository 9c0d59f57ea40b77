package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// Relay publishes to the API server. *kube.Relay satisfies it. Neither
// method may block.
type Relay interface {
	Publish(types.NodeStatus)
	Event(eventType types.EventType, reason, message string)
}

// Enforcer writes the kubepods cgroup limits (*cgroup.Enforcer is one).
// It is called on the agent's goroutine and should return quickly.
type Enforcer interface {
	// Apply writes r's limits, with the online CPUs for a cpuset that
	// carries a list of its own.
	Apply(ctx context.Context, r cgroup.Request, online topology.CPUSet) error
}

// LimitsReader is an Enforcer that can also read the kubepods limits as
// they stand (*cgroup.Enforcer is one). The first pass of a daemon with no
// state to resume from compares them with what the kubelet would write for
// the hardware, so that a machine that shrank while the daemon was not
// running is clamped (Path B); the first pass of one that resumed names
// those that no longer hold the applied target's (ReassertCgroups).
type LimitsReader interface {
	Current() (decide.CgroupLimits, error)
}

// WriteTimer is an Enforcer that tells when its last Apply wrote its last
// file (*cgroup.Enforcer is one): a clamp's latency ends there, not after
// the read-backs and the files that needed no write.
type WriteTimer interface {
	LastWrite() time.Time
}

// Evictor brings the node's pods within an allocatable. Start must not
// block; progress comes back through Agent.ReportEviction.
type Evictor interface {
	// Start begins bringing the pods within e's allocatable, with the
	// CPUs online now; progress goes to report.
	Start(ctx context.Context, e decide.Evict, online []int, report func(types.EvictionReport))
}

// KubeletRestarter restarts the kubelet into a changed machine
// (*lifecycle.Restarter, through a small adapter).
type KubeletRestarter interface {
	// Check says why the kubelet may not be restarted into the machine
	// snap now (a checkpoint that cannot be made safe); nil when it may.
	// It only reads, but it reads files: it is called on the agent's
	// goroutine, before a decision only when that decision may restart
	// the kubelet, and otherwise after the pass's actions, so never
	// between a loss and its clamp.
	Check(snap *topology.Snapshot) error
	// Restart restarts it and waits for the result: "done" when systemd
	// started it again. It is called off the agent's goroutine.
	Restart(ctx context.Context, snap *topology.Snapshot) (result string, err error)
}

// Releaser carries out planned releases and their give backs
// (*hotplug.Releaser is one).
type Releaser interface {
	// Release takes the CPUs and memory blocks above x.Capacity offline,
	// recording each durably before it writes it, and picks up where an
	// earlier release stopped (a daemon killed in between). It returns at
	// once; progress goes to report, the last report Done.
	Release(ctx context.Context, x decide.Release, snap *topology.Snapshot, report func(types.ReleaseReport))
	// GiveBack brings back online what it released and is still present,
	// and only that; it returns at once and reports as Release does.
	GiveBack(ctx context.Context, x decide.GiveBack, report func(types.ReleaseReport))
	// StaysOnline says which of snap's online CPUs a release to target
	// (cpu) would leave online: the evictions before a release take it
	// for the CPUs online, so that a pod whose exclusive CPU the release
	// must take is evicted first and never silently loses it. nil when
	// it cannot tell (then the CPUs online now are used).
	StaysOnline(snap *topology.Snapshot, target resources.List) []int
	// Released says what it holds released on the machine snap. It
	// reads no file but the ones snap leaves out, and is cheap to call
	// on every pass.
	Released(snap *topology.Snapshot) types.Released
}

// Kubelet restart modes (Config.KubeletRestart).
const (
	RestartAuto  = "auto"
	RestartNever = "never"
)

// LocalRelay stands in for the API relay in standalone mode: there is no
// Node to patch and no API to record events in (the agent logs them).
type LocalRelay struct{}

// Publish implements Relay: nothing to publish without a cluster.
func (LocalRelay) Publish(types.NodeStatus) {}

// Event implements Relay: the agent has logged the event already.
func (LocalRelay) Event(types.EventType, string, string) {}

var (
	_ Relay = LocalRelay{}
)

// Config configures the agent.
type Config struct {
	Reservations decide.Reservations
	// ReservedCPUs are the kubelet's reservedSystemCPUs, by id.
	ReservedCPUs []int
	// JitterMemory is the memory drift that is not a change (0: 100Mi).
	JitterMemory int64
	Policy       decide.Policy
	// StatePath is the state file; empty keeps the state in memory only.
	StatePath string
	Logger    *slog.Logger
	Metrics   *metrics.Metrics
	// Enforcer and Evictor may be nil: cgroup limits are then not
	// enforced, and an eviction counts as done at once.
	Enforcer Enforcer
	Evictor  Evictor
	// Clock is the agent's time (default the real clock): decisions are
	// taken at its Now, and requeued passes wait on its timers.
	Clock clock.WithTicker
	// KubeletRestart is RestartAuto (the default) or RestartNever;
	// Restarter carries restarts out (nil: none is, and the condition says
	// so). KubeletUnit names the unit in messages (kubelet.service when
	// empty). AfterRestart, when set, is called once a restart ended (to
	// look at the kubelet again at once).
	KubeletRestart string
	Restarter      KubeletRestarter
	KubeletUnit    string
	AfterRestart   func()
	// StatusSettled, when set, returns a channel closed once the Node
	// status patch under way has been answered (nil when none is under
	// way). A kubelet restart waits for it, at most StatusBeforeRestart,
	// so that the Node shows the capacity the kubelet is restarted for
	// before the kubelet goes down: a slow patch does not fall behind the
	// settle delay.
	StatusSettled func() <-chan struct{}
	// Resync, when set, rebuilds the machine model at once and returns
	// once the agent has it (the monitor's Resync). A release or give back
	// that is done waits for it, at most ResyncBeforeReleaseDone, before
	// its report is taken: the pass that takes the report then sees the
	// machine the last offline left, not the model of a moment before.
	Resync func(context.Context) error
	// Release says that the node allows planned releases (--release):
	// a configured capacity that asks for one (types.AnnotationRelease)
	// is then carried out in the kernel by Releaser. Without a Releaser
	// none is.
	Release  bool
	Releaser Releaser
}

// Status is the agent's view for the local API. It is a plain value.
type Status struct {
	Configured       types.Configured `json:"configured"`
	ConfiguredSource string           `json:"configuredSource,omitempty"`
	Target           resources.List   `json:"target,omitempty"`
	Allocatable      resources.List   `json:"allocatable,omitempty"`
	Condition        types.Condition  `json:"condition"`
	Error            string           `json:"error,omitempty"`
	Decisions        uint64           `json:"decisions"`
	LastDecision     time.Time        `json:"lastDecision,omitempty"`
	// Taint is the taint node-resized keeps on the Node while the kubelet
	// has not adopted a loss (--taint-while-stale); empty when none.
	Taint string `json:"taint,omitempty"`
	// LimitsFailed says why the kubepods limits of the target did not
	// land (the last write failed; it is retried); empty when they did.
	LimitsFailed string `json:"limitsFailed,omitempty"`
	// Kubelet is what is known of the running kubelet and of its
	// restarts; nil while nothing is.
	Kubelet *KubeletStatus `json:"kubelet,omitempty"`
	// Release is the planned release's state; nil while none is allowed
	// and nothing is held released.
	Release *ReleaseStatus `json:"release,omitempty"`
}

// ReleaseStatus is the planned release's state, for the local API. It is a
// plain value.
type ReleaseStatus struct {
	// Allowed says that the node allows planned releases (--release).
	Allowed bool `json:"allowed"`
	// Releasing and GivingBack say what is under way.
	Releasing  bool `json:"releasing,omitempty"`
	GivingBack bool `json:"givingBack,omitempty"`
	// Short says what the last release could not take offline.
	Short string `json:"short,omitempty"`
	// Released is what node-resized holds offline, and what of it is
	// safe to unplug.
	types.Released
}

// KubeletStatus is the kubelet's view and the restarts' state, for the
// local API. It is a plain value.
type KubeletStatus struct {
	types.KubeletView
	// Restart is the restart mode (auto, never); RestartBlocked why the
	// kubelet may not be restarted now (empty when it may, or need not).
	Restart        string `json:"restart"`
	RestartBlocked string `json:"restartBlocked,omitempty"`
	// Restarting is true while a restart runs; LastRestart is how the last
	// one ended.
	Restarting  bool           `json:"restarting,omitempty"`
	LastRestart *RestartRecord `json:"lastRestart,omitempty"`
	// RestartBudget is the most kubelet starts node-resized causes in any
	// window of the given length ("3/20m"), RecentRestarts those in the
	// window now, oldest first: the restarts it asked for, and the starts
	// of its rollbacks and recoveries. RestartWaiting says what a
	// restart that is needed and allowed waits for (settle, interval,
	// budget), and NextRestart until when.
	RestartBudget  string      `json:"restartBudget"`
	RecentRestarts []time.Time `json:"recentRestarts,omitempty"`
	RestartWaiting string      `json:"restartWaiting,omitempty"`
	NextRestart    time.Time   `json:"nextRestart,omitzero"`
}

// RestartRecord is one kubelet restart the daemon did.
type RestartRecord struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"`
	Error  string    `json:"error,omitempty"`
}

// Agent is safe for concurrent use; Run must be called once.
type Agent struct {
	cfg   Config
	clock clock.WithTicker
	relay Relay
	log   *slog.Logger
	m     *metrics.Metrics
	wake  chan struct{}
	// started is set after the first pass, reasserted after the first
	// that the physical reading was not refused on (the limits applied
	// before the start are re-asserted then); only Run's goroutine uses
	// them.
	started, reasserted bool
	// models counts the machine models given (OnChange); decided is the
	// count the last finished pass had been given when it gathered its
	// input (Deciding).
	models, decided atomic.Uint64

	mu sync.Mutex // guards the inputs and the status below
	// Inputs.
	physical    *decide.Physical
	snap        *topology.Snapshot
	since       time.Time // first uevent of the hardware changes no pass has decided on yet
	configured  types.Configured
	source      string
	haveNode    bool
	eviction    types.EvictionReport
	kubelet     *types.KubeletView  // nil until the first view
	report      types.RestartReport // of the last restart that ended
	restarting  bool
	lastRestart *RestartRecord
	// starts are the kubelet starts node-resized caused besides the
	// restarts it asked for (a rollback's, a recovery's) that no pass has
	// taken into the restart history yet, oldest first.
	starts   []time.Time
	restarts sync.WaitGroup
	release  types.ReleaseReport // the releaser's last report
	// unplugSeries are the devices node_resized_memory_device_safe_to_unplug
	// has a series for.
	unplugSeries []string
	// Output.
	state  decide.State
	status Status
}

// New returns an agent that resumes from the state file, if there is one.
func New(cfg Config, relay Relay) *Agent {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.KubeletRestart == "" {
		cfg.KubeletRestart = RestartAuto
	}
	if cfg.KubeletUnit == "" {
		cfg.KubeletUnit = "kubelet.service"
	}
	a := &Agent{cfg: cfg, clock: cfg.Clock, relay: relay, log: cfg.Logger, m: cfg.Metrics, wake: make(chan struct{}, 1)}
	a.m.ReleaseAllowed.Set(bool01(cfg.Release && cfg.Releaser != nil))
	if cfg.StatePath != "" {
		removed, err := RemoveStaleTemps(cfg.StatePath)
		if len(removed) > 0 {
			a.log.Info("removed the temporary files of an interrupted state save", "files", removed)
		}
		if err != nil {
			a.log.Warn("remove the temporary files of an interrupted state save", "path", cfg.StatePath, "err", err)
		}
		st, err := LoadState(cfg.StatePath, a.clock.Now())
		switch {
		case err != nil:
			a.m.ResizeErrors.WithLabelValues("state_file").Inc()
			a.log.Warn("state file not used; starting from a fresh state", "path", cfg.StatePath, "err", err)
		case st != nil:
			a.state = *st
			a.exportCondition(st.Condition.Reason)
			a.log.Info("resumed from the state file", "path", cfg.StatePath,
				"condition", string(st.Condition.Reason), "applied", st.Applied.String(), "generation", st.Generation)
		}
	}
	return a
}

// State returns the decision state as it stands.
func (a *Agent) State() decide.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// Status returns the agent's view for the local API.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Deciding reports whether a machine model has come that no finished
// pass has decided on: a status published now may be about to be
// replaced by a newer one. It is meant for the relay's hold of a gain
// (kube's HoldGainsWhile), so that a gain whose models come faster than
// the passes (a DIMM onlined block by block on a loaded machine) is one
// patch; it never blocks. A pass publishes before it ends, so its own
// status goes out with Deciding true and the relay holds it until the
// pass is done, a few hundred milliseconds on a loaded machine (counting
// a model as decided when its pass began let the status of the pass
// before go out while that pass still grew kubepods).
func (a *Agent) Deciding() bool { return a.decided.Load() < a.models.Load() }

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// OnChange takes a new machine model: the agent is a monitor.Subscriber.
// It returns at once.
func (a *Agent) OnChange(c monitor.Change, snap *topology.Snapshot) {
	// The capacity the monitor computed already.
	p := decide.Physical{Capacity: c.Capacity.Clone(), SwapActive: snap.SwapTotal > 0, OnlineCPUs: onlineCPUs(snap)}
	if p.Capacity == nil {
		p.Capacity = resources.List{}
	}
	a.mu.Lock()
	for _, name := range snap.Unmeasured() {
		if old, ok := a.lastPhysical(name); ok {
			// A failed read must not look like a disk that vanished.
			p.Capacity[name] = old
		}
	}
	a.physical = &p
	a.snap = snap
	a.models.Add(1)
	if c.LatencySeconds > 0 && a.since.IsZero() {
		a.since = c.Time.Add(-c.Latency())
	}
	a.mu.Unlock()
	a.poke()
}

// lastPhysical returns the named amount of the previous physical capacity.
// a.mu must be held.
func (a *Agent) lastPhysical(name string) (int64, bool) {
	if a.physical == nil {
		return 0, false
	}
	v, ok := a.physical.Capacity[name]
	return v, ok
}

// OnNode takes a new view of the Node (the configured capacity). Until the
// first view arrives, the agent decides with the configured capacity it
// remembers from its state file (bootstrap parity).
func (a *Agent) OnNode(v types.NodeView) {
	a.mu.Lock()
	a.configured, a.source, a.haveNode = v.Configured, v.Source, true
	a.mu.Unlock()
	a.poke()
}

// ReportEviction takes the evictor's progress.
func (a *Agent) ReportEviction(r types.EvictionReport) {
	a.mu.Lock()
	a.eviction = r
	a.mu.Unlock()
	a.poke()
}

// ReportRelease takes the releaser's progress.
func (a *Agent) ReportRelease(r types.ReleaseReport) {
	a.mu.Lock()
	a.release = r
	a.mu.Unlock()
	a.poke()
}

// ResyncBeforeReleaseDone bounds the wait of a finished release's report
// for the model to catch up (Config.Resync).
const ResyncBeforeReleaseDone = 30 * time.Second

// SetResync sets Config.Resync, for a part built after the agent. Call it
// before Run.
func (a *Agent) SetResync(f func(context.Context) error) {
	a.mu.Lock()
	a.cfg.Resync = f
	a.mu.Unlock()
}

// reportRelease is what the releaser reports through. A report that the
// release (or give back) is done waits for a rebuild of the model first:
// the releaser reports right after its last write to sysfs, while the
// model may still show the last memory block online (its uevent not yet
// rebuilt), and a pass on that model took the release for one that fell
// short of the target, accepted it without restarting the kubelet and
// said the DIMM was not yet safe to unplug.
func (a *Agent) reportRelease(ctx context.Context) func(types.ReleaseReport) {
	return func(r types.ReleaseReport) {
		a.mu.Lock()
		resync := a.cfg.Resync
		a.mu.Unlock()
		if r.Done && resync != nil {
			rctx, cancel := context.WithTimeout(ctx, ResyncBeforeReleaseDone)
			if err := resync(rctx); err != nil && ctx.Err() == nil {
				a.log.Warn("rebuild the machine model after the planned release", "err", err)
			}
			cancel()
		}
		a.ReportRelease(r)
	}
}

// SetAfterRestart sets Config.AfterRestart, for a part built after the
// agent. Call it before Run.
func (a *Agent) SetAfterRestart(f func()) {
	a.mu.Lock()
	a.cfg.AfterRestart = f
	a.mu.Unlock()
}

// OnKubelet takes a new view of the running kubelet.
func (a *Agent) OnKubelet(v types.KubeletView) {
	a.mu.Lock()
	a.kubelet = &v
	a.mu.Unlock()
	stale := 0.0
	if v.Stale {
		stale = 1
	}
	a.m.KubeletStale.Set(stale)
	a.poke()
}

// KubeletStarted counts a start of the kubelet node-resized caused
// besides the restarts the agent asks for (a recovery's start of a kubelet
// it had stopped) in the restart budget: the next pass takes it into the
// restart history, which the state file keeps. It returns at once.
func (a *Agent) KubeletStarted(at time.Time) {
	a.mu.Lock()
	a.starts = append(a.starts, at)
	a.mu.Unlock()
	a.poke()
}

// Run decides on every input until ctx is done, then waits for a kubelet
// restart that is running, and keeps the starts no pass took.
func (a *Agent) Run(ctx context.Context) error {
	defer a.keepStarts()
	defer a.restarts.Wait()
	var requeue clock.Timer
	defer func() {
		if requeue != nil {
			requeue.Stop()
		}
	}()
	for {
		var fire <-chan time.Time
		if requeue != nil {
			fire = requeue.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
		case <-fire:
		}
		if after := a.pass(ctx); after > 0 {
			if requeue != nil {
				requeue.Stop()
			}
			requeue = a.clock.NewTimer(after)
		}
	}
}

// keepStarts takes the kubelet starts no pass took into the restart
// history and writes the state file, for a daemon that stops: a rollback
// during the last restart, a recovery just before the stop. Run's loop
// has returned, so no pass runs meanwhile.
func (a *Agent) keepStarts() {
	a.mu.Lock()
	if len(a.starts) == 0 {
		a.mu.Unlock()
		return
	}
	a.state = a.state.WithStarts(a.starts, a.clock.Now(), a.cfg.Policy)
	a.starts = nil
	st := a.state
	a.mu.Unlock()
	if a.cfg.StatePath != "" {
		if err := SaveState(a.cfg.StatePath, st); err != nil {
			a.m.ResizeErrors.WithLabelValues("state_file").Inc()
			a.log.Error("write the state file", "path", a.cfg.StatePath, "err", err)
		}
	}
}

// passInput is one pass's input and what the agent knew beside it.
type passInput struct {
	in     decide.Input
	snap   *topology.Snapshot
	since  time.Time // the first uevent of the hardware changes this pass decides on
	source string
	// checkpoints says that nothing but the kubelet's checkpoints stands
	// in the way of a restart, and they are not read yet: until they are
	// (readCheckpoints), in.Kubelet.RestartAllowed is false. stale is the
	// kubelet view's Stale.
	checkpoints, stale bool
	// released is what the releaser holds released on snap.
	released types.Released
	// models is how many models the agent had been given (a.mu orders
	// it after OnChange's count).
	models uint64
}

// pass takes one decision and carries it out; it returns when to decide
// again without new input (0: not needed).
//
// The kubelet's checkpoints are read only when the decision depends on
// them, and then before it: a decision that may restart the kubelet
// (decide's RestartConsidered) is taken again with what they say. Any
// other decision, the clamp of a loss among them, is carried out first;
// while the kubelet is stale its checkpoints are read after that, for
// what the status says of a restart.
func (a *Agent) pass(ctx context.Context) time.Duration {
	p, ok := a.gather()
	if !ok {
		return 0
	}
	p.in.Release.Resumed = !a.started && p.in.Previous.ReleaseGeneration > 0
	if p.in.Previous.Applied == nil || !a.reasserted {
		p.in.Enforced = a.enforced()
		p.in.Reassert = p.in.Previous.Applied != nil && a.cfg.Enforcer != nil
	}
	d := decide.Decide(p.in)
	if p.checkpoints && d.RestartConsidered {
		a.readCheckpoints(&p)
		d = decide.Decide(p.in)
	}
	if d.Err != nil {
		a.log.Warn("input refused", "err", d.Err)
	}
	var rej *decide.RejectedError
	if !errors.As(d.Err, &rej) || rej.What != "physical capacity" {
		a.reasserted = true
	}
	a.account(p.in.Previous.Applied, d.Next.Applied)
	c := a.carryOut(ctx, d, p)
	published, again, after := c.published, c.again, d.RequeueAfter
	if c.limits {
		// What did not land is not recorded as applied: the state says
		// the write failed, and it is retried.
		d.Next = d.Next.LimitsWritten(c.limitsErr, p.in.Now)
		if c.limitsErr != nil {
			if retry := decide.LimitsRetryAfter(d.Next.LimitsFailures); after <= 0 || retry < after {
				after = retry
			}
		}
	}
	if p.checkpoints && p.stale {
		a.readCheckpoints(&p)
	}
	a.restartNeeded(p)
	if !a.started {
		a.resumeEviction(ctx, p.in, d, p.snap)
		if !published && !d.Next.Checking {
			// The first pass of this process publishes what it stands
			// for even when nothing changed: the Node may show
			// something else after a restart. (A shrink whose pods are
			// being looked at is published with the answer.)
			a.relay.Publish(types.NodeStatus{Capacity: d.Target, Allocatable: d.Allocatable, Condition: d.Condition, Since: p.since,
				Taint: d.Next.Tainted})
			published = true
		}
	}
	a.started = true
	a.record(p, d, published)
	a.decided.Store(p.models)
	if again {
		a.poke()
	}
	return after
}

// enforced reads the kubepods limits as they stand, for the first pass
// with nothing applied yet and the first pass of a daemon that resumed
// from its state; zero (unknown) without an enforcer that reads.
func (a *Agent) enforced() decide.CgroupLimits {
	lr, ok := a.cfg.Enforcer.(LimitsReader)
	if !ok {
		return decide.CgroupLimits{}
	}
	l, err := lr.Current()
	if err != nil {
		a.log.Warn("read the kubepods limits at start; what could not be read is taken as unknown", "err", err)
	}
	a.log.Info("kubepods limits at start", "memory_max", l.MemoryMax, "cpu_weight", l.CPUWeight)
	return l
}

// gather takes the inputs for a pass; false when there is no model yet.
func (a *Agent) gather() (passInput, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.physical == nil {
		return passInput{}, false
	}
	conf := a.configured
	if !a.haveNode {
		conf = configuredFromKey(a.state.Spec)
	}
	var (
		k                  decide.Kubelet
		checkpoints, stale bool
	)
	rel, released := a.releaseInput()
	if v := a.kubelet; v != nil && v.Known() {
		k = decide.Kubelet{Known: true, Capacity: v.Capacity.Clone(), Ready: v.Ready, Report: a.report}
		// An eviction pass runs until the evictor reports its generation done.
		evicting := a.state.Evicting && !(a.eviction.Generation == a.state.Generation && a.eviction.Done)
		k.RestartBlocked = a.restartBlocked(*v, evicting, a.restarting)
		// The checkpoints are left: RestartAllowed waits for them.
		checkpoints, stale = k.RestartBlocked == "", v.Stale
	}
	return passInput{
		in: decide.Input{
			Physical:     *a.physical,
			Configured:   conf,
			Reservations: a.cfg.Reservations,
			ReservedCPUs: a.cfg.ReservedCPUs,
			JitterMemory: a.cfg.JitterMemory,
			Previous:     a.state,
			Now:          a.clock.Now(),
			Eviction:     a.eviction,
			Kubelet:      k,
			Policy:       a.cfg.Policy,
			Release:      rel,
			Starts:       slices.Clone(a.starts),
		},
		snap: a.snap, since: a.since, source: a.source, checkpoints: checkpoints, stale: stale, released: released,
		models: a.models.Load(),
	}, true
}

// releaseInput is the planned release's input to a pass, and what the
// releaser holds released on the machine as it is. a.mu is held.
func (a *Agent) releaseInput() (decide.ReleaseInput, types.Released) {
	in := decide.ReleaseInput{Allowed: a.cfg.Release && a.cfg.Releaser != nil, Report: a.release}
	if a.snap != nil {
		in.BlockSize = int64(a.snap.MemoryBlockSize)
	}
	var r types.Released
	if a.cfg.Releaser != nil && a.snap != nil {
		r = a.cfg.Releaser.Released(a.snap)
	}
	in.Held, in.Summary = !r.Empty(), r.Summary()
	return in, r
}

// carried is what carrying out a decision did: whether a Node status was
// published, whether another pass is due at once (an eviction that counts
// as done), and whether the kubepods limits were written, with the error
// of the write that failed.
type carried struct {
	published, again, limits bool
	limitsErr                error
}

// carryOut carries out the decision's actions in order.
func (a *Agent) carryOut(ctx context.Context, d decide.Decision, p passInput) carried {
	var c carried
	limits := func(err error) {
		c.limits = true
		c.limitsErr = errors.Join(c.limitsErr, err)
	}
	for _, act := range d.Actions {
		switch x := act.(type) {
		case decide.PatchNodeStatus:
			a.relay.Publish(types.NodeStatus{Capacity: x.Capacity, Allocatable: x.Allocatable, Condition: x.Condition, Since: p.since,
				Taint: x.Taint})
			c.published = true
		case decide.EmitEvent:
			a.relay.Event(x.Type, x.Reason, x.Message)
			a.log.Info("event", "type", string(x.Type), "reason", x.Reason, "message", x.Message)
		case decide.ClampCgroups:
			limits(a.enforce(ctx, cgroup.Request{Kind: cgroup.KindClamp, Generation: x.Generation, Limits: x.Limits}, p))
		case decide.GrowCgroups:
			limits(a.enforce(ctx, cgroup.Request{Kind: cgroup.KindGrow, Generation: x.Generation, Limits: x.Limits}, p))
		case decide.ReassertCgroups:
			a.log.Info("re-asserting the applied kubepods limits", "reason", x.Reason, "differ", x.Differ,
				"capacity", x.Capacity.String(), "generation", x.Generation)
			limits(a.enforce(ctx, cgroup.Request{Kind: cgroup.KindReassert, Generation: x.Generation, Limits: x.Limits}, p))
		case decide.Evict:
			online := a.evictOnline(&x, p.in, p.snap)
			c.again = a.evict(ctx, x, online) || c.again
		case decide.RestartKubelet:
			a.restart(ctx, x, d.Next.RestartAt, p.snap)
		case decide.Release:
			a.log.Info("planned release: taking the CPUs and memory above the target offline", "target", x.Capacity.String(),
				"generation", x.Generation)
			if a.cfg.Releaser != nil {
				a.cfg.Releaser.Release(ctx, x, p.snap, a.reportRelease(ctx))
			}
		case decide.GiveBack:
			a.log.Info("giving back the CPUs and memory of the planned release", "generation", x.Generation)
			if a.cfg.Releaser != nil {
				a.cfg.Releaser.GiveBack(ctx, x, a.reportRelease(ctx))
			}
		}
	}
	return c
}

// restartBlocked says why the kubelet may not be restarted now, as far as
// can be told without reading a file; empty when nothing but its
// checkpoints can stand in the way (see readCheckpoints). a.mu is held.
func (a *Agent) restartBlocked(v types.KubeletView, evicting, restarting bool) string {
	unit := a.cfg.KubeletUnit
	switch {
	case a.cfg.KubeletRestart == RestartNever:
		return fmt.Sprintf("restarts are turned off (--kubelet-restart=never); restart %s to let the kubelet adopt it", unit)
	case a.cfg.Restarter == nil:
		return fmt.Sprintf("node-resized cannot restart it here; restart %s to let the kubelet adopt it", unit)
	case v.UnitError != "" && v.ActiveState == "":
		return fmt.Sprintf("systemd cannot be asked about %s: %s", unit, v.UnitError)
	case !v.UnitActive():
		return fmt.Sprintf("%s is not active (ActiveState %q, SubState %q)", unit, v.ActiveState, v.SubState)
	case evicting:
		return "an eviction pass is still running"
	case restarting:
		return "a restart is still running"
	}
	return ""
}

// readCheckpoints completes the pass's restart verdict with the kubelet's
// CPU and memory manager checkpoints (Restarter.Check reads both), for the
// pass's model: the kubelet may be restarted only into checkpoints its
// static policies accept.
func (a *Agent) readCheckpoints(p *passInput) {
	if !p.checkpoints {
		return
	}
	p.checkpoints = false
	k := &p.in.Kubelet
	if p.snap != nil {
		if err := a.cfg.Restarter.Check(p.snap); err != nil {
			k.RestartBlocked = "its CPU or memory manager checkpoint cannot be made safe: " + err.Error()
			k.RestartRefused = true
		}
	}
	k.RestartAllowed = k.RestartBlocked == ""
}

// restartNeeded sets node_resized_kubelet_restart_needed: 1 while the
// kubelet is stale and may not be restarted.
func (a *Agent) restartNeeded(p passInput) {
	if !p.in.Kubelet.Known {
		return
	}
	needed := 0.0
	if p.stale && p.in.Kubelet.RestartBlocked != "" {
		needed = 1
	}
	a.m.KubeletRestartNeeded.Set(needed)
}

// restart restarts the kubelet off the decision goroutine; its result
// comes back as the next passes' Kubelet.Report.
func (a *Agent) restart(ctx context.Context, x decide.RestartKubelet, at time.Time, snap *topology.Snapshot) {
	a.mu.Lock()
	if a.restarting || a.cfg.Restarter == nil {
		a.mu.Unlock()
		a.log.Warn("kubelet restart asked for while one runs or without a restarter: not started", "capacity", x.Capacity.String())
		return
	}
	a.restarting = true
	a.mu.Unlock()
	timeout := a.cfg.Policy.RestartTimeout
	if timeout <= 0 {
		timeout = decide.DefaultRestartTimeout
	}
	a.restarts.Go(func() {
		a.waitStatusSettled(ctx)
		a.log.Info("restarting the kubelet so that it adopts the capacity", "unit", a.cfg.KubeletUnit, "capacity", x.Capacity.String(), "generation", x.Generation)
		// A daemon stopping in the middle must not leave the kubelet
		// stopped: the restart runs to its end, within the timeout.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		res, err := a.cfg.Restarter.Restart(rctx, snap)
		a.restarted(at, res, err)
	})
}

// StatusBeforeRestart bounds how long a kubelet restart waits for the Node
// status patch under way (Config.StatusSettled).
const StatusBeforeRestart = 30 * time.Second

// waitStatusSettled waits, at most StatusBeforeRestart, for the Node
// status patch under way to be answered; a stopping daemon does not wait.
func (a *Agent) waitStatusSettled(ctx context.Context) {
	if a.cfg.StatusSettled == nil {
		return
	}
	ch := a.cfg.StatusSettled()
	if ch == nil {
		return
	}
	t := a.clock.NewTimer(StatusBeforeRestart)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
		a.log.Warn("restarting the kubelet before the Node status patch under way was answered", "waited", StatusBeforeRestart)
	case <-ctx.Done():
	}
}

// restarted records how a restart ended and asks for a pass.
func (a *Agent) restarted(at time.Time, res string, err error) {
	rec := &RestartRecord{At: at, Result: res}
	report := types.RestartReport{At: at}
	switch {
	case err != nil:
		rec.Error = err.Error()
		if rec.Result == "" {
			rec.Result = "error"
		}
		report.Failed = err.Error()
	case res != "done":
		report.Failed = fmt.Sprintf("systemd's job to start %s ended %q", a.cfg.KubeletUnit, res)
	}
	a.m.KubeletRestarts.WithLabelValues(rec.Result).Inc()
	starts := a.rolledBack(err)
	if report.Failed != "" {
		a.log.Error("kubelet restart failed", "unit", a.cfg.KubeletUnit, "result", rec.Result, "err", report.Failed)
	} else {
		a.log.Info("kubelet restarted", "unit", a.cfg.KubeletUnit)
	}
	a.mu.Lock()
	a.restarting = false
	a.lastRestart = rec
	a.report = report
	a.starts = append(a.starts, starts...)
	after := a.cfg.AfterRestart
	a.mu.Unlock()
	if after != nil {
		after()
	}
	a.poke()
}

// rolledBack reports a restart that ended in a checkpoint rollback: a
// Warning event, the metric, a log line with the files and the kubelet's
// journal line that blamed them. It returns the rollback's starts of the
// kubelet, which the restart budget counts.
func (a *Agent) rolledBack(err error) []time.Time {
	var rb *types.CheckpointRollback
	if !errors.As(err, &rb) {
		return nil
	}
	a.m.KubeletCheckpointRollbacks.Inc()
	a.log.Warn("kubelet checkpoint rolled back", "unit", a.cfg.KubeletUnit, "files", strings.Join(rb.Files, ","),
		"journal", rb.Journal, "result", rb.Result, "problems", strings.Join(rb.Problems, "; "))
	a.relay.Event(types.EventWarning, types.EventKubeletCheckpointRolledBack, fmt.Sprintf(
		"the kubelet refused the checkpoint node-resized rewrote for it (%s); %s restored from the backups and the kubelet started again; "+
			"node-resized does not restart it again for this change", cut(rb.Journal, 400), strings.Join(rb.Files, ", ")))
	return rb.Starts
}

// cut shortens s to at most n bytes, for an event's message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// enforce writes the kubepods limits of a clamp, a grow or a reassert and
// measures the clamp's latency from the hardware event. It returns the
// write's error: the caller records that the limits did not land.
func (a *Agent) enforce(ctx context.Context, r cgroup.Request, p passInput) error {
	if a.cfg.Enforcer == nil {
		a.log.Info("kubepods limits not enforced (no cgroup enforcer configured)", "action", string(r.Kind))
		return nil
	}
	if err := a.cfg.Enforcer.Apply(ctx, r, onlineCPUs(p.snap)); err != nil {
		a.log.Error("apply kubepods limits; retrying", "action", string(r.Kind), "err", err)
		return err
	}
	if r.Kind == cgroup.KindClamp && !p.since.IsZero() {
		lat := a.clock.Since(p.since)
		if wt, ok := a.cfg.Enforcer.(WriteTimer); ok {
			if at := wt.LastWrite(); at.After(p.since) {
				lat = at.Sub(p.since)
			}
		}
		a.m.ClampLatency.Observe(lat.Seconds())
		a.log.Info("kubepods clamped", "latency", lat)
	}
	return nil
}

// evictOnline is the CPUs an eviction takes for online: those online now,
// or, for a shrink whose request asks for a release the node allows, those
// the release will leave online (and x says so).
func (a *Agent) evictOnline(x *decide.Evict, in decide.Input, snap *topology.Snapshot) []int {
	online := onlineCPUs(snap)
	if a.cfg.Releaser == nil || !in.Release.Allowed || !in.Configured.Present || !in.Configured.Release || snap == nil {
		return online
	}
	if stay := a.cfg.Releaser.StaysOnline(snap, x.Capacity); stay != nil {
		x.Release = true
		return stay
	}
	return online
}

// evict starts an eviction pass; without an evictor it counts the pass as
// done at once and asks for another decision.
func (a *Agent) evict(ctx context.Context, x decide.Evict, online []int) (again bool) {
	if a.cfg.Evictor == nil {
		a.log.Info("eviction is off: counting it as done", "generation", x.Generation, "allocatable", x.Allocatable.String())
		a.mu.Lock()
		a.eviction = types.EvictionReport{Generation: x.Generation, Done: true}
		a.mu.Unlock()
		return true
	}
	a.cfg.Evictor.Start(ctx, x, online, a.ReportEviction)
	return false
}

// resumeEviction takes up, on the first pass of this process, the eviction
// of the generation the state file remembers: the daemon stopped while
// evicting, and it would never finish otherwise. The file only says that
// one was running: it is resumed when this pass, decided on the machine as
// it is, keeps that generation evicting, and towards what the pass
// applies, so that a file cannot steer it (a machine that grew back, or a
// file that evicts towards less than the machine has, evicts nothing).
func (a *Agent) resumeEviction(ctx context.Context, in decide.Input, d decide.Decision, snap *topology.Snapshot) {
	if !in.Previous.Evicting || a.cfg.Evictor == nil || hasKind(d.Actions, decide.KindEvict) {
		return
	}
	if !d.Next.Evicting || d.Next.Generation != in.Previous.Generation {
		a.log.Info("the eviction the state file remembers is not resumed: the machine as it is does not call for it",
			"generation", in.Previous.Generation, "applied", in.Previous.Applied.String(), "target", d.Target.String())
		return
	}
	x := decide.Evict{
		Generation:  d.Next.Generation,
		Capacity:    d.Next.Applied.Clone(),
		Allocatable: decide.Allocatable(d.Next.Applied, a.cfg.Reservations),
		Reason:      types.EvictionReason,
		// A planned shrink not published yet: its pods are looked at
		// only, as when it began (its status goes first).
		Hold: d.Next.Checking && d.Next.ClampDue,
	}
	// A release's eviction resumes towards the CPUs the release leaves
	// online, as it began: the pods on the CPUs it takes still go first.
	online := a.evictOnline(&x, in, snap)
	a.cfg.Evictor.Start(ctx, x, online, a.ReportEviction)
}

// onlineCPUs is the model's online CPU list (nil without a model).
func onlineCPUs(snap *topology.Snapshot) topology.CPUSet {
	if snap == nil {
		return nil
	}
	return snap.CPUs.Online
}

// record keeps the new state and status, and writes the state file when
// the state changed.
func (a *Agent) record(p passInput, d decide.Decision, published bool) {
	a.mu.Lock()
	// The pass has decided on the hardware changes since p.since: a
	// patch carries them, or they changed nothing on the Node (memory
	// within the jitter, a loss already clamped). Either way the next
	// change's latency counts from its own uevent, not from these. A
	// shrink whose pods are being looked at is published by a later pass,
	// which carries them.
	if a.since.Equal(p.since) && !d.Next.Checking {
		a.since = time.Time{}
	}
	changed := !sameState(a.state, d.Next)
	a.state = d.Next
	// The starts the pass took are in the restart history now; those told
	// since wait for the next pass.
	a.starts = a.starts[len(p.in.Starts):]
	a.exportCondition(d.Condition.Reason)
	exportList(a.m.TargetCapacity, a.status.Target, d.Target)
	exportList(a.m.Allocatable, a.status.Allocatable, d.Allocatable)
	waited := a.status.Kubelet != nil && a.status.Kubelet.RestartWaiting == decide.RestartWaitBudget
	a.status = Status{
		Configured:       p.in.Configured,
		ConfiguredSource: p.source,
		Target:           d.Target,
		Allocatable:      d.Allocatable,
		Condition:        d.Condition,
		Decisions:        a.status.Decisions + 1,
		LastDecision:     p.in.Now,
		LimitsFailed:     d.Next.LimitsFailed,
	}
	failing := 0.0
	if d.Next.LimitsFailed != "" {
		failing = 1
	}
	a.m.KubepodsLimitsFailing.Set(failing)
	if d.Next.Tainted {
		a.status.Taint = types.TaintKey + ":NoSchedule"
		a.m.Tainted.Set(1)
	} else {
		a.m.Tainted.Set(0)
	}
	if d.Err != nil {
		a.status.Error = d.Err.Error()
	}
	if r := p.in.Release; r.Allowed || r.Held {
		a.status.Release = &ReleaseStatus{Allowed: r.Allowed, Releasing: d.Next.Releasing, GivingBack: d.Next.GivingBack,
			Short: d.Next.ReleaseShort, Released: p.released}
	}
	a.exportRelease(p, d)
	if v := a.kubelet; v != nil {
		a.status.Kubelet = &KubeletStatus{KubeletView: *v, Restart: a.cfg.KubeletRestart, RestartBlocked: p.in.Kubelet.RestartBlocked,
			Restarting: a.restarting, LastRestart: a.lastRestart,
			RestartBudget:  decide.FormatBudget(a.cfg.Policy.Budget()),
			RecentRestarts: a.cfg.Policy.RecentRestarts(d.Next, p.in.Now),
			RestartWaiting: d.RestartWaiting, NextRestart: d.RestartNotBefore}
	}
	a.mu.Unlock()
	if d.RestartWaiting == decide.RestartWaitBudget && !waited {
		a.log.Info("the kubelet restart waits for the restart budget", "budget", decide.FormatBudget(a.cfg.Policy.Budget()),
			"until", d.RestartNotBefore, "restarts", a.cfg.Policy.RecentRestarts(d.Next, p.in.Now))
	}
	if changed && a.cfg.StatePath != "" {
		if err := SaveState(a.cfg.StatePath, d.Next); err != nil {
			a.m.ResizeErrors.WithLabelValues("state_file").Inc()
			a.log.Error("write the state file", "path", a.cfg.StatePath, "err", err)
		}
	}
	if len(d.Actions) > 0 {
		a.log.Info("decided", "condition", string(d.Condition.Reason), "message", d.Condition.Message,
			"target", d.Target.String(), "actions", len(d.Actions))
	}
}

// exportRelease sets the planned release's metrics from a pass: whether
// the node allows it, whether one runs, what is held released and which
// memory devices are safe to unplug (a device with no released block left
// loses its series), and counts a release that ended with this pass. a.mu
// is held.
func (a *Agent) exportRelease(p passInput, d decide.Decision) {
	a.m.ReleaseAllowed.Set(bool01(p.in.Release.Allowed))
	a.m.ReleaseInProgress.Set(bool01(d.Next.Releasing || d.Next.GivingBack))
	a.m.ReleasedCPUs.Set(float64(len(p.released.CPUs)))
	a.m.ReleasedMemoryBytes.Set(float64(int64(len(p.released.Blocks)) * p.in.Release.BlockSize))
	var devices []string
	for _, dev := range p.released.Devices {
		a.m.MemoryDeviceSafeToUnplug.WithLabelValues(dev.ID).Set(bool01(dev.SafeToUnplug))
		devices = append(devices, dev.ID)
	}
	for _, id := range a.unplugSeries {
		if !slices.Contains(devices, id) {
			a.m.MemoryDeviceSafeToUnplug.DeleteLabelValues(id)
		}
	}
	a.unplugSeries = devices
	// A release ends when its generation stops releasing: with its
	// CapacityReleased event when it went as far as it could, without
	// one when the request changed under it.
	prev := p.in.Previous
	if !prev.Releasing || (d.Next.Releasing && d.Next.ReleaseGeneration == prev.ReleaseGeneration) {
		return
	}
	result := "stopped"
	if releasedEvent(d.Actions) {
		result = "done"
		if d.Next.ReleaseShort != "" {
			result = "short"
		}
	}
	a.m.Releases.WithLabelValues(result).Inc()
}

// releasedEvent reports whether the actions carry the CapacityReleased
// event of a release that ended.
func releasedEvent(actions []decide.Action) bool {
	for _, act := range actions {
		if e, ok := act.(decide.EmitEvent); ok && e.Reason == types.EventCapacityReleased {
			return true
		}
	}
	return false
}

// bool01 is a gauge's 1 for true, 0 for false.
func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// exportCondition sets node_resized_capacity_condition: 1 for reason, 0
// for the others.
func (a *Agent) exportCondition(reason types.Reason) {
	for _, r := range types.Reasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		a.m.CapacityCondition.WithLabelValues(string(r)).Set(v)
	}
}

// exportList sets a gauge of resource and unit to cur, and deletes the
// resources of old that cur no longer has.
func exportList(g *prometheus.GaugeVec, old, cur resources.List) {
	for name, v := range cur {
		g.WithLabelValues(name, string(resources.UnitOf(name))).Set(resources.Value(name, v))
	}
	for name := range old {
		if _, ok := cur[name]; !ok {
			g.DeleteLabelValues(name, string(resources.UnitOf(name)))
		}
	}
}

// account counts changes of the applied capacity by resource and direction.
func (a *Agent) account(old, cur resources.List) {
	if old == nil {
		return // the first pass is not a resize
	}
	for _, name := range cur.Names() {
		switch v, was := cur[name], old[name]; {
		case v > was:
			a.m.ResizeRequests.WithLabelValues(name, "up").Inc()
		case v < was:
			a.m.ResizeRequests.WithLabelValues(name, "down").Inc()
		}
	}
}

func hasKind(actions []decide.Action, k decide.ActionKind) bool {
	for _, a := range actions {
		if a.Kind() == k {
			return true
		}
	}
	return false
}

func sameState(a, b decide.State) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// configuredFromKey rebuilds a configured capacity from the canonical key
// the state file keeps, for the passes before the Node is read.
func configuredFromKey(key string) types.Configured {
	if key == "" {
		return types.Configured{}
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(key), &raw); err != nil {
		return types.Configured{}
	}
	if inv, ok := raw["invalid"]; ok && len(raw) == 1 {
		return types.Configured{Present: true, Invalid: inv}
	}
	return types.Configured{Present: true, Raw: raw}
}
