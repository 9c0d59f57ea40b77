package monitor

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// A kernel that accounts memory to a node lazily: nodeN/meminfo's
// MemTotal grows for minutes after boot while /proc/meminfo's stays and
// no uevent comes. That is a change of the node's memory, modelled and
// logged as one, never a disagreement of the incremental model.
func TestSysfsLazyNodeMemoryIsAChange(t *testing.T) {
	h, _, logs := startStale(t, Config{MemPoll: 10 * time.Millisecond, Resync: 10 * time.Second, VerifyEvery: 1})
	before := h.capacity()
	const grownKB = 5 << 20 // 5 GiB accounted to node0, in kB
	h.tree.SetNodeMemTotalKB(0, h.tree.NodeMemTotalKB(0)+grownKB)
	h.clock.Step(10 * time.Millisecond) // the MemTotal watch: /proc/meminfo did not move
	h.alive()

	// The periodic resync sees it: a change of node0's memory.
	h.clock.Step(10 * time.Second)
	c := h.nextIdle()
	if !slices.Equal(c.Triggers, []Trigger{TriggerResync}) {
		t.Errorf("triggers %v, want the resync", c.Triggers)
	}
	if got, want := kinds(c), []string{topology.ChangeNodeMemTotal}; !slices.Equal(got, want) {
		t.Errorf("change kinds %v, want %v", got, want)
	}
	if !c.Rebuild.Verified || c.Rebuild.Mismatch != "" || c.Rebuild.Reason != "periodic resync" {
		t.Errorf("rebuild %+v, want the resync's full model, checked, and no mismatch", c.Rebuild)
	}
	// The Node's capacity is /proc/meminfo's: unchanged. The node's
	// share grew.
	if got, want := c.Capacity[resources.Memory], before.List[resources.Memory]; got != want {
		t.Errorf("capacity memory %d, want %d as before", got, want)
	}
	after := h.capacity()
	if got, want := after.Nodes[0].Capacity[resources.Memory], before.Nodes[0].Capacity[resources.Memory]+grownKB<<10; got != want {
		t.Errorf("node0 memory %d, want %d", got, want)
	}
	isTheTree(t, h)

	// It grows again, and a CPU goes offline: the CPUs' part of the batch
	// is published first, as read first; the rest of the incremental
	// read, checked against the full rebuild and agreeing, is a second
	// change with node0's memory.
	h.tree.SetNodeMemTotalKB(0, h.tree.NodeMemTotalKB(0)+grownKB)
	h.tree.SetCPUOnline(5, false)
	h.cpuEvent(uevent.ActionOffline, 5)
	h.flush()
	c = h.nextIdle()
	if c.Rebuild != (Rebuild{Kind: RebuildIncremental}) || c.Capacity[resources.CPU] != 7000 {
		t.Errorf("rebuild %+v cpu %d, want the CPUs read first: incremental, 7 CPUs", c.Rebuild, c.Capacity[resources.CPU])
	}
	if got, want := kinds(c), []string{topology.ChangeCPUOffline, topology.ChangeNodeCPUs}; !slices.Equal(got, want) {
		t.Errorf("change kinds %v, want %v", got, want)
	}
	c2 := h.nextIdle()
	if c2.Rebuild != (Rebuild{Kind: RebuildIncremental, Verified: true}) || c2.Events != c.Events || c2.Seqnums.String() != c.Seqnums.String() {
		t.Errorf("second change: rebuild %+v, %d events %s; want incremental, verified, agreeing, the same batch (%d events %s)",
			c2.Rebuild, c2.Events, c2.Seqnums.String(), c.Events, c.Seqnums.String())
	}
	if got, want := kinds(c2), []string{topology.ChangeNodeMemTotal}; !slices.Equal(got, want) {
		t.Errorf("second change kinds %v, want %v", got, want)
	}
	isTheTree(t, h)

	if got := testutil.ToFloat64(h.metrics.IncrementalMismatch); got != 0 {
		t.Errorf("mismatches counted %v for memory a node was given lazily, want 0", got)
	}
	if errs := logs.errors(t); len(errs) != 0 {
		t.Errorf("error records %v, want none", errs)
	}
	var changed int
	for _, r := range logs.records(t, "INFO") {
		if r["msg"] == "machine changed" {
			changed++
		}
	}
	if changed != 3 {
		t.Errorf("%d \"machine changed\" records at INFO, want 3", changed)
	}
	h.none()
}
