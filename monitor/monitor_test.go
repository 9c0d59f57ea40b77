package monitor

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	cpuOnly   int // SnapshotCPUs calls
	fail      int // the next fail Snapshot calls return an error
}

func (f *fakeMachine) Snapshot() (*topology.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots++
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("read /sys/devices/system/cpu/online: transient")
	}
	node := topology.Node{ID: 0, MemTotal: f.memTotal}
	for _, id := range f.online {
		node.CPUs = append(node.CPUs, topology.CPU{ID: id})
	}
	return &topology.Snapshot{
		CPUs:     topology.CPUs{Online: append(topology.CPUSet(nil), f.online...)},
		Nodes:    []topology.Node{node},
		MemTotal: f.memTotal,
	}, nil
}

func (f *fakeMachine) SnapshotCPUs(prev *topology.Snapshot) (*topology.Snapshot, error) {
	f.mu.Lock()
	f.cpuOnly++
	f.mu.Unlock()
	return f.Snapshot()
}

func (f *fakeMachine) MemTotal() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.memTotal, nil
}

func (f *fakeMachine) set(online topology.CPUSet, memTotal uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.online, f.memTotal = online, memTotal
}

func (f *fakeMachine) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots
}

// fakeSource delivers what the test injects. Injecting never blocks.
type fakeSource struct {
	ch     chan result
	closed chan struct{}
	once   sync.Once
}

type result struct {
	ev  uevent.Event
	err error
}

func newFakeSource() *fakeSource {
	return &fakeSource{ch: make(chan result, 100000), closed: make(chan struct{})}
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
	s.ch <- result{ev: uevent.Event{Action: action, Subsystem: subsystem, Seqnum: seq, Received: time.Now()}}
}

type harness struct {
	t       *testing.T
	mon     *Monitor
	machine *fakeMachine
	src     *fakeSource
	metrics *metrics.Metrics
	changes <-chan Change
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, machine: &fakeMachine{online: topology.CPUSet{0, 1}, memTotal: 4 << 30}, src: newFakeSource(), metrics: metrics.New()}
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

// waitFor polls cond until it holds, for at most 10s.
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

func TestBurstIsOneChange(t *testing.T) {
	h := start(t, Config{Quiet: 50 * time.Millisecond, MaxWait: 10 * time.Second, MemPoll: -1, Resync: -1})
	before := h.machine.count()
	// A 64 GiB DIMM: 512 blocks added, then onlined, 1024 uevents with
	// consecutive SEQNUMs, the hardware change visible from the start.
	h.machine.set(topology.CPUSet{0, 1}, 68<<30)
	for i := range 1024 {
		action := uevent.ActionAdd
		if i >= 512 {
			action = uevent.ActionOnline
		}
		h.src.inject("memory", action, uint64(5000+i))
	}
	c := h.next()
	if c.Events != 1024 {
		t.Errorf("change has %d events, want 1024", c.Events)
	}
	if got := c.Seqnums.String(); got != "5000-6023" {
		t.Errorf("seqnums = %q, want 5000-6023", got)
	}
	if c.Capacity[resources.Memory] != 68<<30 {
		t.Errorf("capacity memory = %d, want %d", c.Capacity[resources.Memory], uint64(68<<30))
	}
	if !hasTrigger(c, TriggerUevent) || c.LatencySeconds <= 0 {
		t.Errorf("triggers %v latency %v: want a uevent trigger with a latency", c.Triggers, c.LatencySeconds)
	}
	h.none()
	// One rebuild for the burst and one for the check in none().
	if got := h.machine.count() - before; got != 2 {
		t.Errorf("%d rebuilds for one burst and one resync, want 2", got)
	}
	if n := testutil.CollectAndCount(h.metrics.DetectionLatency); n != 1 {
		t.Errorf("latency histogram has %d series, want 1", n)
	}
}

