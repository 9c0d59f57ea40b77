package monitor

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
	"github.com/node-resized/node-resized/uevent"
)

// The memory paths end to end: the real loop over a real topology.FS on a
// synthetic tree that the test changes as the kernel does, told by uevents
// as the kernel sends them.

const blockKB = 128 << 10 // the tree's 128 MiB memory blocks, in kB

// sysfsMachine is a two-node VM: 4 CPUs per node, 4 GiB of 128 MiB blocks
// per node (the last 8 of node1 in ZONE_MOVABLE, hot-unpluggable), a little
// less MemTotal than that as the kernel reserves some, and room for a
// 64 GiB DIMM from block 64.
func sysfsMachine() topologytest.Machine {
	const node0KB, node1KB = 32*blockKB - 100000, 32*blockKB - 20000
	return topologytest.Machine{
		CPUs:     append(topologytest.SMTCPUs(0, 4, 0, 0), topologytest.SMTCPUs(4, 4, 1, 0)...),
		Possible: topologytest.Ints(0, 15),
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: node0KB, Distances: []int{10, 20},
				Pools: []topologytest.Pool{{KB: 2048, Nr: 32}}},
			{ID: 1, CPUs: topologytest.Ints(4, 7), MemKB: node1KB, Distances: []int{20, 10},
				Pools: []topologytest.Pool{{KB: 2048, Nr: 32}}},
		},
		BlockSize: blockKB << 10,
		Blocks: slices.Concat(
			topologytest.Blocks(0, 1, topology.BlockOnline, "DMA32", 0),
			topologytest.Blocks(1, 31, topology.BlockOnline, "Normal", 0),
			topologytest.Blocks(32, 24, topology.BlockOnline, "Normal", 1),
			topologytest.Blocks(56, 8, topology.BlockOnline, "Movable", 1),
		),
		MemKB: node0KB + node1KB,
		Pools: []topologytest.Pool{{KB: 2048, Nr: 64}},
	}
}

// sysfsHarness is a harness whose machine is a topology.FS over a tree.
type sysfsHarness struct {
	*harness
	tree *topologytest.Tree
	seq  uint64 // the last SEQNUM sent
}

// startSysfs runs the loop over sysfsMachine's tree, on a fake clock unless
// cfg sets one.
func startSysfs(t *testing.T, cfg Config) *sysfsHarness {
	t.Helper()
	return startSysfsOn(t, sysfsMachine(), cfg)
}

func startSysfsOn(t *testing.T, m topologytest.Machine, cfg Config) *sysfsHarness {
	t.Helper()
	return startSysfsWith(t, m, cfg, nil)
}

// startSysfsWith runs the loop over m's tree as startSysfsOn does, over
// the machine wrap makes of the tree's FS when wrap is not nil.
func startSysfsWith(t *testing.T, m topologytest.Machine, cfg Config, wrap func(topology.FS) Machine) *sysfsHarness {
	t.Helper()
	tree := m.WriteTree(t, topologytest.Dir(t))
	fsys, err := topology.NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	var machine Machine = fsys
	if wrap != nil {
		machine = wrap(fsys)
	}
	h := newHarness(t, &cfg)
	h.run(machine, cfg)
	if c := h.next(); !hasTrigger(c, TriggerStartup) {
		t.Fatalf("first change %v, want the startup model", c.Triggers)
	}
	return &sysfsHarness{harness: h, tree: tree, seq: 7000}
}

// memoryEvent sends the uevent the kernel sends for memory block id, with
// the next SEQNUM, and returns that SEQNUM.
func (h *sysfsHarness) memoryEvent(action uevent.Action, id int) uint64 {
	h.seq++
	devpath := fmt.Sprintf("/devices/system/memory/memory%d", id)
	seq := strconv.FormatUint(h.seq, 10)
	h.src.send(uevent.Event{
		Action:    action,
		DevPath:   devpath,
		Subsystem: "memory",
		Seqnum:    h.seq,
		Env: map[string]string{
			"ACTION": action.String(), "DEVPATH": devpath, "SUBSYSTEM": "memory", "SEQNUM": seq,
		},
	})
	return h.seq
}

// setBlock brings memory block id of node online or takes it offline as
// the kernel does: the block's state and valid_zones, then MemTotal of
// the node and of the machine, up or down by the block size.
func (h *sysfsHarness) setBlock(id, node int, online bool) {
	h.t.Helper()
	state, delta := topology.BlockOffline, -int64(blockKB)
	if online {
		state, delta = topology.BlockOnline, blockKB
	}
	h.tree.SetBlockState(id, state)
	h.tree.SetNodeMemTotalKB(node, uint64(int64(h.tree.NodeMemTotalKB(node))+delta))
	h.tree.SetMemTotalKB(uint64(int64(h.tree.MemTotalKB()) + delta))
}

