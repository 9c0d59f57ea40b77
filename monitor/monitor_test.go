package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// fakeMachine is an in-memory machine for the loop's edge cases. The
// end-to-end memory paths run on synthetic sysfs trees in sysfs_test.go.
type fakeMachine struct {
	mu        sync.Mutex
	online    topology.CPUSet
	memTotal  uint64
	snapshots int
	updates   int               // Update calls
	devs      []topology.Device // the devices of the last Update
	fail      int               // the next fail reads return an error
	// ephemeral is the kubelet root filesystem's size, in the model and
	// for EphemeralStorage, which fails with fsErr when set; fsPolls
	// counts its calls.
	ephemeral uint64
	fsErr     error
	fsPolls   int
	memErr    error // MemTotal fails with it when set
	memPolls  int   // MemTotal calls
	// onSnapshot, when set, runs at the start of each Snapshot call,
	// with mu held: the machine changing under a full rebuild.
	onSnapshot func(f *fakeMachine)
}

func (f *fakeMachine) Snapshot() (*topology.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots++
	if f.onSnapshot != nil {
		f.onSnapshot(f)
	}
	return f.model()
}

// Update is incremental, and exact: the model of the moment.
func (f *fakeMachine) Update(prev *topology.Snapshot, devs []topology.Device) (*topology.Snapshot, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	f.devs = slices.Clone(devs)
	s, err := f.model()
	return s, "", err
}

func (f *fakeMachine) model() (*topology.Snapshot, error) {
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("read /sys/devices/system/cpu/online: transient")
	}
	node := topology.Node{ID: 0, MemTotal: f.memTotal}
	for _, id := range f.online {
		node.CPUs = append(node.CPUs, topology.CPU{ID: id})
	}
	return &topology.Snapshot{
		CPUs:             topology.CPUs{Online: append(topology.CPUSet(nil), f.online...)},
		Nodes:            []topology.Node{node},
		MemTotal:         f.memTotal,
		EphemeralStorage: f.ephemeral,
	}, nil
}

func (f *fakeMachine) MemTotal() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.memPolls++
	if f.memErr != nil {
		return 0, f.memErr
	}
	return f.memTotal, nil
}

func (f *fakeMachine) EphemeralStorage() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fsPolls++
	if f.fsErr != nil {
		return 0, f.fsErr
	}
	return f.ephemeral, nil
}

func (f *fakeMachine) set(online topology.CPUSet, memTotal uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.online, f.memTotal = online, memTotal
}

// reads returns how many models were read: full and incremental.
func (f *fakeMachine) reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots + f.updates
}

// calls returns how many full and incremental reads were made.
func (f *fakeMachine) calls() (snapshots, updates int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots, f.updates
}

// fakeSource delivers what the test injects, stamped on the test's clock as
// the listener stamps uevents on the real one. Injecting never blocks.
type fakeSource struct {
	clock  clock.PassiveClock
	ch     chan result
	closed chan struct{}
	once   sync.Once
	sent   uint64      // uevents injected, for harness.settle
	stamps []time.Time // their Received times, in order
}

type result struct {
	ev  uevent.Event
	err error
}

func newFakeSource(clk clock.PassiveClock) *fakeSource {
	return &fakeSource{clock: clk, ch: make(chan result, 100000), closed: make(chan struct{})}
}

func (s *fakeSource) Receive() (uevent.Event, error) {
	select {
	case r := <-s.ch:
		return r.ev, r.err
	case <-s.closed:
		return uevent.Event{}, net.ErrClosed
	}
}

func (s *fakeSource) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *fakeSource) inject(subsystem string, action uevent.Action, seq uint64) {
	s.send(uevent.Event{Action: action, Subsystem: subsystem, Seqnum: seq})
}

// send delivers ev, stamped with its arrival now.
func (s *fakeSource) send(ev uevent.Event) {
	ev.Received = s.clock.Now()
	s.sent++
	s.stamps = append(s.stamps, ev.Received)
	s.ch <- result{ev: ev}
}

// harness runs a monitor on a fake clock that the test steps, unless the
// test asks for the real one (Config.Clock set).
type harness struct {
	t       *testing.T
	mon     *Monitor
	machine *fakeMachine
	src     *fakeSource
	metrics *metrics.Metrics
	changes <-chan Change
	// clock is the fake clock, nil on the real one; base is the number of
	// its waiters while no batch is pending (the loop's tickers).
	clock *timerClock
	base  int
}

// timerClock is a fake clock that tells when the first timer made from
// it is set to fire: the loop makes that one first, for its pending
// batch (the filesystem watch's comes after it).
type timerClock struct {
	*clocktesting.FakeClock
	mu     sync.Mutex
	target time.Time // when the timer is set to fire; zero when stopped
	made   bool      // the batch's timer is made
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	first := !c.made
	c.made = true
	c.mu.Unlock()
	if !first {
		return c.FakeClock.NewTimer(d)
	}
	c.set(c.Now().Add(d))
	return &watchedTimer{Timer: c.FakeClock.NewTimer(d), c: c}
}

