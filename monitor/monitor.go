package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// Source delivers kernel uevents. *uevent.Listener satisfies it. Receive
// returns an error matching uevent.ErrLost when events were lost, and one
// matching net.ErrClosed once Close was called.
type Source interface {
	Receive() (uevent.Event, error)
	Close() error
}

// Machine reads the machine model. topology.FS satisfies it.
type Machine interface {
	// Snapshot reads the whole model.
	Snapshot() (*topology.Snapshot, error)
	// SnapshotCPUs reads the whole model but the memory blocks, which it
	// takes from prev; used for batches of cpu-subsystem events only.
	SnapshotCPUs(prev *topology.Snapshot) (*topology.Snapshot, error)
	// MemTotal reads /proc/meminfo MemTotal only.
	MemTotal() (uint64, error)
}

var (
	_ Source  = (*uevent.Listener)(nil)
	_ Machine = topology.FS{}
)

// Trigger names what caused a model rebuild.
type Trigger string

// Triggers of a rebuild.
const (
	TriggerStartup  Trigger = "startup"  // the first model
	TriggerUevent   Trigger = "uevent"   // a kernel uevent of a relevant subsystem
	TriggerMemTotal Trigger = "memtotal" // MemTotal changed with no uevent (balloon, virtio-mem)
	TriggerLost     Trigger = "lost"     // uevents were lost: rescan everything
	TriggerResync   Trigger = "resync"   // the periodic safety-net resync
	TriggerRequest  Trigger = "request"  // a resync asked for through the API
	TriggerRetry    Trigger = "retry"    // a rebuild that failed is tried again
)

// Config tunes the loop. The zero value of a field takes the default.
type Config struct {
	// Quiet is how long the loop waits after the last event of a burst
	// before it rebuilds the model (default 20ms).
	Quiet time.Duration
	// MaxWait bounds the delay of a rebuild from the first event of a burst,
	// however long the burst goes on (default 500ms).
	MaxWait time.Duration
	// MemPoll is the interval of the MemTotal watch (default 1s; negative
	// turns it off).
	MemPoll time.Duration
	// Resync is the interval of the full safety-net resync (default 5m;
	// negative turns it off).
	Resync time.Duration
	// History is how many changes are kept for the API (default 256).
	History int
	// QueueSize is the capacity of the queue between the socket reader and
	// the loop (default 8192). When it is full the event is counted as lost
	// and a full rescan follows.
	QueueSize int
	// Subscribers are told of each change and the new model, from the
	// loop, in order, before the API's streams are. They must not block for
	// long: this is where node-local protection that cannot wait belongs.
	Subscribers []Subscriber
	Logger      *slog.Logger
	Metrics     *metrics.Metrics
}

// A Subscriber takes every change of the model. OnChange is called on the
// detection loop's goroutine and must return quickly.
type Subscriber interface {
	OnChange(c Change, snap *topology.Snapshot)
}

// SubscriberFunc adapts a function to a Subscriber.
type SubscriberFunc func(Change, *topology.Snapshot)

// OnChange calls f.
func (f SubscriberFunc) OnChange(c Change, snap *topology.Snapshot) { f(c, snap) }

