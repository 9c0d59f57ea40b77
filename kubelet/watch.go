package kubelet

import (
	"context"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// Field managers as the API server records them: the kubelet's (from its
// user agent, "kubelet/v1.37.2 ...") and the daemon's own.
const (
	DefaultFieldManager = "kubelet"
	DaemonFieldManager  = "node-resized"
)

// DefaultUnit is the kubelet's systemd unit on kubeadm and most
// distributions.
const DefaultUnit = "kubelet.service"

// DefaultWatchPoll is how often the Watcher asks systemd and the
// pod-resources API.
const DefaultWatchPoll = 5 * time.Second

// UnitStater reads a unit's state; *systemd.Client satisfies it.
type UnitStater interface {
	UnitState(ctx context.Context, unit string) (systemd.UnitState, error)
}

// Sink takes each new view of the kubelet. OnKubelet must return quickly
// and must not call back into the Watcher.
type Sink interface {
	OnKubelet(types.KubeletView)
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Unit is the kubelet's unit (DefaultUnit when empty); Systemd reads
	// its state (nil: not asked).
	Unit    string
	Systemd UnitStater
	// PodResources asks the kubelet's pod-resources API (nil: not asked),
	// for example a call of AllocatableResources.
	PodResources func(context.Context) (Allocatable, error)
	// ReservedCPUs and ReservedMemory are the kubelet's reservedSystemCPUs
	// and reservedMemory: the pod-resources API leaves them out of what it
	// may allocate, and the capacity adds them back.
	ReservedCPUs   topology.CPUSet
	ReservedMemory map[int]map[string]uint64
	// FieldManager is the kubelet's field manager on the Node
	// (DefaultFieldManager when empty).
	FieldManager string
	// Poll is how often systemd and the pod-resources API are asked
	// (DefaultWatchPoll when zero).
	Poll time.Duration
	// JitterMemory is the memory drift that is not a difference
	// (decide.DefaultJitterMemory when zero).
	JitterMemory int64
	Sink         Sink
	Clock        clock.WithTicker
	Logger       *slog.Logger
}

// Watcher gathers what the running kubelet believes the machine is, from
// three sources, and hands each new view to its Sink:
//
//   - systemd (over D-Bus): whether the unit is active, its main PID and
//     when that process started. A kubelet that started after the last
//     change of the machine has read the machine as it is; a restart is
//     seen whoever did it, and forgets what was known of the process
//     before.
//   - the Node (its managedFields, see kube.ParseNode): a status.capacity
//     value the kubelet owns is its view, written by the running process
//     when its last status write is newer than the process; a value it
//     left as it was in a status write newer than the daemon's last one
//     is its view too, and so is a value no manager owns (set when the
//     kubelet registered the Node, and never changed since). The Node is Ready for the running kubelet only
//     once that process has written status: a write whose time is not
//     before the process's start and that was seen after it started (see
//     writtenByProcess).
//   - the pod-resources API, where the kubelet serves it with static CPU
//     or memory manager policies: the CPUs it may allocate, and memory per
//     NUMA node, each plus what is reserved.
//
// What was learnt of a process is kept until the process changes. A
// Watcher is a kube.NodeSubscriber and a monitor.Subscriber; Run polls. It
// is safe for concurrent use.
type Watcher struct {
	opts WatcherOptions
	wake chan struct{}

	mu sync.Mutex // guards everything below
	// Inputs.
	unit    *systemd.UnitState // nil until systemd answered
	unitErr string
	node    *types.NodeView
	// kwSeen is when the kubelet's newest status write on the Node was
	// first seen, on the clock systemd's process start times are on.
	kwSeen    time.Time
	alloc     *Allocatable
	allocErr  string
	phys      resources.List
	changeID  uint64
	changedAt time.Time
	// What is known of the running process.
	proc    process
	view    resources.List
	sources map[string]string
	stale   bool
	since   uint64
	out     types.KubeletView
	// warned is the last kubelet version warned about (once each).
	warned string
}

// process names one kubelet process.
type process struct {
	pid     uint32
	started time.Time
}

// NewWatcher returns a watcher; Run starts its polls.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.Unit == "" {
		opts.Unit = DefaultUnit
	}
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultWatchPoll
	}
	if opts.JitterMemory <= 0 {
		opts.JitterMemory = decide.DefaultJitterMemory
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{opts: opts, wake: make(chan struct{}, 1), out: types.KubeletView{Unit: opts.Unit}}
}

// View returns the kubelet's view as it stands.
func (w *Watcher) View() types.KubeletView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out
}