func (c *timerClock) set(t time.Time) {
	c.mu.Lock()
	c.target = t
	c.mu.Unlock()
}

// firesAt returns when the timer is set to fire, zero when it is not set.
func (c *timerClock) firesAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.target
}

type watchedTimer struct {
	clock.Timer
	c *timerClock
}

func (t *watchedTimer) Reset(d time.Duration) bool {
	t.c.set(t.c.Now().Add(d)) // before the fake clock counts it as a waiter
	return t.Timer.Reset(d)
}

func (t *watchedTimer) Stop() bool {
	t.c.set(time.Time{})
	return t.Timer.Stop()
}

// t0 is when the fake clock starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, cfg *Config) *harness {
	h := &harness{t: t, metrics: metrics.New()}
	if cfg.Clock == nil {
		h.clock = &timerClock{FakeClock: clocktesting.NewFakeClock(t0)}
		cfg.Clock = h.clock
	}
	h.src = newFakeSource(cfg.Clock)
	return h
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := newHarness(t, &cfg)
	h.machine = &fakeMachine{online: topology.CPUSet{0, 1}, memTotal: 4 << 30}
	h.run(h.machine, cfg)
	h.next() // the startup change
	return h
}

// run starts the loop over machine, subscribed from the start, and stops
// it when the test ends.
func (h *harness) run(machine Machine, cfg Config) {
	t := h.t
	t.Helper()
	cfg.Metrics = h.metrics
	h.mon = New(machine, h.src, cfg)
	ch, cancel := h.mon.Subscribe()
	h.changes = ch
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.mon.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	select {
	case <-h.mon.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if h.clock != nil {
		h.base = h.clock.Waiters() // the tickers, set before Ready
	}
}

// settle returns once the loop has taken every uevent injected so far and
// finished acting on it: Alive is answered on a later turn of the loop, so
// the timer is set for the pending batch and a step of the clock after
// settle cannot race with the loop setting it.
func (h *harness) settle() {
	h.t.Helper()
	waitFor(h.t, func() bool { st := h.mon.Stats(); return st.Uevents+st.BlockEvents == h.src.sent })
	h.alive()
}

func (h *harness) alive() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !h.mon.Alive(ctx) {
		h.t.Fatal("the loop does not answer")
	}
}

// fire steps the fake clock to the moment the loop's timer is set for, and
// returns how far that was: exactly when the pending batch falls due. The
// loop must be settled with its timer set.
func (h *harness) fire() time.Duration {
	h.t.Helper()
	at, now := h.clock.firesAt(), h.clock.Now()
	if h.clock.Waiters() <= h.base || !at.After(now) {
		h.t.Fatal("the loop has no timer set")
	}
	h.clock.Step(at.Sub(now))
	return at.Sub(now)
}

// flush settles the loop and, when it holds a batch for later (the
// trailing batch of a burst, a retry), fires its timer; it returns how
// long that batch waited after the last step of the clock, 0 when the
// loop held nothing back (the inputs were due at once).
func (h *harness) flush() time.Duration {
	h.t.Helper()
	h.settle()
	if h.clock.Waiters() <= h.base {
		return 0
	}
	return h.fire()
}

// quiet steps the fake clock by a quiet window, firing a batch the loop
// holds for it: the next input is the leading edge of a burst.
func (h *harness) quiet() {
	h.t.Helper()
	h.settle()
	h.clock.Step(h.mon.cfg.Quiet)
	h.alive()
}

// next waits for the next change.
func (h *harness) next() Change {
	h.t.Helper()
	select {
	case c, ok := <-h.changes:
		if !ok {
			h.t.Fatal("subscription closed")
		}
		return c
	case <-time.After(10 * time.Second):
		h.t.Fatal("no change within 10s")
	}
	return Change{}
}

// nextIdle waits for the next change and for the loop to end the turn
// that published it: the loop marks the end of its rebuild on the clock
// after publishing, and a step of the fake clock must come after that.
func (h *harness) nextIdle() Change {
	h.t.Helper()
	c := h.next()
	h.alive()
	return c
}

// none asserts that no change arrives while a resync, which runs after
// everything queued before it, completes.
func (h *harness) none() {
	h.t.Helper()
	if _, err := h.mon.Resync(context.Background()); err != nil {
		h.t.Fatalf("Resync: %v", err)
	}
	select {
	case c := <-h.changes:
		h.t.Fatalf("unexpected change #%d: %v (triggers %v)", c.ID, c.Changes, c.Triggers)
	default:
	}
}