func (c *Config) setDefaults() {
	if c.Quiet <= 0 {
		c.Quiet = 20 * time.Millisecond
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.MaxWait < c.Quiet {
		c.MaxWait = c.Quiet
	}
	if c.MemPoll == 0 {
		c.MemPoll = time.Second
	}
	if c.Resync == 0 {
		c.Resync = 5 * time.Minute
	}
	if c.History <= 0 {
		c.History = 256
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 8192
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
}

// Change is one change of the machine model, or the first model at startup.
type Change struct {
	ID       uint64    `json:"id"`
	Time     time.Time `json:"time"`
	Triggers []Trigger `json:"triggers"`
	// Events is the number of relevant uevents in the batch.
	Events  int     `json:"events"`
	Seqnums Seqnums `json:"seqnums"`
	// LatencySeconds is the time from the arrival of the batch's first
	// event (a uevent, or the MemTotal poll that saw a change) to the
	// updated model; 0 for startup and resyncs.
	LatencySeconds float64          `json:"latencySeconds"`
	Changes        topology.Changes `json:"changes"`
	// Capacity is the new model's physical capacity (Snapshot.Capacity).
	Capacity resources.List `json:"capacity"`
}

// Latency returns LatencySeconds as a duration.
func (c Change) Latency() time.Duration {
	return time.Duration(c.LatencySeconds * float64(time.Second))
}

// ResyncResult is the outcome of a forced resync.
type ResyncResult struct {
	Changed bool    `json:"changed"`
	Change  *Change `json:"change,omitempty"`
}

// Stats are counters of the loop's life.
type Stats struct {
	StartedAt      time.Time `json:"startedAt"`
	Rebuilds       uint64    `json:"rebuilds"`
	RebuildErrors  uint64    `json:"rebuildErrors"`
	Changes        uint64    `json:"changes"`
	Uevents        uint64    `json:"uevents"`
	LostEvents     uint64    `json:"lostEvents"`
	LastRebuildAt  time.Time `json:"lastRebuildAt"`
	LastRebuildErr string    `json:"lastRebuildError,omitempty"`
}

// Monitor runs the detection loop and holds the current model. It is safe
// for concurrent use: Run runs once, in its own goroutine; the accessors may
// be called from any goroutine.
type Monitor struct {
	machine Machine
	src     Source
	cfg     Config
	log     *slog.Logger

	requests chan resyncRequest
	pings    chan chan struct{}
	ready    chan struct{} // closed once the first model is in place
	done     chan struct{} // closed when Run returns
	kick     chan struct{} // wakes the loop after a queue overflow
	overflow atomic.Bool   // an event did not fit in the queue

	mu      sync.RWMutex // guards the fields below
	snap    *topology.Snapshot
	capac   resources.List
	history []Change // ring, oldest first once full
	nextID  uint64
	subs    map[chan Change]struct{}
	stats   Stats
}

type resyncRequest struct {
	reply chan resyncReply
}

type resyncReply struct {
	res ResyncResult
	err error
}

// New returns a monitor over machine. src may be nil: then only the
// MemTotal watch, the periodic resync and forced resyncs drive the model.
func New(machine Machine, src Source, cfg Config) *Monitor {
	cfg.setDefaults()
	return &Monitor{
		machine:  machine,
		src:      src,
		cfg:      cfg,
		log:      cfg.Logger,
		requests: make(chan resyncRequest),
		pings:    make(chan chan struct{}),
		ready:    make(chan struct{}),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		subs:     make(map[chan Change]struct{}),
	}
}

// item is one input from the socket reader.
type item struct {
	ev   uevent.Event
	lost bool
}

// batch collects the inputs of one coalesced rebuild.
type batch struct {
	triggers  []Trigger
	events    int
	seqnums   Seqnums
	first     time.Time // arrival of the first timed input (uevent or MemTotal)
	deadline  time.Time
	immediate bool // a resync: run without waiting for a quiet window
	waiters   []chan resyncReply
	retries   int
	// full says the rebuild must read everything; a batch of cpu events
	// alone leaves the memory blocks unread.
	full bool
}

func (b *batch) addTrigger(t Trigger) {
	for _, x := range b.triggers {
		if x == t {
			return
		}
	}
	b.triggers = append(b.triggers, t)
}

// Run builds the first model, then runs the loop until ctx is done. It
// closes the source before it returns and waits for its reader. An error
// means the first model could not be built.
func (m *Monitor) Run(ctx context.Context) error {
	defer close(m.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.src != nil {
		// Close the source on every return path so the reader ends.
		defer m.src.Close()
	}

	start := time.Now()
	snap, err := m.machine.Snapshot()
	if err != nil {
		return fmt.Errorf("build the first machine model: %w", err)
	}
	m.mu.Lock()
	m.stats.StartedAt = start
	m.mu.Unlock()
	m.install(snap, &batch{triggers: []Trigger{TriggerStartup}}, nil, time.Since(start))
	close(m.ready)

	queue := make(chan item, m.cfg.QueueSize)
	if m.src != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.read(ctx, queue)
		}()
	}

	var memTick, resyncTick <-chan time.Time
	if m.cfg.MemPoll > 0 {
		t := time.NewTicker(m.cfg.MemPoll)
		defer t.Stop()
		memTick = t.C
	}
	if m.cfg.Resync > 0 {
		t := time.NewTicker(m.cfg.Resync)
		defer t.Stop()
		resyncTick = t.C
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	var pending *batch
	memSeen := snap.MemTotal // the last MemTotal the watch acted on
	get := func() *batch {
		if pending == nil {
			pending = &batch{}
		}
		return pending
	}
	// arrive records a timed input and pushes the deadline out to the end
	// of the quiet window, never past MaxWait from the first input.
	arrive := func(t Trigger, at time.Time) {
		b := get()
		b.addTrigger(t)
		if t != TriggerUevent {
			b.full = true
		}
		if b.first.IsZero() {
			b.first = at
		}
		if b.immediate {
			return
		}
		b.deadline = at.Add(m.cfg.Quiet)
		if limit := b.first.Add(m.cfg.MaxWait); b.deadline.After(limit) {
			b.deadline = limit
		}
	}
	// now makes the pending batch run as soon as the loop comes round.
	now := func(t Trigger) {
		b := get()
		b.addTrigger(t)
		b.full = true
		b.immediate = true
		b.deadline = time.Now()
	}

	for {
		select {
		case <-ctx.Done():
			if pending != nil {
				for _, w := range pending.waiters {
					w <- resyncReply{err: ctx.Err()}
				}
			}
			return nil
		case it := <-queue:
			if it.lost {
				arrive(TriggerLost, time.Now())
				break
			}
			m.countUevent()
			arrive(TriggerUevent, it.ev.Received)
			b := pending
			b.events++
			if it.ev.Subsystem != "cpu" {
				b.full = true
			}
			if it.ev.Seqnum != 0 {
				b.seqnums.Add(it.ev.Seqnum)
			}
		case <-m.kick:
			if m.overflow.Swap(false) {
				m.cfg.Metrics.UeventsDropped.WithLabelValues("queue_full").Inc()
				m.countLost()
				m.log.Warn("uevent queue full; events lost, rescanning the machine", "queue_size", m.cfg.QueueSize)
				arrive(TriggerLost, time.Now())
			}
		case at := <-memTick:
			mt, err := m.machine.MemTotal()
			if err != nil {
				m.log.Warn("MemTotal watch failed", "err", err)
				break
			}
			// Trigger once per new value: a rebuild already pending for
			// this value must not be pushed out by every later poll.
			if mt == memSeen {
				break
			}
			memSeen = mt
			m.mu.RLock()
			cur := m.snap.MemTotal
			m.mu.RUnlock()
			if mt != cur {
				m.log.Debug("MemTotal changed with no uevent", "old_bytes", cur, "new_bytes", mt)
				arrive(TriggerMemTotal, at)
			}
		case <-resyncTick:
			now(TriggerResync)
		case req := <-m.requests:
			now(TriggerRequest)
			pending.waiters = append(pending.waiters, req.reply)
		case p := <-m.pings:
			close(p)
		case <-timer.C:
		}

		if pending == nil {
			continue
		}
		if wait := time.Until(pending.deadline); wait > 0 {
			timer.Reset(wait)
			continue
		}
		b := pending
		pending = nil
		if retry := m.rebuild(b); retry != nil {
			pending = retry
			timer.Reset(time.Until(retry.deadline))
		}
	}
}

// read moves uevents from the source into the queue. It never blocks on a
// full queue: the event is counted as lost and the loop rescans instead.
func (m *Monitor) read(ctx context.Context, queue chan<- item) {
	var failures int
	for {
		ev, err := m.src.Receive()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, uevent.ErrLost) {
				m.countLost()
				m.log.Warn("kernel uevents lost; rescanning the machine", "err", err)
				m.offer(queue, item{lost: true})
				continue
			}
			// An unexpected socket error: keep the daemon alive, rescan,
			// and back off so a broken socket does not spin.
			failures++
			m.log.Error("read kernel uevents", "err", err, "consecutive_failures", failures)
			m.offer(queue, item{lost: true})
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)):
			}
			continue
		}
		failures = 0
		m.offer(queue, item{ev: ev})
	}
}