// OnNode takes a view of the Node (a kube.NodeSubscriber).
func (w *Watcher) OnNode(v types.NodeView) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.node == nil || !w.node.StatusWrites[w.opts.FieldManager].Equal(v.StatusWrites[w.opts.FieldManager]) {
		w.kwSeen = w.opts.Clock.Now()
	}
	w.node = &v
	w.update()
}

// OnChange takes a new model of the machine (a monitor.Subscriber).
func (w *Watcher) OnChange(c monitor.Change, _ *topology.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phys = c.Capacity.Published()
	w.changeID, w.changedAt = c.ID, c.Time
	w.update()
}

// Poke asks for a poll now (after a restart, say). It never blocks.
func (w *Watcher) Poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run polls systemd and the pod-resources API at once, then every Poll
// and when poked, until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	t := w.opts.Clock.NewTicker(w.opts.Poll)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-w.wake:
		}
	}
}

// poll asks systemd and the pod-resources API, each within a few seconds.
func (w *Watcher) poll(ctx context.Context) {
	var unit *systemd.UnitState
	var unitErr string
	if w.opts.Systemd != nil {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := w.opts.Systemd.UnitState(c, w.opts.Unit)
		cancel()
		if err != nil {
			unitErr = err.Error()
		} else {
			unit = &st
		}
	}
	var alloc *Allocatable
	var allocErr string
	if w.opts.PodResources != nil {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		a, err := w.opts.PodResources(c)
		cancel()
		if err != nil {
			allocErr = err.Error()
		} else {
			alloc = &a
		}
	}
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if unitErr != "" && unitErr != w.unitErr {
		w.opts.Logger.Warn("read the kubelet's unit over D-Bus", "unit", w.opts.Unit, "err", unitErr)
	}
	w.unit, w.unitErr, w.alloc, w.allocErr = unit, unitErr, alloc, allocErr
	w.update()
}

// update derives the view from the inputs and hands it to the sink when it
// changed. w.mu must be held.
func (w *Watcher) update() {
	w.followProcess()
	w.fromNode()
	w.fromPodResources()
	stale := differs(w.view, w.phys, w.opts.JitterMemory)
	if stale && !w.stale {
		w.since = w.changeID
	}
	if !stale {
		w.since = 0
	}
	w.stale = stale

	v := types.KubeletView{Unit: w.opts.Unit, UnitError: w.unitErr, Capacity: w.view.Clone(), Sources: maps.Clone(w.sources),
		Ready: w.ready(), Stale: stale, StaleSince: w.since, PodResourcesError: w.allocErr}
	if u := w.unit; u != nil {
		v.LoadState, v.ActiveState, v.SubState, v.MainPID, v.Started = u.LoadState, u.ActiveState, u.SubState, u.MainPID, u.Started()
	}
	if w.alloc != nil {
		v.PodResourcesCPUs = append([]int(nil), w.alloc.CPUs...)
	}
	if w.node != nil {
		v.Version = w.node.KubeletVersion
		v.VersionNote = VersionNote(v.Version)
		if v.VersionNote != "" && v.Version != w.warned {
			w.warned = v.Version
			w.opts.Logger.Warn(v.VersionNote, "kubelet_version", v.Version)
		}
	}
	if len(v.Capacity) == 0 {
		v.Capacity, v.Sources = nil, nil
	}
	v.ObservedAt = w.out.ObservedAt
	if reflect.DeepEqual(v, w.out) {
		return
	}
	v.ObservedAt = w.opts.Clock.Now()
	w.out = v
	if w.opts.Sink != nil {
		w.opts.Sink.OnKubelet(v)
	}
}

// followProcess starts over when the kubelet's process changes: a process
// that started after the last change of the machine has read it as it is.
func (w *Watcher) followProcess() {
	if w.unit == nil {
		return // not asked yet, or systemd did not answer: nothing new of the process
	}
	var p process
	if w.unit.Active() {
		p = process{pid: w.unit.MainPID, started: w.unit.Started()}
	}
	if p == w.proc && w.view != nil {
		return
	}
	changed := p != w.proc
	w.proc = p
	if changed || w.view == nil {
		w.view, w.sources = resources.List{}, map[string]string{}
	}
	if p.started.IsZero() || w.phys == nil || !p.started.After(w.changedAt) {
		return
	}
	for name, v := range w.phys {
		if resources.Published(name) {
			w.set(name, v, "started at "+p.started.UTC().Format(time.RFC3339)+", after the machine's last change")
		}
	}
}

