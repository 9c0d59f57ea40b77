package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// Which rebuild each input gets: uevents alone are read incrementally,
// everything else wholly; every VerifyEvery-th incremental rebuild and
// every periodic resync is checked against a full rebuild, and the full
// model wins a disagreement.

// injectDev sends a uevent for the device at devpath, as the kernel does.
func (s *fakeSource) injectDev(devpath, subsystem string, action uevent.Action, seq uint64) {
	s.send(uevent.Event{Action: action, DevPath: devpath, Subsystem: subsystem, Seqnum: seq})
}

func TestUeventBatchesAreIncremental(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: -1})
	snaps, _ := h.machine.calls()

	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 1)
	h.flush()
	c := h.next()
	if c.Rebuild != (Rebuild{Kind: RebuildIncremental}) {
		t.Errorf("a cpu batch was rebuilt %+v, want incremental", c.Rebuild)
	}
	if want := []topology.Device{{Kind: topology.DeviceCPU, ID: 1}}; !slices.Equal(h.machine.devs, want) {
		t.Errorf("Update read %v, want %v", h.machine.devs, want)
	}

	h.machine.set(topology.CPUSet{0}, 3<<30)
	h.src.injectDev("/devices/system/memory/memory5", "memory", uevent.ActionOffline, 2)
	h.src.injectDev("/devices/system/memory/memory6", "memory", uevent.ActionOffline, 3)
	h.flush()
	c = h.next()
	if c.Rebuild != (Rebuild{Kind: RebuildIncremental}) {
		t.Errorf("a memory batch was rebuilt %+v, want incremental", c.Rebuild)
	}
	if want := []topology.Device{{Kind: topology.DeviceMemory, ID: 5}, {Kind: topology.DeviceMemory, ID: 6}}; !slices.Equal(h.machine.devs, want) {
		t.Errorf("Update read %v, want %v", h.machine.devs, want)
	}
	if got, updates := h.machine.calls(); got != snaps || updates != 2 {
		t.Errorf("%d full and %d incremental reads for two uevent batches, want 0 and 2", got-snaps, updates)
	}
}

func TestEveryNthIncrementalIsVerified(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: 3})
	for i := range 6 {
		snaps, _ := h.machine.calls()
		h.machine.set(topology.CPUSet{0}, uint64(i+1)<<30)
		h.src.injectDev("/devices/system/memory/memory5", "memory", uevent.ActionOffline, uint64(i+1))
		h.flush()
		c := h.next()
		checked := (i+1)%3 == 0
		if want := (Rebuild{Kind: RebuildIncremental, Verified: checked}); c.Rebuild != want {
			t.Errorf("incremental rebuild %d: %+v, want %+v", i+1, c.Rebuild, want)
		}
		if s, _ := h.machine.calls(); (s-snaps == 1) != checked || s-snaps > 1 {
			t.Errorf("incremental rebuild %d: %d full rebuilds, want %d", i+1, s-snaps, map[bool]int{true: 1}[checked])
		}
	}
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 0 {
		t.Errorf("%v mismatches of an exact incremental model, want 0", got)
	}
}

// A disagreement that the machine moving between the reads explains is no
// mismatch: the full model is installed, nothing is counted.
func TestMachineMovingDuringTheCheckIsNoMismatch(t *testing.T) {
	h := start(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: 1})
	h.machine.set(topology.CPUSet{0}, 4<<30)
	h.machine.mu.Lock()
	h.machine.onSnapshot = func(f *fakeMachine) {
		f.memTotal = 3 << 30 // a balloon inflates just before the check
		f.onSnapshot = nil
	}
	h.machine.mu.Unlock()
	h.src.injectDev("/devices/system/cpu/cpu1", "cpu", uevent.ActionOffline, 1)
	h.flush()
	c := h.next()
	if c.Rebuild.Kind != RebuildFull || !c.Rebuild.Verified || c.Rebuild.Mismatch != "" || c.Capacity[resources.Memory] != 3<<30 {
		t.Errorf("rebuild %+v memory %d: want the full model of the moved machine, no mismatch", c.Rebuild, c.Capacity[resources.Memory])
	}
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 0 {
		t.Errorf("%v mismatches counted for a machine that moved, want 0", got)
	}
}

// staleUpdates is a machine whose incremental update is wrong: while
// stale is positive, each Update call returns the previous model, as an
// update that missed what the events named would, and counts stale down.
// corrupt, when set, makes each stale answer the previous model with one
// memory block in another zone instead.
type staleUpdates struct {
	topology.FS
	mu      sync.Mutex
	stale   int
	corrupt bool
	// during, when set, runs in the first stale Update call.
	during func()
}

