package monitor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
	"github.com/node-resized/node-resized/uevent"
)

// A 64 GiB DIMM, block by block, as the kernel does it, under the shipped
// coalescing windows (Config's defaults: 20ms quiet, 500ms at most) and on
// the real clock: these tests are about real timing.
//
// add_memory_resource registers the DIMM's memory block devices one after
// the other, each sending its "add" uevent once its directory exists: a
// device registration, tens of microseconds a block. With auto-onlining the
// kernel then onlines them in turn: a block's struct pages initialised, its
// 128 MiB handed to the page allocator, MemTotal grown by the block, then its
// "online" uevent: a few hundred microseconds a block. The paces below are
// those estimates (the ones test/e2e's DIMM burst drives the real kernel
// with); no per-block spacing has been measured in the VM guest yet. A block
// takes its pace at the least, longer when changing the tree takes longer,
// and the test logs the gaps it reached. An unplug is the same in reverse:
// each block offlined (pages isolated and migrated, MemTotal shrunk; the
// online pace), then each removed (a device unregistered; the add pace).
const (
	dimmBlocks = 512  // 64 GiB in 128 MiB blocks
	dimmFirst  = 64   // the DIMM's first block, after sysfsMachine's 64
	dimmSeq0   = 7001 // the SEQNUM of the burst's first uevent (sysfsHarness's first)
	addPace    = 100 * time.Microsecond
	onlinePace = 300 * time.Microsecond
)

// phase is one pass of the kernel over the DIMM's blocks: for each block,
// change the tree, then send the block's uevent.
type phase struct {
	action uevent.Action
	pace   time.Duration
	change func(id int)
}

// recorder keeps every change the loop makes, with whether the change's
// capacity was its model's, as a subscriber sees them.
type recorder struct {
	mu      sync.Mutex
	changes []Change
	wrong   []string
}

func (r *recorder) OnChange(c Change, snap *topology.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Triggers[0] == TriggerStartup {
		return
	}
	if got := snap.Capacity(); !got.Equal(c.Capacity) {
		r.wrong = append(r.wrong, fmt.Sprintf("change #%d: capacity %s, its model's %s", c.ID, c.Capacity, got))
	}
	r.changes = append(r.changes, c)
}

func (r *recorder) result() ([]Change, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), slices.Clone(r.wrong)
}

// startDIMM runs the loop with the shipped coalescing windows on the real
// clock over machine's tree. The MemTotal watch and the resync are off: the
// count of changes is to be the uevents', not the phase of a 1s poll's.
func startDIMM(t *testing.T, m topologytest.Machine) (*sysfsHarness, *recorder) {
	t.Helper()
	rec := &recorder{}
	h := startSysfsOn(t, m, Config{MemPoll: -1, Resync: -1, Clock: clock.RealClock{}, Subscribers: []Subscriber{rec}})
	if q, mw := h.mon.cfg.Quiet, h.mon.cfg.MaxWait; q != 20*time.Millisecond || mw != 500*time.Millisecond {
		t.Fatalf("coalescing %v/%v, want the shipped 20ms/500ms", q, mw)
	}
	return h, rec
}

// burst runs the phases over the DIMM's blocks, each block at the phase's
// pace, and returns how long it took.
func (h *sysfsHarness) burst(phases ...phase) time.Duration {
	start := time.Now()
	for _, p := range phases {
		for id := dimmFirst; id < dimmFirst+dimmBlocks; id++ {
			began := time.Now()
			p.change(id)
			h.memoryEvent(p.action, id)
			spinUntil(began.Add(p.pace))
		}
	}
	return time.Since(start)
}

// spinUntil returns at t: a sleep is too coarse for a pace of a hundred
// microseconds.
func spinUntil(t time.Time) {
	for time.Now().Before(t) {
	}
}

