package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// Source delivers kernel uevents. *uevent.Listener satisfies it. Receive
// returns an error matching uevent.ErrLost when events were lost, and one
// matching net.ErrClosed once Close was called. Event.Received is the
// arrival time on the monitor's clock (uevent.Listener stamps the real
// monotonic clock, the default); an event without one is stamped when the
// loop takes it. An event of the block subsystem is never a device of the
// model: a disk's resize (a change with RESIZE=1) only makes the
// filesystem watch poll fast for a while (Config.FSWatchAfterResize), and
// any other block event is counted and dropped.
type Source interface {
	Receive() (uevent.Event, error)
	Close() error
}

// Machine reads the machine model. topology.FS satisfies it.
type Machine interface {
	// Snapshot reads the whole model.
	Snapshot() (*topology.Snapshot, error)
	// Update returns the model after a batch of uevents that named devs,
	// re-reading only those devices and the totals, given the model
	// before them; full is non-empty, with the reason, when it read the
	// whole machine instead (see topology.FS.Update).
	Update(prev *topology.Snapshot, devs []topology.Device) (s *topology.Snapshot, full string, err error)
	// MemTotal reads /proc/meminfo MemTotal only.
	MemTotal() (uint64, error)
	// EphemeralStorage reads the size of the filesystem that holds the
	// kubelet's root directory only (one statfs), as the model's
	// EphemeralStorage; 0 with no error when none is measured.
	EphemeralStorage() (uint64, error)
}

var (
	_ Source  = (*uevent.Listener)(nil)
	_ Machine = topology.FS{}
)

// Trigger names what caused a model rebuild.
type Trigger string

// Triggers of a rebuild.
const (
	TriggerStartup    Trigger = "startup"    // the first model
	TriggerUevent     Trigger = "uevent"     // a kernel uevent of a relevant subsystem
	TriggerMemTotal   Trigger = "memtotal"   // MemTotal changed with no uevent (balloon, virtio-mem)
	TriggerFilesystem Trigger = "filesystem" // the kubelet root filesystem's size changed with no uevent (grown online): re-read the totals
	TriggerLost       Trigger = "lost"       // uevents were lost: rescan everything
	TriggerGap        Trigger = "gap"        // a SEQNUM gap: re-read the totals, rescan only if they moved
	TriggerResync     Trigger = "resync"     // the periodic safety-net resync
	TriggerRequest    Trigger = "request"    // a resync asked for through the API
	TriggerRetry      Trigger = "retry"      // a rebuild that failed is tried again
)