func hasKind(cs topology.Changes, kind string) bool {
	for _, c := range cs {
		if c.Kind == kind {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, for at most 10s. It waits for the
// loop's goroutine to get there, never for the loop's time, which is the
// fake clock's.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10s")
}

func hasTrigger(c Change, t Trigger) bool {
	for _, x := range c.Triggers {
		if x == t {
			return true
		}
	}
	return false
}

// exactly fails the test unless got is want; the fake clock makes the
// loop's times exact.
func exactly(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want exactly %v", what, got, want)
	}
}

// A burst is two changes: its first event is rebuilt at once (the leading
// edge), the rest as one trailing change a quiet window after the last.
func TestBurstIsLeadingAndTrailingChange(t *testing.T) {
	h := start(t, Config{Quiet: 50 * time.Millisecond, MaxWait: 10 * time.Second, MemPoll: -1, Resync: -1})
	before := h.machine.reads()
	// A 64 GiB DIMM: 512 blocks added, then onlined, 1024 uevents with
	// consecutive SEQNUMs. The machine has grown by one block when the
	// first event comes, by the whole DIMM when the rest do.
	h.machine.set(topology.CPUSet{0, 1}, 4<<30+128<<20)
	h.src.inject("memory", uevent.ActionAdd, 5000)
	exactly(t, "the wait of a burst's first event", h.flush(), 0)
	lead := h.next()
	if lead.Events != 1 || lead.Seqnums.String() != "5000" || lead.Capacity[resources.Memory] != 4<<30+128<<20 {
		t.Errorf("leading change: %d events, seqnums %s, memory %d; want the first event alone and one block more",
			lead.Events, lead.Seqnums.String(), lead.Capacity[resources.Memory])
	}
	exactly(t, "leading latency", lead.Latency(), 0)
	h.machine.set(topology.CPUSet{0, 1}, 68<<30)
	for i := 1; i < 1024; i++ {
		action := uevent.ActionAdd
		if i >= 512 {
			action = uevent.ActionOnline
		}
		h.src.inject("memory", action, uint64(5000+i))
	}
	// The rest is due one quiet window after the last event, not before.
	exactly(t, "the quiet window", h.flush(), 50*time.Millisecond)
	c := h.next()
	if c.Events != 1023 {
		t.Errorf("trailing change has %d events, want 1023", c.Events)
	}
	if got := c.Seqnums.String(); got != "5001-6023" {
		t.Errorf("seqnums = %q, want 5001-6023", got)
	}
	if c.Capacity[resources.Memory] != 68<<30 {
		t.Errorf("capacity memory = %d, want %d", c.Capacity[resources.Memory], uint64(68<<30))
	}
	if !hasTrigger(c, TriggerUevent) {
		t.Errorf("triggers %v, want a uevent trigger", c.Triggers)
	}
	exactly(t, "trailing latency", c.Latency(), 50*time.Millisecond)
	if !c.Time.Equal(t0.Add(50 * time.Millisecond)) {
		t.Errorf("change time %v, want the clock's %v", c.Time, t0.Add(50*time.Millisecond))
	}
	h.none()
	// Two rebuilds for the burst and one for the check in none().
	if got := h.machine.reads() - before; got != 3 {
		t.Errorf("%d rebuilds for one burst and one resync, want 3", got)
	}
	if n := testutil.CollectAndCount(h.metrics.DetectionLatency); n != 1 {
		t.Errorf("latency histogram has %d series, want 1", n)
	}
	// A quiet window after the burst, the next event is a leading edge
	// again.
	h.quiet()
	h.machine.set(topology.CPUSet{0, 1, 2}, 68<<30)
	h.src.inject("cpu", uevent.ActionOnline, 7000)
	exactly(t, "the wait of the next burst's first event", h.flush(), 0)
	if c := h.next(); c.Events != 1 || c.Capacity[resources.CPU] != 3000 || c.Latency() != 0 {
		t.Errorf("next leading change: %d events, cpu %d, latency %v; want 1, 3 CPUs, none", c.Events, c.Capacity[resources.CPU], c.Latency())
	}
}

// Single events a few milliseconds apart are each a leading edge; a burst
// starts when one follows another within a quarter of the quiet window,
// and lasts until a quiet window passes.
func TestSingleEventsAreEachALeadingEdge(t *testing.T) {
	h := start(t, Config{Quiet: 20 * time.Millisecond, MaxWait: time.Second, MemPoll: -1, Resync: -1})
	gain := func(cpus topology.CPUSet, seq uint64) {
		h.machine.set(cpus, 4<<30)
		h.src.inject("cpu", uevent.ActionOnline, seq)
	}
	gain(topology.CPUSet{0, 1, 2}, 1)
	h.nextIdle()
	h.clock.Step(5 * time.Millisecond)
	gain(topology.CPUSet{0, 1, 2, 3}, 2)
	exactly(t, "the wait of a second single event 5ms later", h.flush(), 0)
	if c := h.nextIdle(); c.Events != 1 || c.Capacity[resources.CPU] != 4000 {
		t.Errorf("change of %d events, cpu %d; want the event alone, 4 CPUs", c.Events, c.Capacity[resources.CPU])
	}
	// The next one follows within 5ms: a burst begins, held for the quiet
	// window; inside it, 10ms gaps do not end it.
	h.clock.Step(4 * time.Millisecond)
	gain(topology.CPUSet{0, 1, 2, 3, 4}, 3)
	h.settle()
	for seq := uint64(4); seq <= 5; seq++ {
		h.clock.Step(10 * time.Millisecond)
		gain(topology.CPUSet{0, 1, 2, 3, 4, 5}, seq)
		h.settle()
	}
	exactly(t, "the burst's quiet window", h.fire(), 20*time.Millisecond)
	if c := h.nextIdle(); c.Events != 3 || c.Capacity[resources.CPU] != 6000 {
		t.Errorf("change of %d events, cpu %d; want the burst's 3, 6 CPUs", c.Events, c.Capacity[resources.CPU])
	}
	// A quiet window later, single events are leading edges again.
	h.clock.Step(20 * time.Millisecond)
	gain(topology.CPUSet{0, 1, 2, 3, 4, 5, 6}, 6)
	exactly(t, "the wait of a single event after the burst", h.flush(), 0)
	h.nextIdle()
	h.clock.Step(5 * time.Millisecond)
	gain(topology.CPUSet{0, 1, 2, 3, 4, 5, 6, 7}, 7)
	exactly(t, "the wait of the next single event", h.flush(), 0)
	h.nextIdle()
}

// A CPU taken offline and brought back at once (1ms later, the way a
// test's cycle or an operator's toggle does it) is two changes rebuilt at
// once: the first input after a loss's rebuild is a leading edge however
// soon it comes. The input after it, as soon, begins a burst as before.
func TestGainRightAfterALossIsALeadingEdge(t *testing.T) {
	h := start(t, Config{Quiet: 20 * time.Millisecond, MaxWait: time.Second, MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.injectDev("/devices/system/cpu/cpu2", "cpu", uevent.ActionOnline, 1)
	h.nextIdle()
	for i, seq := 0, uint64(2); i < 3; i, seq = i+1, seq+2 {
		h.clock.Step(time.Millisecond)
		h.machine.set(topology.CPUSet{0, 2}, 4<<30)
		h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, seq)
		exactly(t, fmt.Sprintf("cycle %d: the wait of the offline", i), h.flush(), 0)
		if c := h.nextIdle(); c.Capacity[resources.CPU] != 2000 {
			t.Fatalf("cycle %d: offline change to cpu %d, want 2 CPUs", i, c.Capacity[resources.CPU])
		}
		h.clock.Step(time.Millisecond)
		h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
		h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOnline, seq+1)
		exactly(t, fmt.Sprintf("cycle %d: the wait of the online 1ms after the offline", i), h.flush(), 0)
		if c := h.nextIdle(); c.Events != 1 || c.Capacity[resources.CPU] != 3000 || c.Latency() != 0 {
			t.Fatalf("cycle %d: online change of %d events, cpu %d, latency %v; want the event alone at once, 3 CPUs", i, c.Events, c.Capacity[resources.CPU], c.Latency())
		}
	}
	// A gain 1ms after that gain (no loss between) begins a burst.
	h.clock.Step(time.Millisecond)
	h.machine.set(topology.CPUSet{0, 1, 2, 3}, 4<<30)
	h.src.injectDev("/devices/system/cpu/cpu3", "cpu", uevent.ActionOnline, 8)
	exactly(t, "the wait of a second gain 1ms after a gain", h.flush(), 20*time.Millisecond)
	h.nextIdle()
}

// A loss in the middle of a burst is not held: it is rebuilt at once, with
// the inputs that were waiting for the burst to end.
func TestLossIsNeverHeld(t *testing.T) {
	h := start(t, Config{Quiet: 50 * time.Millisecond, MaxWait: 10 * time.Second, MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.inject("cpu", uevent.ActionAdd, 1)
	h.next() // the leading edge
	h.src.injectDev("/devices/system/cpu/cpu2", "cpu", uevent.ActionOnline, 2)
	h.settle()
	if h.clock.Waiters() <= h.base {
		t.Fatal("the burst's second event was not held for the quiet window")
	}
	// cpu1, online in the model, goes offline: a loss.
	h.machine.set(topology.CPUSet{0, 2}, 4<<30)
	h.clock.Step(10 * time.Millisecond)
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 3)
	c := h.next()
	if c.Events != 2 || c.Seqnums.String() != "2-3" || c.Capacity[resources.CPU] != 2000 {
		t.Errorf("change with %d events, seqnums %s, cpu %d; want the held event and the loss, 2 CPUs", c.Events, c.Seqnums.String(), c.Capacity[resources.CPU])
	}
	exactly(t, "latency from the held event", c.Latency(), 10*time.Millisecond)
	if h.clock.Waiters() != h.base {
		t.Error("the loop still holds a batch after the loss")
	}
	// An offline event for a CPU the model has offline already is no
	// loss: it waits in the burst.
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 4)
	exactly(t, "the wait of an offline event for an offline CPU", h.flush(), 50*time.Millisecond)
	h.none()
}

// Only the actions that take a device away can be a loss; which devices
// are is topology.IsLoss's table.
func TestLossActions(t *testing.T) {
	snap := &topology.Snapshot{CPUs: topology.CPUs{Online: topology.CPUSet{0, 1}},
		MemoryBlocks: []topology.MemoryBlock{{ID: 3, State: topology.BlockOnline}}}
	cpu1 := topology.Device{Kind: topology.DeviceCPU, ID: 1}
	block3 := topology.Device{Kind: topology.DeviceMemory, ID: 3}
	for _, tc := range []struct {
		a    uevent.Action
		want bool
	}{
		{uevent.ActionOffline, true},
		{uevent.ActionRemove, true},
		{uevent.ActionAdd, false},
		{uevent.ActionOnline, false},
		{uevent.ActionChange, false},
		{uevent.ActionMove, false},
		{uevent.ActionBind, false},
		{uevent.ActionUnbind, false},
		{uevent.ActionUnknown, false},
	} {
		for _, dev := range []topology.Device{cpu1, block3} {
			if got := loss(snap, tc.a, dev); got != tc.want {
				t.Errorf("loss(%s of %s) = %v, want %v", tc.a, dev, got, tc.want)
			}
		}
	}
}

func TestQuietWindowExtendsWithEachEvent(t *testing.T) {
	h := start(t, Config{Quiet: 50 * time.Millisecond, MaxWait: time.Second, MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.inject("cpu", uevent.ActionOnline, 1)
	h.next() // the leading edge
	h.machine.set(topology.CPUSet{0, 1, 2, 3}, 4<<30)
	// Three events 30ms apart: each pushes the deadline out to 50ms after
	// itself.
	for i := range 3 {
		h.src.inject("cpu", uevent.ActionOnline, uint64(2+i))
		h.settle()
		if i < 2 {
			h.clock.Step(30 * time.Millisecond)
		}
	}
	exactly(t, "wait after the last event", h.fire(), 50*time.Millisecond)
	c := h.next()
	if c.Events != 3 {
		t.Errorf("change has %d events, want 3", c.Events)
	}
	exactly(t, "latency", c.Latency(), 110*time.Millisecond)
}

func TestMaxWaitBoundsAnEndlessBurst(t *testing.T) {
	const quiet, maxWait, gap = 50 * time.Millisecond, 200 * time.Millisecond, 10 * time.Millisecond
	h := start(t, Config{Quiet: quiet, MaxWait: maxWait, MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.inject("cpu", uevent.ActionOnline, 1)
	h.next() // the leading edge
	// Events keep coming every 10ms, so the quiet window never closes; the
	// trailing change must still be made MaxWait after its first event,
	// and not before.
	h.machine.set(topology.CPUSet{0, 1, 2, 3}, 4<<30)
	var elapsed time.Duration
	for seq := uint64(2); ; seq++ {
		h.src.inject("cpu", uevent.ActionOnline, seq)
		h.settle()
		h.clock.Step(gap)
		elapsed += gap
		if fired := h.clock.Waiters() == h.base; fired != (elapsed >= maxWait) {
			t.Fatalf("after %v of events every %v: timer fired %v, want it to fire at %v", elapsed, gap, fired, maxWait)
		}
		if elapsed >= maxWait {
			break
		}
	}
	c := h.next()
	if c.Capacity[resources.CPU] != 4000 {
		t.Errorf("cpu = %d, want 4", c.Capacity[resources.CPU])
	}
	if want := int(maxWait / gap); c.Events != want {
		t.Errorf("change has %d events, want %d", c.Events, want)
	}
	exactly(t, "latency", c.Latency(), maxWait)
}

func TestForgedEventChangesNothing(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	// The message claims cpu1 went offline; sysfs says it did not. (As
	// a loss, or the first event of a burst, it is read at once.)
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 42)
	exactly(t, "the wait of a loss", h.flush(), 0)
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds >= 2 })
	h.none()
	snap, capac := h.mon.Snapshot()
	if capac[resources.CPU] != 2000 || snap.CPUs.Online.String() != "0-1" {
		t.Errorf("model changed by a forged event: cpu %d online %s", capac[resources.CPU], snap.CPUs.Online)
	}
	if got := testutil.ToFloat64(h.metrics.Rebuilds.WithLabelValues("uevent", "unchanged")); got != 1 {
		t.Errorf("unchanged uevent rebuilds = %v, want 1", got)
	}
	if st := h.mon.Stats(); st.Changes != 1 || st.Uevents != 1 {
		t.Errorf("stats: %d changes, %d uevents; want 1 (startup) and 1", st.Changes, st.Uevents)
	}
}

func TestLostEventsTriggerRescan(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.src.ch <- result{err: &uevent.LostError{Reason: uevent.DropOverflow}}
	c := h.next() // at once: no timer is set
	if h.clock.Waiters() != h.base {
		t.Error("the loop set a timer for the rescan")
	}
	if !hasTrigger(c, TriggerLost) || c.Capacity[resources.CPU] != 1000 {
		t.Errorf("change %v cpu %d: want a lost-events rescan that sees 1 CPU", c.Triggers, c.Capacity[resources.CPU])
	}
	if want := (Rebuild{Kind: RebuildFull, Reason: "uevents lost"}); c.Rebuild != want {
		t.Errorf("rebuild %+v, want %+v", c.Rebuild, want)
	}
	if _, updates := h.machine.calls(); updates != 0 {
		t.Errorf("%d incremental reads after lost events, want none", updates)
	}
	exactly(t, "latency", c.Latency(), 0)
	if st := h.mon.Stats(); st.LostEvents != 1 {
		t.Errorf("lost events = %d, want 1", st.LostEvents)
	}
}

func TestUnexpectedReadErrorKeepsRunning(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.src.ch <- result{err: errors.New("recvfrom: interrupted")}
	// The error is a rescan, at once, and a 100ms back-off of the reader
	// (a waiter of its own).
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds == 2 && h.clock.Waiters() == h.base+1 })
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.inject("cpu", uevent.ActionOnline, 7) // at 0ms; read after the back-off
	h.alive()
	if st := h.mon.Stats(); st.Uevents != 0 || st.Changes != 1 {
		t.Fatalf("stats %+v: the reader did not back off", st)
	}
	h.clock.Step(100 * time.Millisecond)
	// Read at 100ms, a quiet window after the rescan: a leading edge.
	c := h.next()
	if c.Capacity[resources.CPU] != 3000 || !slices.Equal(c.Triggers, []Trigger{TriggerUevent}) {
		t.Errorf("triggers %v cpu %d after a read error and an event, want uevent and 3", c.Triggers, c.Capacity[resources.CPU])
	}
	exactly(t, "latency", c.Latency(), 100*time.Millisecond)
}