// UpdateCPUs reads the CPUs first as the FS does, except while Update is
// stale: the wrong model is then Update's alone, as the check expects.
func (m *staleUpdates) UpdateCPUs(prev *topology.Snapshot, devs []topology.Device) (*topology.Snapshot, string, error) {
	m.mu.Lock()
	stale := m.stale > 0
	m.mu.Unlock()
	if stale {
		return nil, "the test's stale updates", nil
	}
	return m.FS.UpdateCPUs(prev, devs)
}

func (m *staleUpdates) Update(prev *topology.Snapshot, devs []topology.Device) (*topology.Snapshot, string, error) {
	m.mu.Lock()
	stale, corrupt, during := m.stale > 0, m.corrupt, m.during
	if stale {
		m.stale--
		m.during = nil
	}
	m.mu.Unlock()
	if !stale {
		return m.FS.Update(prev, devs)
	}
	if during != nil {
		during()
	}
	if !corrupt {
		return prev, "", nil
	}
	wrong := *prev
	wrong.MemoryBlocks = slices.Clone(prev.MemoryBlocks)
	wrong.MemoryBlocks[5].Zone = "Movable"
	return &wrong, "", nil
}

func (m *staleUpdates) set(stale int, corrupt bool, during func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale, m.corrupt, m.during = stale, corrupt, during
}

// syncBuffer is a log destination safe for the loop and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// errors returns the error records logged so far.
func (b *syncBuffer) errors(t *testing.T) []map[string]any {
	t.Helper()
	return b.records(t, "ERROR")
}

// records returns the records logged so far at level.
func (b *syncBuffer) records(t *testing.T, level string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.b.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == level {
			out = append(out, rec)
		}
	}
	return out
}

// startStale runs the loop over sysfsMachine's tree through a staleUpdates
// machine, logging into the returned buffer.
func startStale(t *testing.T, cfg Config) (*sysfsHarness, *staleUpdates, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var m *staleUpdates
	h := startSysfsWith(t, sysfsMachine(), cfg, func(fsys topology.FS) Machine {
		m = &staleUpdates{FS: fsys}
		return m
	})
	return h, m, logs
}

// cpuEvent sends the uevent the kernel sends for CPU id, with the next
// SEQNUM.
func (h *sysfsHarness) cpuEvent(action uevent.Action, id int) {
	h.seq++
	h.src.injectDev(fmt.Sprintf("/devices/system/cpu/cpu%d", id), "cpu", action, h.seq)
}

// isTheTree fails the test unless the monitor's model is exactly a fresh
// full rebuild of the tree.
func isTheTree(t *testing.T, h *sysfsHarness) {
	t.Helper()
	fsys, err := topology.NewFS(h.tree.Sys, h.tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := h.mon.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("the model is not the tree's: %s; %s", topology.Diff(got, want), strings.Join(fieldDiffs(*got, *want, 8), "; "))
	}
}

func TestSysfsCPUBatchIsIncremental(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: -1})
	before := h.capacity()
	// Two CPUs go offline, each a loss rebuilt at once.
	for i, id := range []int{5, 6} {
		h.tree.SetCPUOnline(id, false)
		h.cpuEvent(uevent.ActionOffline, id)
		c := h.next()
		if c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Events != 1 {
			t.Errorf("rebuild %+v of %d events, want incremental, 1", c.Rebuild, c.Events)
		}
		if got, want := kinds(c), []string{topology.ChangeCPUOffline, topology.ChangeNodeCPUs}; !slices.Equal(got, want) {
			t.Errorf("change kinds %v, want %v (%s)", got, want, c.Changes)
		}
		if got, want := c.Capacity[resources.CPU], before.List[resources.CPU]-1000*int64(i+1); got != want {
			t.Errorf("cpu %d, want %d", got, want)
		}
		isTheTree(t, h)
	}

	h.tree.SetCPUOnline(5, true)
	h.cpuEvent(uevent.ActionOnline, 5)
	h.flush()
	if c := h.next(); c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Capacity[resources.CPU] != before.List[resources.CPU]-1000 {
		t.Errorf("rebuild %+v cpu %d, want incremental and %d", c.Rebuild, c.Capacity[resources.CPU], before.List[resources.CPU]-1000)
	}
	isTheTree(t, h)
	h.none()
}