// Config tunes the loop. The zero value of a field takes the default.
type Config struct {
	// Quiet is the quiet window (default 20ms). An input that comes this
	// long after the loop last took one or rebuilt, or a quarter of this
	// long while no burst is under way, is a leading edge and is rebuilt
	// at once. An input that follows sooner starts a burst or goes on with
	// it: the burst's inputs are held until none has come for Quiet, and
	// rebuilt as one trailing change. Losses are never held.
	Quiet time.Duration
	// MaxWait bounds the delay of a trailing rebuild from its first input,
	// however long the burst goes on (default 500ms).
	MaxWait time.Duration
	// Busy, if set, says that more gains are on their way as events: the
	// auto-onliner still bringing a DIMM's blocks online one by one. While
	// it says so, a burst's trailing batch waits past its quiet window,
	// never past MaxWait from its first input, so that a slow online
	// does not split one hot-add into several changes. Losses never wait.
	// It is called from the loop and must return at once.
	Busy func() bool
	// MemPoll is the interval of the MemTotal watch (default 1s; negative
	// turns it off).
	MemPoll time.Duration
	// FSPoll is the interval of the filesystem watch (default 10s;
	// negative turns it off, and with it FSWatchAfterResize): a
	// Machine.EphemeralStorage that differs from the model's is a
	// change of the totals, rebuilt as one (TriggerFilesystem), a loss
	// when the filesystem shrank. The filesystem that holds the kubelet's
	// root directory grows online (a cloud disk resized, then growpart
	// and resize2fs or xfs_growfs) with no uevent for it.
	FSPoll time.Duration
	// FSWatchAfterResize is how long the filesystem watch polls at
	// MemPoll's interval (1s when the MemTotal watch is off; never
	// slower than FSPoll) after a block device's change uevent with
	// RESIZE=1, the kernel's word that a disk's capacity changed (default
	// 5m; negative: such a uevent changes nothing). The disk comes first;
	// its partition and filesystem are grown after it, by hand or by
	// cloud-init, and this window is for them. Each such uevent starts
	// the window again.
	FSWatchAfterResize time.Duration
	// Resync is the interval of the full safety-net resync (default 5m;
	// negative turns it off).
	Resync time.Duration
	// VerifyEvery: every VerifyEvery-th incremental rebuild, whether or
	// not it changed the model, is compared with a full rebuild of the
	// same moment, and so is the incremental model at each periodic
	// resync; a disagreement is counted
	// (node_resized_incremental_mismatch_total), logged as an error, and
	// the full model installed (default 32; negative turns the sampled
	// check off, not the resync's).
	VerifyEvery int
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
	// Clock is the loop's time (default the real clock): the coalescing
	// windows, the MemTotal and filesystem watches, the resync, the retry
	// backoff, the socket reader's backoff after an error, the latency,
	// the times in Change and Stats.
	Clock clock.WithTicker
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
	if c.FSPoll == 0 {
		c.FSPoll = 10 * time.Second
	}
	if c.FSWatchAfterResize == 0 {
		c.FSWatchAfterResize = 5 * time.Minute
	}
	if c.Resync == 0 {
		c.Resync = 5 * time.Minute
	}
	if c.VerifyEvery == 0 {
		c.VerifyEvery = 32
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
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
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
	// event (a uevent, or the MemTotal or filesystem poll that saw a
	// change) to the updated model; 0 for startup and resyncs (and on a
	// test's fake clock, for an event rebuilt at once).
	LatencySeconds float64          `json:"latencySeconds"`
	Changes        topology.Changes `json:"changes"`
	// Capacity is the new model's physical capacity (Snapshot.Capacity).
	Capacity resources.List `json:"capacity"`
	// Rebuild says how the new model was read. Absent from changes
	// recorded before it existed.
	Rebuild Rebuild `json:"rebuild,omitzero"`
}

// RebuildKind says how a model was read.
type RebuildKind string

// Kinds of rebuild.
const (
	// RebuildIncremental re-read only the devices the batch's uevents
	// named and the totals (topology.FS.Update).
	RebuildIncremental RebuildKind = "incremental"
	// RebuildFull read the whole machine (topology.FS.Snapshot).
	RebuildFull RebuildKind = "full"
)

// Rebuild says how the model of a change was read.
type Rebuild struct {
	Kind RebuildKind `json:"kind"`
	// Reason says why a full rebuild read the whole machine: its trigger
	// ("uevents lost", "periodic resync", ...), the incremental update's
	// own fallback ("node3 event"), or the check below.
	Reason string `json:"reason,omitempty"`
	// Verified is true when the incremental model was compared with a
	// full rebuild of the same moment (Config.VerifyEvery, periodic
	// resyncs).
	Verified bool `json:"verified,omitempty"`
	// Mismatch says what the full rebuild found that the incremental
	// model did not (topology.Diff from the incremental model to the
	// full one, and the fields that differ); the full model was
	// installed. Empty when they agreed.
	Mismatch string `json:"mismatch,omitempty"`
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
	StartedAt     time.Time `json:"startedAt"`
	Rebuilds      uint64    `json:"rebuilds"`
	RebuildErrors uint64    `json:"rebuildErrors"`
	Changes       uint64    `json:"changes"`
	Uevents       uint64    `json:"uevents"`
	// BlockEvents counts the uevents of the block subsystem, which are
	// not in Uevents: prompts of the filesystem watch, never of a
	// rebuild (see Config.FSWatchAfterResize).
	BlockEvents uint64 `json:"blockEvents"`
	LostEvents  uint64 `json:"lostEvents"`
	// SeqnumGaps counts the SEQNUM gaps confirmed cheaply (see
	// TriggerGap); LostEvents the losses that made a full rescan.
	SeqnumGaps     uint64    `json:"seqnumGaps"`
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
	clock   clock.WithTicker

	requests chan resyncRequest
	pings    chan chan struct{}
	ready    chan struct{} // closed once the first model is in place
	done     chan struct{} // closed when Run returns
	kick     chan struct{} // wakes the loop after a queue overflow
	overflow atomic.Bool   // an event did not fit in the queue

	// incremental counts incremental rebuilds, for Config.VerifyEvery.
	// It belongs to Run's goroutine.
	incremental int
	// suspect is a disagreement of the incremental model with a full
	// rebuild in memory blocks only, not yet judged (see verify); it
	// belongs to Run's goroutine too.
	suspect *suspectMismatch

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
// MemTotal and filesystem watches, the periodic resync and forced resyncs
// drive the model.
func New(machine Machine, src Source, cfg Config) *Monitor {
	cfg.setDefaults()
	return &Monitor{
		machine:  machine,
		src:      src,
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		requests: make(chan resyncRequest),
		pings:    make(chan chan struct{}),
		ready:    make(chan struct{}),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		subs:     make(map[chan Change]struct{}),
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

// AliveTimeout is how long the liveness check waits for the loop to
// answer: the systemd watchdog's and the /healthz and /readyz probes'.
const AliveTimeout = 5 * time.Second

// Alive reports whether the loop answers within ctx: it proves that the
// loop turns, not merely that the process runs (for the systemd watchdog).
func (m *Monitor) Alive(ctx context.Context) bool {
	return m.Check(ctx) == nil
}

// Check is Alive with the reason: nil when the loop answers within ctx,
// ErrStopped when it has stopped, and an error that says the loop did not
// answer when ctx ends first.
func (m *Monitor) Check(ctx context.Context) error {
	p := make(chan struct{})
	select {
	case m.pings <- p:
	case <-m.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("monitor: detection loop did not answer: %w", context.Cause(ctx))
	}
	select {
	case <-p:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("monitor: detection loop did not answer: %w", context.Cause(ctx))
	}
}