func (m *Monitor) offer(queue chan<- item, it item) {
	select {
	case queue <- it:
	default:
		m.overflow.Store(true)
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

func (m *Monitor) countUevent() {
	m.mu.Lock()
	m.stats.Uevents++
	m.mu.Unlock()
}

func (m *Monitor) countLost() {
	m.mu.Lock()
	m.stats.LostEvents++
	m.mu.Unlock()
}

// maxRetries bounds how often a failing rebuild is retried before the loop
// waits for the next input.
const maxRetries = 3

// rebuild re-reads the machine and installs the new model when it differs.
// It returns a batch to retry when the read failed.
func (m *Monitor) rebuild(b *batch) *batch {
	m.mu.RLock()
	old := m.snap
	m.mu.RUnlock()
	start := time.Now()
	var snap *topology.Snapshot
	var err error
	if b.full {
		snap, err = m.machine.Snapshot()
	} else {
		snap, err = m.machine.SnapshotCPUs(old)
	}
	took := time.Since(start)
	m.cfg.Metrics.RebuildDuration.Observe(took.Seconds())
	trigger := string(b.triggers[0])
	if err != nil {
		m.cfg.Metrics.Rebuilds.WithLabelValues(trigger, "error").Inc()
		m.mu.Lock()
		m.stats.Rebuilds++
		m.stats.RebuildErrors++
		m.stats.LastRebuildAt = time.Now()
		m.stats.LastRebuildErr = err.Error()
		m.mu.Unlock()
		if b.retries < maxRetries {
			// sysfs can be mid-update (a CPU directory vanishing during
			// an unplug): try again shortly, keeping the batch whole.
			b.retries++
			b.addTrigger(TriggerRetry)
			b.deadline = time.Now().Add(m.cfg.Quiet * time.Duration(1<<b.retries))
			m.log.Warn("rebuild the machine model; will retry", "err", err, "retry", b.retries)
			return b
		}
		m.log.Error("rebuild the machine model; keeping the previous model", "err", err)
		for _, w := range b.waiters {
			w <- resyncReply{err: fmt.Errorf("rebuild the machine model: %w", err)}
		}
		return nil
	}
	diff := topology.Diff(old, snap)
	if len(diff) == 0 {
		m.cfg.Metrics.Rebuilds.WithLabelValues(trigger, "unchanged").Inc()
		m.mu.Lock()
		m.snap = snap
		m.stats.Rebuilds++
		m.stats.LastRebuildAt = time.Now()
		m.stats.LastRebuildErr = ""
		m.mu.Unlock()
		m.log.Debug("machine unchanged", "triggers", b.triggers, "events", b.events, "seqnums", b.seqnums.String(), "rebuild", took)
		for _, w := range b.waiters {
			w <- resyncReply{res: ResyncResult{Changed: false}}
		}
		return nil
	}
	m.cfg.Metrics.Rebuilds.WithLabelValues(trigger, "changed").Inc()
	c := m.install(snap, b, diff, took)
	for _, w := range b.waiters {
		w <- resyncReply{res: ResyncResult{Changed: true, Change: &c}}
	}
	return nil
}

// install makes snap the current model and records the change.
func (m *Monitor) install(snap *topology.Snapshot, b *batch, diff topology.Changes, took time.Duration) Change {
	now := time.Now()
	capac := snap.Capacity()
	c := Change{
		Time:     now,
		Triggers: b.triggers,
		Events:   b.events,
		Seqnums:  b.seqnums,
		Changes:  diff,
		Capacity: capac,
	}
	if !b.first.IsZero() {
		lat := now.Sub(b.first)
		c.LatencySeconds = lat.Seconds()
		m.cfg.Metrics.DetectionLatency.Observe(lat.Seconds())
	}
	m.mu.Lock()
	m.nextID++
	c.ID = m.nextID
	m.snap = snap
	m.capac = capac
	if len(m.history) == m.cfg.History {
		copy(m.history, m.history[1:])
		m.history = m.history[:len(m.history)-1]
	}
	m.history = append(m.history, c)
	m.stats.Rebuilds++
	m.stats.Changes++
	m.stats.LastRebuildAt = now
	m.stats.LastRebuildErr = ""
	m.mu.Unlock()

	m.observe(c, snap)
	if len(diff) == 0 {
		m.log.Info("machine model built",
			"capacity", capac.String(), "numa_nodes", len(snap.Nodes),
			"cpus_online", snap.CPUs.Online.String(), "memory_blocks", len(snap.MemoryBlocks), "took", took)
	} else {
		m.log.Info("machine changed",
			"change_id", c.ID, "changes", diff.String(), "capacity", capac.String(),
			"cpus_online", snap.CPUs.Online.String(), "triggers", b.triggers, "events", b.events,
			"seqnums", b.seqnums.String(), "latency", c.Latency(), "rebuild", took)
	}
	for _, sub := range m.cfg.Subscribers {
		sub.OnChange(c, snap)
	}
	m.publish(c)
	return c
}

// observe updates the capacity gauges and change counters.
func (m *Monitor) observe(c Change, snap *topology.Snapshot) {
	mt := m.cfg.Metrics
	for name, v := range c.Capacity.Published() {
		mt.Capacity.WithLabelValues(name).Set(resources.Value(name, v))
	}
	mt.NUMACapacity.Reset()
	for _, n := range snap.NodeCapacities() {
		id := strconv.Itoa(n.ID)
		for name, v := range n.Capacity {
			mt.NUMACapacity.WithLabelValues(id, name).Set(resources.Value(name, v))
		}
	}
	for _, ch := range c.Changes {
		mt.ModelChanges.WithLabelValues(ch.Kind).Inc()
	}
}

// subscriberBuffer is how many changes a subscriber may fall behind before
// it is dropped.
const subscriberBuffer = 64

// Subscribe returns a channel that receives every change from now on, and a
// function that ends the subscription. A subscriber that falls more than
// 64 changes behind has its channel closed rather than slow the loop.
func (m *Monitor) Subscribe() (<-chan Change, func()) {
	ch := make(chan Change, subscriberBuffer)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			if _, ok := m.subs[ch]; ok {
				delete(m.subs, ch)
				close(ch)
			}
			m.mu.Unlock()
		})
	}
}