func TestMemTotalWatchWithoutUevent(t *testing.T) {
	h := start(t, Config{MemPoll: 5 * time.Millisecond, Resync: -1})
	// A balloon inflates: MemTotal drops, no uevent.
	h.machine.set(topology.CPUSet{0, 1}, 3<<30)
	h.clock.Step(4 * time.Millisecond)
	h.alive()
	if h.clock.Waiters() != h.base {
		t.Fatal("the watch acted before its interval")
	}
	h.clock.Step(time.Millisecond) // the poll sees the change: a loss, read at once
	c := h.next()
	if !hasTrigger(c, TriggerMemTotal) || c.Events != 0 {
		t.Errorf("triggers %v events %d: want memtotal and no uevents", c.Triggers, c.Events)
	}
	if want := (Rebuild{Kind: RebuildFull, Reason: "MemTotal changed with no uevent"}); c.Rebuild != want {
		t.Errorf("rebuild %+v, want %+v", c.Rebuild, want)
	}
	if c.Capacity[resources.Memory] != 3<<30 {
		t.Errorf("memory = %d, want %d", c.Capacity[resources.Memory], uint64(3<<30))
	}
	if !hasKind(c.Changes, topology.ChangeMemTotal) {
		t.Errorf("changes = %v, want a memtotal change", c.Changes)
	}
	exactly(t, "latency from the poll", c.Latency(), 0)
	// Polls that see the same value again start nothing.
	h.clock.Step(time.Second)
	h.none()
}