// capacity returns the monitor's current model's capacity: the machine's
// and, by NUMA node, each node's.
func (h *sysfsHarness) capacity() capacities {
	snap, c := h.mon.Snapshot()
	return capacities{c, snap.NodeCapacities()}
}

type capacities struct {
	resources.List
	Nodes []topology.NodeCapacity
}

func kinds(c Change) []string {
	var ks []string
	for _, ch := range c.Changes {
		ks = append(ks, ch.Kind)
	}
	return ks
}

// checkChange fails the test unless c was caused by uevents alone, has
// exactly the kinds want, in Diff's order, and moved memory by delta bytes
// on the machine and on node1.
func checkChange(t *testing.T, h *sysfsHarness, c Change, before capacities, delta int64, want ...string) {
	t.Helper()
	if got := kinds(c); !slices.Equal(got, want) {
		t.Errorf("change kinds %v, want %v (%s)", got, want, c.Changes)
	}
	if !slices.Equal(c.Triggers, []Trigger{TriggerUevent}) || !c.Time.Equal(h.clock.Now()) || c.LatencySeconds < 0 {
		t.Errorf("triggers %v at %v latency %v: want uevent alone, made now (%v), with a latency", c.Triggers, c.Time, c.LatencySeconds, h.clock.Now())
	}
	after := h.capacity()
	if got := after.List; !got.Equal(c.Capacity) {
		t.Errorf("the change's capacity %s is not the model's %s", c.Capacity, got)
	}
	mem := resources.Memory
	if got, want := c.Capacity[mem]-before.List[mem], delta; got != want {
		t.Errorf("capacity memory moved by %d bytes, want %d", got, want)
	}
	if got, want := after.Nodes[1].Capacity[mem]-before.Nodes[1].Capacity[mem], delta; got != want {
		t.Errorf("node1 memory moved by %d bytes, want %d", got, want)
	}
	if after.Nodes[0].Capacity[mem] != before.Nodes[0].Capacity[mem] || c.Capacity[resources.CPU] != before.List[resources.CPU] {
		t.Errorf("node0 memory %d cpu %d, want them unchanged (%d, %d)",
			after.Nodes[0].Capacity[mem], c.Capacity[resources.CPU], before.Nodes[0].Capacity[mem], before.List[resources.CPU])
	}
}

func TestSysfsMemoryBlockOffline(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1})
	before := h.capacity()
	h.setBlock(63, 1, false)
	seq := h.memoryEvent(uevent.ActionOffline, 63)
	h.flush()
	c := h.next()
	checkChange(t, h, c, before, -int64(h.tree.BlockSize()),
		topology.ChangeNodeMemTotal, topology.ChangeMemoryBlockOffline, topology.ChangeMemTotal)
	if c.Events != 1 || c.Seqnums.String() != strconv.FormatUint(seq, 10) {
		t.Errorf("events %d seqnums %q, want 1 and %d", c.Events, c.Seqnums.String(), seq)
	}
	if d := c.Changes[1].Detail; d != "memory block 63 offline" {
		t.Errorf("detail %q, want \"memory block 63 offline\"", d)
	}
	snap, _ := h.mon.Snapshot()
	if b := snap.MemoryBlocks[63]; b.State != topology.BlockOffline || b.Zone != "Movable" || b.Node != 1 {
		t.Errorf("block 63 %+v, want offline, default zone Movable, node 1", b)
	}
	if got := testutil.ToFloat64(h.metrics.ModelChanges.WithLabelValues(topology.ChangeMemoryBlockOffline)); got != 1 {
		t.Errorf("memory_block_offline changes counted %v, want 1", got)
	}
	h.none()
}

func TestSysfsMemoryBlockOnlineAgain(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1})
	start := h.capacity()
	h.setBlock(63, 1, false)
	h.memoryEvent(uevent.ActionOffline, 63)
	h.flush()
	h.next()
	offline := h.capacity()

	h.setBlock(63, 1, true)
	seq := h.memoryEvent(uevent.ActionOnline, 63)
	h.flush()
	c := h.next()
	checkChange(t, h, c, offline, int64(h.tree.BlockSize()),
		topology.ChangeNodeMemTotal, topology.ChangeMemoryBlockOnline, topology.ChangeMemTotal)
	if got := h.capacity(); !reflect.DeepEqual(got, start) {
		t.Errorf("capacity after the block came back\n got %+v\nwant %+v", got, start)
	}
	if c.Events != 1 || c.Seqnums.String() != strconv.FormatUint(seq, 10) {
		t.Errorf("events %d seqnums %q, want 1 and %d", c.Events, c.Seqnums.String(), seq)
	}
	if d := c.Changes[1].Detail; d != "memory block 63 online (Movable)" {
		t.Errorf("detail %q, want \"memory block 63 online (Movable)\"", d)
	}
	h.none()
}