func TestSysfsMemoryBlockBatchIsIncremental(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: -1})
	// Offline blocks come back online: a gain that waits for the rest of
	// its DIMM, so the four events are one batch after the quiet window.
	for id := 60; id < 64; id++ {
		h.setBlock(id, 1, false)
	}
	if r, err := h.mon.Resync(context.Background()); err != nil || !r.Changed {
		t.Fatalf("Resync = %+v, %v; want the blocks offline", r, err)
	}
	h.next()
	h.quiet()
	before := h.capacity()
	for id := 60; id < 64; id++ {
		h.setBlock(id, 1, true)
		h.memoryEvent(uevent.ActionOnline, id)
	}
	exactly(t, "the quiet window", h.flush(), 20*time.Millisecond)
	c := h.next()
	if c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Events != 4 {
		t.Errorf("change: rebuild %+v, %d events; want incremental, 4", c.Rebuild, c.Events)
	}
	checkChange(t, h, c, before, 4*int64(h.tree.BlockSize()),
		topology.ChangeNodeMemTotal, topology.ChangeMemoryBlockOnline, topology.ChangeMemTotal)
	isTheTree(t, h)

	// Two go offline again, each a loss rebuilt at once, then are removed
	// together.
	for id := 62; id < 64; id++ {
		h.setBlock(id, 1, false)
		h.memoryEvent(uevent.ActionOffline, id)
		if c := h.next(); c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Events != 1 {
			t.Errorf("offline block %d: rebuild %+v, %d events; want incremental, 1", id, c.Rebuild, c.Events)
		}
	}
	h.tree.RemoveBlocks(62, 2)
	h.memoryEvent(uevent.ActionRemove, 62)
	h.memoryEvent(uevent.ActionRemove, 63)
	h.flush()
	if c := h.next(); c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || !slices.Equal(kinds(c), []string{topology.ChangeMemoryBlockRemoved}) || c.Events != 2 {
		t.Errorf("rebuild %+v changes %s of %d events, want incremental, blocks removed, 2", c.Rebuild, c.Changes, c.Events)
	}
	isTheTree(t, h)
	h.none()
}

// A node event is more than Update re-reads: it reads the whole machine
// itself, and says why.
func TestSysfsNodeEventFallsBackToFull(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: -1})
	h.tree.SetCPUOnline(5, false)
	h.seq++
	h.src.injectDev("/devices/system/node/node1", "node", uevent.ActionChange, h.seq)
	h.flush()
	c := h.next()
	if want := (Rebuild{Kind: RebuildFull, Reason: "node1 event"}); c.Rebuild != want {
		t.Errorf("rebuild %+v, want %+v", c.Rebuild, want)
	}
	isTheTree(t, h)
}

// fullReads counts the whole-machine reads of an FS, its own and those
// Update falls back to.
type fullReads struct {
	topology.FS
	n atomic.Int32
}

func (f *fullReads) Snapshot() (*topology.Snapshot, error) {
	f.n.Add(1)
	return f.FS.Snapshot()
}

func (f *fullReads) Update(prev *topology.Snapshot, devs []topology.Device) (*topology.Snapshot, string, error) {
	s, full, err := f.FS.Update(prev, devs)
	if full != "" {
		f.n.Add(1)
	}
	return s, full, err
}