func TestPeriodicResync(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: 10 * time.Second})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.clock.Step(10*time.Second - time.Millisecond)
	h.alive()
	if st := h.mon.Stats(); st.Rebuilds != 1 {
		t.Fatalf("%d rebuilds before the resync interval, want 1 (startup)", st.Rebuilds)
	}
	h.clock.Step(time.Millisecond)
	c := h.next()
	if !slices.Equal(c.Triggers, []Trigger{TriggerResync}) || c.LatencySeconds != 0 {
		t.Errorf("triggers %v latency %v, want resync and none", c.Triggers, c.LatencySeconds)
	}
	if !c.Time.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("resync at %v, want %v", c.Time, t0.Add(10*time.Second))
	}
	// A full rebuild, and the incremental model of the moment checked
	// against it.
	if want := (Rebuild{Kind: RebuildFull, Reason: "periodic resync", Verified: true}); c.Rebuild != want {
		t.Errorf("rebuild %+v, want %+v", c.Rebuild, want)
	}
	if snaps, updates := h.machine.calls(); snaps != 2 || updates != 1 {
		t.Errorf("%d full and %d incremental reads (startup and a resync), want 2 and 1", snaps, updates)
	}
}

func TestResyncReportsChange(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	r, err := h.mon.Resync(context.Background())
	if err != nil || r.Changed {
		t.Fatalf("Resync on an unchanged machine = %+v, %v; want unchanged", r, err)
	}
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	r, err = h.mon.Resync(context.Background())
	if err != nil || !r.Changed || r.Change == nil || r.Change.Capacity[resources.CPU] != 3000 {
		t.Fatalf("Resync after a change = %+v, %v; want changed to 3 CPUs", r, err)
	}
	if want := (Rebuild{Kind: RebuildFull, Reason: "resync requested"}); r.Change.Rebuild != want {
		t.Errorf("rebuild %+v, want %+v", r.Change.Rebuild, want)
	}
	if c := h.next(); c.ID != r.Change.ID {
		t.Errorf("subscriber saw change #%d, resync returned #%d", c.ID, r.Change.ID)
	}
}