// checkBurst waits for the loop to catch up with the tree and checks what
// it made of the burst: the final model is the tree's, no uevent was lost,
// every change's capacity is its model's, and the changes are bounded.
//
// The bound, as the loop coalesces: the burst's first event is a change of
// its own, at once (the leading edge); so is each loss (losses are the
// uevents for which loss says true, in the order sent); the other events
// are coalesced into trailing changes, one for each coalescing window they
// make as sent (the windows of a loop that waits for quiet after the last
// event and at most MaxWait after the first). At the kernel's pace a
// hot-add is one such window: two changes.
func checkBurst(t *testing.T, h *sysfsHarness, rec *recorder, took time.Duration, losses int) []Change {
	t.Helper()
	fsys, err := topology.NewFS(h.tree.Sys, h.tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.mon.Stats().Uevents == h.src.sent })
	waitFor(t, func() bool {
		snap, _ := h.mon.Snapshot()
		return len(topology.Diff(snap, want)) == 0
	})
	// Nothing is pending that would change the model again.
	if r, err := h.mon.Resync(context.Background()); err != nil || r.Changed {
		t.Errorf("Resync after the burst = %+v, %v; want unchanged", r, err)
	}
	snap, capac := h.mon.Snapshot()
	if !capac.Equal(want.Capacity()) || !slices.Equal(snap.MemoryBlocks, want.MemoryBlocks) {
		t.Errorf("the final model (capacity %s, %d blocks) is not the tree's (%s, %d blocks)",
			capac, len(snap.MemoryBlocks), want.Capacity(), len(want.MemoryBlocks))
	}
	if n := testutil.ToFloat64(h.metrics.IncrementalMismatch); n != 0 {
		t.Errorf("%v incremental models contradicted by a full rebuild, want none", n)
	}
	st := h.mon.Stats()
	if st.LostEvents != 0 || st.Uevents != 2*dimmBlocks {
		t.Errorf("stats: %d uevents, %d lost; want %d and none", st.Uevents, st.LostEvents, 2*dimmBlocks)
	}
	changes, wrong := rec.result()
	for _, w := range wrong {
		t.Error(w)
	}
	// Windows taken a little narrower than the loop's, for the delay
	// between a uevent's stamp and the loop taking it: more, shorter
	// windows, so an upper bound on the loop's rebuilds.
	rest := h.src.stamps[1+losses:]
	windows, _ := coalescingWindows(rest, h.mon.cfg.Quiet/2, h.mon.cfg.MaxWait*9/10)
	bound := 1 + losses + windows
	events := 0
	t.Logf("one 64 GiB DIMM: %d uevents sent in %v (gaps %s); %d model changes, %d rebuilds; the first event, %d losses, and %d coalescing windows of the rest as sent: bound %d",
		len(h.src.stamps), took.Round(time.Millisecond), gaps(h.src.stamps), len(changes), st.Rebuilds-1, losses, windows, bound)
	for i, c := range changes {
		events += c.Events
		if i < 3 || i >= len(changes)-3 {
			t.Logf("  change #%d %v: %d uevents, seqnums %s, latency %v, memory %d MiB, %s rebuild%s: %s",
				c.ID, c.Triggers, c.Events, c.Seqnums.String(), c.Latency().Round(time.Microsecond),
				c.Capacity[resources.Memory]>>20, c.Rebuild.Kind, reason(c.Rebuild), c.Changes)
		} else if i == 3 {
			t.Logf("  ... %d changes more ...", len(changes)-6)
		}
		if !slices.Equal(c.Triggers, []Trigger{TriggerUevent}) || c.LatencySeconds <= 0 {
			t.Errorf("change #%d: triggers %v latency %v, want uevent alone, with a latency", c.ID, c.Triggers, c.LatencySeconds)
		}
	}
	if len(changes) == 0 || len(changes) > bound {
		t.Errorf("the DIMM made %d model changes, want 1 to %d (the first event, one per loss, one per coalescing window of the rest as sent)",
			len(changes), bound)
	}
	if len(changes) > 0 {
		// The first event is rebuilt at once, before the rest of the
		// burst is taken.
		if r := changes[0].Seqnums.Ranges; len(r) == 0 || r[0].First != dimmSeq0 {
			t.Errorf("the first change carries seqnums %s, want the burst's first event, %d", changes[0].Seqnums.String(), dimmSeq0)
		}
	}
	if events > 2*dimmBlocks {
		t.Errorf("the changes carry %d uevents, more than the %d sent", events, 2*dimmBlocks)
	}
	return changes
}

func reason(r Rebuild) string {
	if r.Reason == "" {
		return ""
	}
	return " (" + r.Reason + ")"
}

// coalescingWindows returns how many windows a loop that waits for quiet
// after the last event, and at most max after the first, makes of events
// at ts if its rebuilds took no time, and how many events the first holds.
func coalescingWindows(ts []time.Time, quiet, max time.Duration) (n, first int) {
	for i := 0; i < len(ts); {
		j := i + 1
		for j < len(ts) && ts[j].Sub(ts[j-1]) < quiet && ts[j].Sub(ts[i]) < max {
			j++
		}
		if n == 0 {
			first = j
		}
		n++
		i = j
	}
	return n, first
}