// A SEQNUM gap re-reads the totals only (the incremental rebuild of no
// device): with nothing moved it is no change and no full read; with a
// CPU and a memory block gone behind it, the moved totals make it read the
// whole machine, and both losses are in the change.
func TestSysfsSeqnumGapConfirmsWithTheTotals(t *testing.T) {
	var fulls fullReads
	h := startSysfsWith(t, sysfsMachine(), Config{MemPoll: -1, Resync: -1, VerifyEvery: -1}, func(fsys topology.FS) Machine {
		fulls.FS = fsys
		return &fulls
	})
	rebuilds, full0 := h.mon.Stats().Rebuilds, fulls.n.Load()
	h.src.ch <- result{err: &uevent.LostError{Reason: uevent.DropSeqnumGap, Missed: 3}}
	for deadline := time.Now().Add(10 * time.Second); h.mon.Stats().Rebuilds == rebuilds; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no rebuild for the gap")
		}
	}
	if got := testutil.ToFloat64(h.metrics.Rebuilds.WithLabelValues(string(TriggerGap), "unchanged")); got != 1 {
		t.Errorf("unchanged gap rebuilds = %v, want 1", got)
	}
	if st := h.mon.Stats(); st.SeqnumGaps != 1 || st.LostEvents != 0 {
		t.Errorf("stats: %d gaps, %d lost events; want 1 and 0", st.SeqnumGaps, st.LostEvents)
	}
	if n := fulls.n.Load() - full0; n != 0 {
		t.Errorf("%d full reads for a gap that hid nothing, want none", n)
	}

	// Changes whose uevents the gap hid: nothing names them.
	h.tree.SetCPUOnline(5, false)
	h.setBlock(63, 1, false)
	h.src.ch <- result{err: &uevent.LostError{Reason: uevent.DropSeqnumGap, Missed: 2}}
	c := h.next() // at once
	if !hasTrigger(c, TriggerGap) || c.Rebuild.Kind != RebuildFull || !strings.Contains(c.Rebuild.Reason, "which no event named") {
		t.Errorf("change %v rebuild %+v, want a full read for a CPU list no event named", c.Triggers, c.Rebuild)
	}
	if !hasKind(c.Changes, topology.ChangeCPUOffline) || !hasKind(c.Changes, topology.ChangeMemoryBlockOffline) {
		t.Errorf("changes %s, want cpu5 and block 63 offline", c.Changes)
	}
	isTheTree(t, h)

	// A memory block alone: MemTotal moves by more than the re-read
	// nodes did.
	h.setBlock(62, 1, false)
	h.src.ch <- result{err: &uevent.LostError{Reason: uevent.DropSeqnumGap, Missed: 1}}
	c = h.next()
	if c.Rebuild.Kind != RebuildFull || !hasKind(c.Changes, topology.ChangeMemoryBlockOffline) {
		t.Errorf("rebuild %+v changes %s, want a full read that sees block 62 offline", c.Rebuild, c.Changes)
	}
	isTheTree(t, h)
}

// An incremental model that a full rebuild contradicts is counted, logged
// with what differed, and replaced by the full one.
func TestSysfsIncrementalMismatchIsCorrected(t *testing.T) {
	h, m, logs := startStale(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: 1})
	m.set(2, false, nil) // the update and the check's second one
	h.tree.SetCPUOnline(5, false)
	h.cpuEvent(uevent.ActionOffline, 5)
	h.flush()
	c := h.next()
	if c.Rebuild.Kind != RebuildFull || !c.Rebuild.Verified || !strings.HasPrefix(c.Rebuild.Mismatch, "cpu5 offline") {
		t.Errorf("rebuild %+v, want full, verified, with the mismatch \"cpu5 offline...\"", c.Rebuild)
	}
	if c.Capacity[resources.CPU] != 7000 || !hasKind(c.Changes, topology.ChangeCPUOffline) {
		t.Errorf("cpu %d changes %s, want the full model's 7 CPUs", c.Capacity[resources.CPU], c.Changes)
	}
	isTheTree(t, h)
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 1 {
		t.Errorf("mismatches counted %v, want 1", got)
	}
	errs := logs.errors(t)
	for _, e := range errs {
		t.Logf("logged: %s: %v", e["msg"], e["mismatch"])
	}
	if len(errs) != 1 || !strings.HasPrefix(fmt.Sprint(errs[0]["mismatch"]), "cpu5 offline") ||
		!strings.Contains(fmt.Sprint(errs[0]["mismatch"]), "CPUs.Online: 0-7, full 0-4,6-7") || errs[0]["devices"] != "cpu5" {
		t.Errorf("error log %v, want one record of the mismatch: cpu5 offline, CPUs.Online, devices cpu5", errs)
	}
	// The next batches are incremental again, and right: the CPUs are
	// published as read first, and the check of the rest agrees (no
	// second change).
	h.tree.SetCPUOnline(5, true)
	h.cpuEvent(uevent.ActionOnline, 5)
	h.flush()
	if c := h.nextIdle(); c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Capacity[resources.CPU] != 8000 {
		t.Errorf("rebuild %+v cpu %d after the mismatch, want the CPUs read first, 8 CPUs", c.Rebuild, c.Capacity[resources.CPU])
	}
	h.none()
	isTheTree(t, h)
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 1 {
		t.Errorf("mismatches counted %v, want still 1", got)
	}
}