func TestTransientSnapshotErrorIsRetried(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.machine.mu.Lock()
	h.machine.fail = 2
	h.machine.online = topology.CPUSet{0}
	h.machine.mu.Unlock()
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 9)
	h.settle() // a loss: rebuilt at once, and failed
	// Two failures, each retried after twice the previous wait.
	for n, backoff := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond} {
		waitFor(t, func() bool { return h.mon.Stats().RebuildErrors == uint64(n+1) })
		h.alive()
		exactly(t, fmt.Sprintf("back-off after failure %d", n+1), h.fire(), backoff)
	}
	c := h.next()
	if !hasTrigger(c, TriggerRetry) || c.Capacity[resources.CPU] != 1000 {
		t.Errorf("triggers %v cpu %d: want a retried rebuild that sees 1 CPU", c.Triggers, c.Capacity[resources.CPU])
	}
	exactly(t, "latency", c.Latency(), 120*time.Millisecond)
	if st := h.mon.Stats(); st.RebuildErrors != 2 || st.LastRebuildErr != "" {
		t.Errorf("stats %+v: want 2 rebuild errors, cleared after success", st)
	}
}

func TestRetriesEndAndKeepTheModel(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.machine.mu.Lock()
	h.machine.fail = maxRetries + 1
	h.machine.online = topology.CPUSet{0}
	h.machine.mu.Unlock()
	h.src.inject("cpu", uevent.ActionOffline, 9)
	h.settle()
	for n := 1; n <= maxRetries; n++ {
		waitFor(t, func() bool { return h.mon.Stats().RebuildErrors == uint64(n) })
		h.alive()
		h.fire()
	}
	waitFor(t, func() bool { return h.mon.Stats().RebuildErrors == maxRetries+1 })
	h.alive()
	if h.clock.Waiters() != h.base {
		t.Error("the loop set its timer again after the last retry")
	}
	if _, capac := h.mon.Snapshot(); capac[resources.CPU] != 2000 {
		t.Errorf("cpu = %d after the retries ran out, want the previous model's 2", capac[resources.CPU])
	}
	// The next input rebuilds.
	if r, err := h.mon.Resync(context.Background()); err != nil || !r.Changed {
		t.Errorf("Resync = %+v, %v; want the change", r, err)
	}
}