func TestMaxWaitBoundsAnEndlessBurst(t *testing.T) {
	h := start(t, Config{Quiet: 200 * time.Millisecond, MaxWait: 200 * time.Millisecond, MemPoll: -1, Resync: -1})
	// Events keep coming every 10ms, so the quiet window never closes; the
	// change must still be seen once MaxWait has passed since the first.
	h.machine.set(topology.CPUSet{0}, 4<<30)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		seq := uint64(1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				h.src.inject("cpu", uevent.ActionOffline, seq)
				seq++
			}
		}
	}()
	c := h.next()
	close(stop)
	wg.Wait()
	if c.Capacity[resources.CPU] != 1000 {
		t.Errorf("cpu = %d, want 1", c.Capacity[resources.CPU])
	}
}

func TestForgedEventChangesNothing(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	// The message claims cpu1 went offline; sysfs says it did not.
	h.src.inject("cpu", uevent.ActionOffline, 42)
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
	c := h.next()
	if !hasTrigger(c, TriggerLost) || c.Capacity[resources.CPU] != 1000 {
		t.Errorf("change %v cpu %d: want a lost-events rescan that sees 1 CPU", c.Triggers, c.Capacity[resources.CPU])
	}
	if st := h.mon.Stats(); st.LostEvents != 1 {
		t.Errorf("lost events = %d, want 1", st.LostEvents)
	}
}

func TestUnexpectedReadErrorKeepsRunning(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.src.ch <- result{err: errors.New("recvfrom: interrupted")}
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.src.inject("cpu", uevent.ActionOffline, 7)
	if c := h.next(); c.Capacity[resources.CPU] != 1000 {
		t.Errorf("cpu = %d after a read error and an event, want 1", c.Capacity[resources.CPU])
	}
}

func TestMemTotalWatchWithoutUevent(t *testing.T) {
	h := start(t, Config{MemPoll: 5 * time.Millisecond, Resync: -1})
	// A balloon inflates: MemTotal drops, no uevent.
	h.machine.set(topology.CPUSet{0, 1}, 3<<30)
	c := h.next()
	if !hasTrigger(c, TriggerMemTotal) || c.Events != 0 {
		t.Errorf("triggers %v events %d: want memtotal and no uevents", c.Triggers, c.Events)
	}
	if c.Capacity[resources.Memory] != 3<<30 {
		t.Errorf("memory = %d, want %d", c.Capacity[resources.Memory], uint64(3<<30))
	}
	if !hasKind(c.Changes, topology.ChangeMemTotal) {
		t.Errorf("changes = %v, want a memtotal change", c.Changes)
	}
}

func TestPeriodicResync(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: 10 * time.Millisecond})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	if c := h.next(); !hasTrigger(c, TriggerResync) {
		t.Errorf("triggers %v, want resync", c.Triggers)
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
	h.src.inject("cpu", uevent.ActionOffline, 9)
	c := h.next()
	if !hasTrigger(c, TriggerRetry) || c.Capacity[resources.CPU] != 1000 {
		t.Errorf("triggers %v cpu %d: want a retried rebuild that sees 1 CPU", c.Triggers, c.Capacity[resources.CPU])
	}
	if st := h.mon.Stats(); st.RebuildErrors != 2 || st.LastRebuildErr != "" {
		t.Errorf("stats %+v: want 2 rebuild errors, cleared after success", st)
	}
}

func TestFirstSnapshotErrorFailsRun(t *testing.T) {
	m := &fakeMachine{fail: 1}
	src := newFakeSource()
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

func TestCPUBatchLeavesMemoryBlocksUnread(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.src.inject("cpu", uevent.ActionOffline, 1)
	h.next()
	h.machine.mu.Lock()
	cpuOnly := h.machine.cpuOnly
	h.machine.mu.Unlock()
	if cpuOnly != 1 {
		t.Errorf("a cpu-only batch made %d SnapshotCPUs calls, want 1", cpuOnly)
	}
	h.machine.set(topology.CPUSet{0}, 3<<30)
	h.src.inject("memory", uevent.ActionOffline, 2)
	h.next()
	h.machine.mu.Lock()
	cpuOnly = h.machine.cpuOnly
	h.machine.mu.Unlock()
	if cpuOnly != 1 {
		t.Errorf("a memory event was rebuilt without its memory blocks (%d SnapshotCPUs calls)", cpuOnly)
	}
}