// gaps summarises the time between consecutive events at ts.
func gaps(ts []time.Time) string {
	d := make([]time.Duration, 0, len(ts))
	for i := 1; i < len(ts); i++ {
		d = append(d, ts[i].Sub(ts[i-1]))
	}
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	return fmt.Sprintf("median %v, p99 %v, max %v", d[len(d)/2].Round(time.Microsecond),
		d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
}

// checkMoved fails the test unless memory moved by delta on the machine and
// on node1 from before, and nothing else did.
func checkMoved(t *testing.T, h *sysfsHarness, before capacities, delta int64) {
	t.Helper()
	after, mem := h.capacity(), resources.Memory
	if got := after.List[mem] - before.List[mem]; got != delta {
		t.Errorf("capacity memory moved by %d bytes, want %d", got, delta)
	}
	if got := after.Nodes[1].Capacity[mem] - before.Nodes[1].Capacity[mem]; got != delta {
		t.Errorf("node1 memory moved by %d bytes, want %d", got, delta)
	}
	if after.Nodes[0].Capacity[mem] != before.Nodes[0].Capacity[mem] || after.List[resources.CPU] != before.List[resources.CPU] {
		t.Errorf("node0 memory %d cpu %d, want them unchanged (%d, %d)",
			after.Nodes[0].Capacity[mem], after.List[resources.CPU], before.Nodes[0].Capacity[mem], before.List[resources.CPU])
	}
}

// A 64 GiB DIMM plugged into node1: the tree gains block N, then N's add
// uevent goes out, for each of the 512 blocks; then block N is onlined
// (its state, node1's and the machine's MemTotal) and its online uevent
// goes out, for each block.
func TestSysfsDIMMHotAdd(t *testing.T) {
	h, rec := startDIMM(t, sysfsMachine())
	before := h.capacity()
	took := h.burst(
		phase{uevent.ActionAdd, addPace, func(id int) {
			h.tree.AddBlocks(id, 1, 1, topology.BlockOffline, "Movable Normal")
		}},
		phase{uevent.ActionOnline, onlinePace, func(id int) { h.setBlock(id, 1, true) }},
	)
	changes := checkBurst(t, h, rec, took, 0)
	checkMoved(t, h, before, dimmBlocks*int64(h.tree.BlockSize()))
	// At the kernel's pace the hot-add is one change with the whole DIMM:
	// a block added is offline (no capacity), so its add event is never a
	// leading edge, and the onlines that follow join its burst.
	if windows, _ := coalescingWindows(h.src.stamps[1:], h.mon.cfg.Quiet/2, h.mon.cfg.MaxWait*9/10); windows == 1 && len(changes) != 1 {
		t.Errorf("a DIMM sent as one burst made %d model changes, want 1", len(changes))
	}
	snap, _ := h.mon.Snapshot()
	if n := len(snap.MemoryBlocks); n != dimmFirst+dimmBlocks || snap.MemoryBlocks[n-1].State != topology.BlockOnline {
		t.Errorf("%d blocks, the last %+v; want 576, all online", n, snap.MemoryBlocks[n-1])
	}
}

// The same DIMM unplugged: block N offlined (its state and the MemTotals)
// and its offline uevent, for each block; then block N's directory gone and
// its remove uevent, for each block.
func TestSysfsDIMMUnplug(t *testing.T) {
	m := sysfsMachine()
	m.Blocks = append(m.Blocks, topologytest.Blocks(dimmFirst, dimmBlocks, topology.BlockOnline, "Movable", 1)...)
	m.Nodes[1].MemKB += dimmBlocks * blockKB
	m.MemKB += dimmBlocks * blockKB
	h, rec := startDIMM(t, m)
	before := h.capacity()
	took := h.burst(
		phase{uevent.ActionOffline, onlinePace, func(id int) { h.setBlock(id, 1, false) }},
		phase{uevent.ActionRemove, addPace, func(id int) { h.tree.RemoveBlocks(id, 1) }},
	)
	// Every offline event takes an online block away: a loss, never held.
	changes := checkBurst(t, h, rec, took, dimmBlocks-1)
	checkMoved(t, h, before, -dimmBlocks*int64(h.tree.BlockSize()))
	// The first block's loss is a change of its own, and each change
	// after it takes more away (or removes what is offline already),
	// until the whole DIMM is gone.
	mem, final := before.List[resources.Memory], h.capacity().List[resources.Memory]
	tightened := 0
	for i, c := range changes {
		got := c.Capacity[resources.Memory]
		if i == 0 && got >= mem {
			t.Errorf("the first change has memory %d, want less than %d: the first loss acted on", got, mem)
		}
		if got > mem {
			t.Errorf("change #%d grew memory to %d from %d during an unplug", c.ID, got, mem)
		}
		if i > 0 && got < mem && got > final {
			tightened++
		}
		mem = got
	}
	// The losses between the first and the last are acted on as they
	// come, not held for the end of the burst.
	if tightened == 0 {
		t.Errorf("no change took part of the DIMM away after the first loss and before the whole of it: the losses were held")
	}
	snap, _ := h.mon.Snapshot()
	if n := len(snap.MemoryBlocks); n != dimmFirst || snap.MemoryBlocks[n-1].ID != dimmFirst-1 {
		t.Errorf("%d blocks left, the last %+v; want 0-63", n, snap.MemoryBlocks[n-1])
	}
}