func TestFirstSnapshotErrorFailsRun(t *testing.T) {
	m := &fakeMachine{fail: 1}
	src := newFakeSource(clock.RealClock{})
	mon := New(m, src, Config{})
	err := mon.Run(context.Background())
	if err == nil {
		t.Fatal("Run succeeded with an unreadable machine")
	}
	select {
	case <-src.closed:
	default:
		t.Error("Run did not close the source")
	}
	if _, err := mon.Resync(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Resync after Run failed = %v, want ErrStopped", err)
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	slow, cancel := h.mon.Subscribe()
	defer cancel()
	for i := range subscriberBuffer + 2 {
		h.machine.set(topology.CPUSet{0}, uint64(1+i)<<30)
		if _, err := h.mon.Resync(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.next()
	}
	n := 0
	for range slow {
		n++
	}
	if n != subscriberBuffer {
		t.Errorf("slow subscriber got %d changes before its channel closed, want %d", n, subscriberBuffer)
	}
	cancel() // safe after the monitor closed it
}

func TestHistoryIsBounded(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1, History: 3})
	for i := range 5 {
		h.machine.set(topology.CPUSet{0}, uint64(1+i)<<30)
		if _, err := h.mon.Resync(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.next()
	}
	hist := h.mon.History()
	if len(hist) != 3 || hist[0].ID != 4 || hist[2].ID != 6 {
		ids := []uint64{}
		for _, c := range hist {
			ids = append(ids, c.ID)
		}
		t.Errorf("history ids %v, want [4 5 6]", ids)
	}
}

func TestAlive(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !h.mon.Alive(ctx) {
		t.Error("Alive = false for a running loop")
	}
}

// Check names why the loop does not answer: stopped, or stuck (here in a
// subscriber that does not return), so that the probes can say so.
func TestCheckStoppedAndStuck(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		m := New(&fakeMachine{online: topology.CPUSet{0}, memTotal: 1 << 30}, nil, Config{MemPoll: -1, Resync: -1})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		<-m.Ready()
		if err := m.Check(context.Background()); err != nil {
			t.Fatalf("Check of a running loop: %v", err)
		}
		stop()
		<-done
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Check(c); !errors.Is(err, ErrStopped) {
			t.Errorf("Check of a stopped loop: %v, want ErrStopped", err)
		}
		if m.Alive(c) {
			t.Error("Alive = true for a stopped loop")
		}
	})
	t.Run("stuck", func(t *testing.T) {
		release := make(chan struct{})
		stuck := SubscriberFunc(func(Change, *topology.Snapshot) { <-release })
		m := New(&fakeMachine{online: topology.CPUSet{0}, memTotal: 1 << 30}, nil, Config{MemPoll: -1, Resync: -1, Subscribers: []Subscriber{stuck}})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() { close(release); stop(); <-done }()
		c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := m.Check(c)
		if err == nil || errors.Is(err, ErrStopped) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Check of a stuck loop: %v, want a deadline error", err)
		}
	})
}