// The periodic resync checks the model the incremental path would hold
// now, even where no capacity differs (a block's zone).
func TestSysfsResyncChecksTheIncrementalModel(t *testing.T) {
	h, m, logs := startStale(t, Config{MemPoll: -1, Resync: 10 * time.Second, VerifyEvery: -1})
	h.clock.Step(10 * time.Second) // a resync that agrees
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds == 2 })
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 0 {
		t.Fatalf("mismatches counted %v on an exact update, want 0", got)
	}
	m.set(1, true, nil)
	h.clock.Step(10 * time.Second)
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds == 3 })
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 1 {
		t.Errorf("mismatches counted %v, want 1", got)
	}
	errs := logs.errors(t)
	for _, e := range errs {
		t.Logf("logged: %s: %v", e["msg"], e["mismatch"])
	}
	if len(errs) != 1 || !strings.Contains(fmt.Sprint(errs[0]["mismatch"]), "MemoryBlocks[5].Zone: Movable, full Normal") {
		t.Errorf("error log %v, want the mismatch of block 5's zone", errs)
	}
	isTheTree(t, h)
	h.none()
}

// A disagreement while uevents wait in the queue may be theirs to explain
// (the check's full rebuild already sees what they name): not counted.
func TestQueuedEventsAreNoMismatch(t *testing.T) {
	h, m, _ := startStale(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: 1})
	m.set(2, false, func() {
		// cpu6 goes offline during the rebuild of cpu5's batch; its
		// uevent reaches the queue before the check ends.
		h.tree.SetCPUOnline(6, false)
		h.cpuEvent(uevent.ActionOffline, 6)
		for len(h.src.ch) > 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // from the reader into the queue
	})
	h.tree.SetCPUOnline(5, false)
	h.cpuEvent(uevent.ActionOffline, 5) // a loss, rebuilt at once
	c := h.next()
	if c.Rebuild.Kind != RebuildFull || c.Rebuild.Mismatch != "" || c.Capacity[resources.CPU] != 6000 {
		t.Errorf("rebuild %+v cpu %d: want the full model (6 CPUs) and no mismatch", c.Rebuild, c.Capacity[resources.CPU])
	}
	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 0 {
		t.Errorf("mismatches counted %v with an event queued, want 0", got)
	}
	h.flush() // cpu6's batch finds the model as it is
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds == 3 })
	isTheTree(t, h)
}

// Change.Rebuild is one new JSON field; a change without it (from an
// older daemon) still decodes.
func TestChangeJSONRebuild(t *testing.T) {
	b, err := json.Marshal(Change{ID: 1, Rebuild: Rebuild{Kind: RebuildFull, Reason: "node1 event"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"rebuild":{"kind":"full","reason":"node1 event"}`) {
		t.Errorf("JSON %s", b)
	}
	b, _ = json.Marshal(Change{ID: 1})
	if strings.Contains(string(b), "rebuild") {
		t.Errorf("a change without a rebuild: %s", b)
	}
	var old Change
	if err := json.Unmarshal([]byte(`{"id":3,"triggers":["uevent"],"events":1,"seqnums":"5","latencySeconds":0.02,"changes":[],"capacity":{}}`), &old); err != nil || old.ID != 3 || old.Rebuild != (Rebuild{}) {
		t.Errorf("an older change decoded as %+v, %v", old, err)
	}
}

// The kernel changes a memory block before it sends the block's uevent, so
// a check may find a block the incremental model has not been told of yet.
// That is judged with the next batches: the block's event arriving clears
// it; no event for it within a second makes it a mismatch.
func TestSysfsBlockAheadOfItsEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event bool
		want  float64
	}{
		{"its event comes", true, 0},
		{"no event comes", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, logs := startStale(t, Config{MemPoll: -1, Resync: -1, VerifyEvery: 1})
			// Two blocks go offline; only the first one's event is out.
			h.setBlock(62, 1, false)
			h.setBlock(63, 1, false)
			h.memoryEvent(uevent.ActionOffline, 62)
			h.flush()
			c := h.next()
			if !c.Rebuild.Verified || c.Rebuild.Kind != RebuildFull || !hasKind(c.Changes, topology.ChangeMemoryBlockOffline) {
				t.Fatalf("rebuild %+v changes %s, want the full model after a disagreement", c.Rebuild, c.Changes)
			}
			h.quiet()
			if tc.event {
				h.memoryEvent(uevent.ActionOffline, 63)
			} else {
				h.clock.Step(2 * suspectGrace)
				h.cpuEvent(uevent.ActionChange, 1)
			}
			h.flush()
			waitFor(t, func() bool { return h.mon.Stats().Rebuilds >= 3 })
			if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != tc.want {
				t.Errorf("mismatches counted %v, want %v (errors logged: %v)", got, tc.want, logs.errors(t))
			}
			isTheTree(t, h)
		})
	}
}