// processStart is the running process's start as the Node's managedFields
// times can be compared with (they have whole seconds); zero when unknown.
func (w *Watcher) processStart() time.Time {
	return w.proc.started.Truncate(time.Second)
}

// fromNode takes the kubelet's view from its status writes.
func (w *Watcher) fromNode() {
	n := w.node
	if n == nil {
		return
	}
	if w.view == nil {
		w.view, w.sources = resources.List{}, map[string]string{}
	}
	if w.unit != nil && w.proc == (process{}) {
		return // no running process: what the Node shows is a gone one's
	}
	kw, dw := n.StatusWrites[w.opts.FieldManager], n.StatusWrites[DaemonFieldManager]
	if !w.writtenByProcess(kw) {
		return // nothing written by the running process
	}
	at := kw.UTC().Format(time.RFC3339)
	for name, v := range n.Capacity {
		if !resources.Published(name) {
			continue
		}
		switch owner := n.CapacityOwners[name]; {
		case owner == w.opts.FieldManager:
			w.set(name, v, "status.capacity as the kubelet wrote it (status write at "+at+")")
		case owner != "" && kw.After(dw):
			w.set(name, v, "status.capacity kept by the kubelet's status write at "+at)
		case owner == "":
			// No manager owns a value the kubelet set when it registered
			// the Node (the API server does not track the status fields
			// of a create) and nobody changed since: the running process
			// has written status, and would have patched (and so owned) a
			// value it disagreed with.
			w.set(name, v, "status.capacity as the kubelet registered the Node, unchanged by its status write at "+at)
		}
	}
}

// fromPodResources takes the kubelet's view of CPUs and of memory per NUMA
// node from its pod-resources API, each plus what is reserved.
func (w *Watcher) fromPodResources() {
	a := w.alloc
	if a == nil || w.view == nil {
		return
	}
	const src = "pod-resources API (allocatable plus reserved)"
	if len(a.CPUs) > 0 {
		cpus := map[int]bool{}
		for _, c := range a.CPUs {
			cpus[c] = true
		}
		for _, c := range w.opts.ReservedCPUs {
			cpus[c] = true
		}
		w.set(resources.CPU, int64(len(cpus))*1000, src)
	}
	if len(a.Memory) == 0 {
		return
	}
	total := map[string]uint64{}
	for _, types := range a.Memory {
		for name, v := range types {
			total[name] += v
		}
	}
	for _, types := range w.opts.ReservedMemory {
		for name, v := range types {
			total[name] += v
		}
	}
	var mem uint64
	for name, v := range total {
		mem += v
		if name != resources.Memory && resources.Published(name) {
			w.set(name, int64(v), src) // hugepages-2Mi, …: the API names them as the Node does
		}
	}
	w.set(resources.Memory, int64(mem), src)
}

func (w *Watcher) set(name string, v int64, source string) {
	w.view[name] = v
	w.sources[name] = source
}

// ready reports whether the Node is Ready as the running kubelet wrote it.
func (w *Watcher) ready() bool {
	n := w.node
	if n == nil || !n.Ready {
		return false
	}
	if w.unit == nil {
		return true // no process to tell apart
	}
	if w.proc == (process{}) {
		// The unit is not active: stopped, or starting (its pre-start
		// runs, no main process yet). The Node's Ready condition is a
		// process's that is gone.
		return false
	}
	return w.writtenByProcess(n.StatusWrites[w.opts.FieldManager])
}

// writtenByProcess reports whether kw, the kubelet's newest status write
// on the Node, is the running process's. Its time is the API server's, in
// whole seconds, and the process's start is this machine's: a write the
// clocks put after the start may be the process's before it when they
// differ by a second or more, or fall in the same second. So the write
// must also have been seen, on this machine's clock, after the process
// started: a process that was stopped (SIGSTOP, a hung kubelet) wrote its
// last status long before its successor started, and that write is not
// the successor's however the clocks stand. Without a process known (no
// systemd), the newest write counts.
func (w *Watcher) writtenByProcess(kw time.Time) bool {
	if kw.IsZero() || kw.Before(w.processStart()) {
		return false
	}
	return w.proc.started.IsZero() || w.kwSeen.After(w.proc.started)
}

// differs reports whether the view differs from the machine on a resource
// it knows (memory, and whatever else jitters, by the jitter or more).
func differs(view, phys resources.List, jitter int64) bool {
	for name, v := range view {
		p, ok := phys[name]
		if !ok {
			continue
		}
		d := v - p
		if d < 0 {
			d = -d
		}
		if j := resources.Jitters(name); (j && d >= jitter) || (!j && d != 0) {
			return true
		}
	}
	return false
}