func TestSeqnumsJSONRoundTrip(t *testing.T) {
	var s Seqnums
	for _, n := range []uint64{10, 11, 12, 20, 21, 40} {
		s.Add(n)
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `"10-12,20-21,40"` {
		t.Errorf("JSON %s, want \"10-12,20-21,40\"", b)
	}
	var back Seqnums
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if back.String() != s.String() || back.Count != 6 {
		t.Errorf("round trip %q count %d, want %q count 6", back.String(), back.Count, s.String())
	}
	var big Seqnums
	for i := range maxSeqRanges + 10 {
		big.Add(uint64(i * 2))
	}
	if !big.Truncated || len(big.Ranges) != maxSeqRanges {
		t.Errorf("unbounded seqnums: %d ranges, truncated %v", len(big.Ranges), big.Truncated)
	}
}

// On the real clock, the one the daemon runs on: the defaults' timers and
// the MemTotal watch's ticker fire by themselves. Every other test in this
// file steps a fake clock.
func TestRealClock(t *testing.T) {
	h := start(t, Config{MemPoll: 5 * time.Millisecond, Resync: -1, Clock: clock.RealClock{}})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.src.inject("cpu", uevent.ActionOffline, 1)
	if c := h.next(); c.Capacity[resources.CPU] != 1000 || c.LatencySeconds <= 0 {
		t.Errorf("cpu %d latency %v, want 1 CPU with a latency", c.Capacity[resources.CPU], c.LatencySeconds)
	}
	h.machine.set(topology.CPUSet{0}, 3<<30)
	if c := h.next(); !slices.Equal(c.Triggers, []Trigger{TriggerMemTotal}) {
		t.Errorf("triggers %v, want memtotal", c.Triggers)
	}
}

// TestEventsQueuedDuringARebuildAreOneBurst: uevents of a burst that
// arrived while the loop was busy (their receive stamps long past a quiet
// window when the loop takes them) are one trailing batch whose quiet
// window counts from when the loop took them, not one late batch each.
func TestEventsQueuedDuringARebuildAreOneBurst(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
	h.src.inject("cpu", uevent.ActionOnline, 1)
	h.next() // the leading edge
	h.machine.set(topology.CPUSet{0, 1, 2, 3}, 4<<30)
	sent := h.clock.Now()
	for seq := uint64(2); seq <= 6; seq++ {
		// Stamped at sent, as the reader does; the loop takes them later.
		h.src.ch <- result{ev: uevent.Event{Action: uevent.ActionOnline, Subsystem: "cpu", Seqnum: seq, Received: sent.Add(-100 * time.Millisecond)}}
		h.src.sent++
	}
	if d := h.flush(); d != 20*time.Millisecond {
		t.Errorf("the batch fell due %v after the loop took it, want the 20ms quiet window", d)
	}
	c := h.next()
	if c.Events != 5 || c.Seqnums.String() != "2-6" {
		t.Errorf("change with %d events, seqnums %s; want all 5 in one", c.Events, c.Seqnums.String())
	}
	h.none()
}

// Inputs that reach the queue before a due batch is rebuilt are rebuilt
// with it: the rebuild reads what their events name already.
func TestQueuedInputsJoinADueBatch(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	gate := make(chan struct{})
	h.machine.mu.Lock()
	h.machine.onSnapshot = func(f *fakeMachine) {
		f.onSnapshot = nil
		f.mu.Unlock()
		<-gate // the loop is busy with a resync
		f.mu.Lock()
	}
	h.machine.mu.Unlock()
	resynced := make(chan error, 1)
	go func() { _, err := h.mon.Resync(context.Background()); resynced <- err }()
	waitFor(t, func() bool { h.machine.mu.Lock(); defer h.machine.mu.Unlock(); return h.machine.snapshots == 2 })
	h.machine.set(topology.CPUSet{0}, 4<<30)
	for seq := uint64(1); seq <= 3; seq++ {
		h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, seq)
	}
	waitFor(t, func() bool { return len(h.src.ch) == 0 })
	time.Sleep(20 * time.Millisecond) // from the reader into the queue
	close(gate)
	if err := <-resynced; err != nil {
		t.Fatal(err)
	}
	c := h.next() // the resync's: it saw the loss already
	if c.Capacity[resources.CPU] != 1000 || !hasTrigger(c, TriggerRequest) {
		t.Errorf("change %v cpu %d, want the resync's, with 1 CPU", c.Triggers, c.Capacity[resources.CPU])
	}
	// The first event, the leading edge of a burst, is due at once; the
	// two queued behind it join its rebuild, and nothing is held.
	h.settle()
	if st := h.mon.Stats(); st.Rebuilds != 3 || h.clock.Waiters() != h.base {
		t.Errorf("%d rebuilds (startup, resync, events), timer set %v; want 3 and none: the queued events were not one batch",
			st.Rebuilds, h.clock.Waiters() != h.base)
	}
	h.none()
}