func (m *Monitor) publish(c Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.subs {
		select {
		case ch <- c:
		default:
			delete(m.subs, ch)
			close(ch)
			m.log.Warn("dropped a subscriber that fell behind", "buffer", subscriberBuffer)
		}
	}
}

// Ready is closed once the first model is in place.
func (m *Monitor) Ready() <-chan struct{} { return m.ready }

// Snapshot returns the current model and its capacity. The snapshot must
// not be modified. It is nil before the first model is built.
func (m *Monitor) Snapshot() (*topology.Snapshot, resources.List) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.snap, m.capac
}

// History returns the recorded changes, oldest first.
func (m *Monitor) History() []Change {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]Change(nil), m.history...)
}

// LastChange returns the newest recorded change, if any.
func (m *Monitor) LastChange() (Change, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.history) == 0 {
		return Change{}, false
	}
	return m.history[len(m.history)-1], true
}

// Stats returns the loop's counters.
func (m *Monitor) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.stats
}

// ErrStopped is returned by Resync when the loop is not running.
var ErrStopped = errors.New("monitor: detection loop is not running")

// Resync forces a full rebuild now and waits for its result.
func (m *Monitor) Resync(ctx context.Context) (ResyncResult, error) {
	select {
	case <-m.ready:
	case <-m.done:
		return ResyncResult{}, ErrStopped
	case <-ctx.Done():
		return ResyncResult{}, ctx.Err()
	}
	req := resyncRequest{reply: make(chan resyncReply, 1)}
	select {
	case m.requests <- req:
	case <-m.done:
		return ResyncResult{}, ErrStopped
	case <-ctx.Done():
		return ResyncResult{}, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.res, r.err
	case <-m.done:
		return ResyncResult{}, ErrStopped
	case <-ctx.Done():
		return ResyncResult{}, ctx.Err()
	}
}

// Alive reports whether the loop answers within ctx: it proves that the
// loop turns, not merely that the process runs (for the systemd watchdog).
func (m *Monitor) Alive(ctx context.Context) bool {
	p := make(chan struct{})
	select {
	case m.pings <- p:
	case <-m.done:
		return false
	case <-ctx.Done():
		return false
	}
	select {
	case <-p:
		return true
	case <-ctx.Done():
		return false
	}
}