// A balloon inflates: MemTotal drops with no uevent; the MemTotal watch
// must see it.
func TestSysfsBalloonWithoutUevent(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: 10 * time.Millisecond, Resync: -1})
	before := h.capacity()
	const takenKB = 300000 // page granular, not a block multiple
	// The node first: the watch reads /proc/meminfo only, so the rebuild
	// it starts sees both.
	h.tree.SetNodeMemTotalKB(1, h.tree.NodeMemTotalKB(1)-takenKB)
	h.tree.SetMemTotalKB(h.tree.MemTotalKB() - takenKB)
	h.clock.Step(10 * time.Millisecond) // the watch polls, and sees a loss: read at once
	c := h.next()
	if !slices.Equal(c.Triggers, []Trigger{TriggerMemTotal}) || c.Events != 0 || c.Seqnums.Count != 0 {
		t.Errorf("triggers %v, %d events, seqnums %q: want memtotal alone and no uevents", c.Triggers, c.Events, c.Seqnums.String())
	}
	if got, want := kinds(c), []string{topology.ChangeNodeMemTotal, topology.ChangeMemTotal}; !slices.Equal(got, want) {
		t.Errorf("change kinds %v, want %v", got, want)
	}
	if got, want := c.Capacity[resources.Memory], before.List[resources.Memory]-int64(takenKB)*1024; got != want {
		t.Errorf("capacity memory %d, want %d", got, want)
	}
	exactly(t, "latency from the poll", c.Latency(), 0)
	h.none()
}

// Uevents that claim memory changes the tree does not show change nothing.
func TestSysfsForgedMemoryEvents(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1})
	before := h.capacity()
	h.memoryEvent(uevent.ActionOffline, 63)
	h.memoryEvent(uevent.ActionRemove, 63)
	h.memoryEvent(uevent.ActionAdd, 4096)
	h.flush()
	waitFor(t, func() bool { return h.mon.Stats().Rebuilds >= 2 })
	h.none()
	snap, _ := h.mon.Snapshot()
	if capac := h.capacity(); !reflect.DeepEqual(capac, before) || snap.MemoryBlocks[63].State != topology.BlockOnline || len(snap.MemoryBlocks) != 64 {
		t.Errorf("the model changed: capacity %+v, block 63 %+v, %d blocks", capac, snap.MemoryBlocks[63], len(snap.MemoryBlocks))
	}
	if st := h.mon.Stats(); st.Changes != 1 {
		t.Errorf("%d changes, want only the startup one", st.Changes)
	}
	if got := testutil.ToFloat64(h.metrics.Rebuilds.WithLabelValues("uevent", "changed")); got != 0 {
		t.Errorf("changed uevent rebuilds = %v, want 0", got)
	}
}

// Blocks offlined earlier and removed later: the removal changes the
// blocks, not the capacity, and is a change of its own.
func TestSysfsOfflineBlocksRemovedLater(t *testing.T) {
	h := startSysfs(t, Config{MemPoll: -1, Resync: -1})
	before := h.capacity()
	// Each block offline is a loss, a change at once.
	for id := 60; id < 64; id++ {
		h.setBlock(id, 1, false)
		h.memoryEvent(uevent.ActionOffline, id)
		exactly(t, "the wait of a loss", h.flush(), 0)
		checkChange(t, h, h.next(), before, -int64(h.tree.BlockSize()),
			topology.ChangeNodeMemTotal, topology.ChangeMemoryBlockOffline, topology.ChangeMemTotal)
		before = h.capacity()
	}
	afterOffline := h.capacity()

	// The removal of blocks offline already takes nothing away: the
	// events are a burst, rebuilt a quiet window after the last.
	h.tree.RemoveBlocks(60, 4)
	for id := 60; id < 64; id++ {
		h.memoryEvent(uevent.ActionRemove, id)
	}
	exactly(t, "the wait of removals", h.flush(), 20*time.Millisecond)
	c := h.next()
	checkChange(t, h, c, afterOffline, 0, topology.ChangeMemoryBlockRemoved)
	if d := c.Changes[0].Detail; d != "memory blocks 60-63 removed" {
		t.Errorf("detail %q, want \"memory blocks 60-63 removed\"", d)
	}
	h.none()
}
