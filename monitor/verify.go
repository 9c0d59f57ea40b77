package monitor

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/node-resized/node-resized/topology"
)

// verify compares the incremental model with a full rebuild of the same
// moment when a check is due, and returns the model to install and how it
// was read. Two checks are due:
//
//   - every VerifyEvery-th incremental rebuild: snap is the incremental
//     model; the full one is read now;
//   - every periodic resync: snap is the full model; the incremental one
//     is the update of old by the batch's devices (none, usually), read
//     now: the model the incremental path would hold.
//
// A disagreement can also be the machine moving between the two reads (a
// DIMM's blocks onlined one by one), or an event that has not reached the
// loop yet naming what the full rebuild already sees. So before it counts
// a mismatch, verify reads the incremental model again between two full
// rebuilds: only when those two agree, the incremental one still differs,
// and no input waits in the queue, is it a bug. Even then, when only memory
// blocks' states differ (or blocks came or went), the kernel may have
// changed a block whose uevent has not been sent yet: that is judged with
// the next batches, and counts only if no event names those blocks within
// a second. Either way the newest full model is installed.
func (m *Monitor) verify(old *topology.Snapshot, b *batch, snap *topology.Snapshot, how Rebuild, queued func() int) (*topology.Snapshot, Rebuild) {
	var inc, full *topology.Snapshot
	switch {
	case how.Kind == RebuildIncremental:
		m.incremental++
		if m.cfg.VerifyEvery <= 0 || m.incremental%m.cfg.VerifyEvery != 0 {
			return snap, how
		}
		var err error
		if full, err = m.machine.Snapshot(); err != nil {
			m.log.Warn("check the incremental model: full rebuild failed", "err", err)
			return snap, how
		}
		inc = snap
	case b.has(TriggerResync):
		var why string
		var err error
		inc, why, err = m.machine.Update(old, b.devs)
		if err != nil || why != "" {
			// The update read the whole machine too (or failed):
			// there is no incremental model to compare.
			return snap, how
		}
		full = snap
	default:
		return snap, how
	}
	how.Verified = true
	if reflect.DeepEqual(inc, full) {
		return snap, how
	}

	// Confirm: the incremental model read between two full rebuilds.
	// full was read after inc in the sampled check, before it at a
	// resync.
	before, again := full, inc
	if how.Kind == RebuildIncremental {
		s, why, err := m.machine.Update(old, b.devs)
		if err == nil && why == "" {
			again = s
		} else {
			again = nil
		}
	}
	after, err := m.machine.Snapshot()
	if err != nil {
		after = before
	}
	how.Kind = RebuildFull
	if again == nil || err != nil || !reflect.DeepEqual(before, after) || reflect.DeepEqual(again, after) || queued() > 0 {
		how.Reason = "the incremental model differed from a full rebuild while the machine changed"
		m.log.Debug("incremental model differs from a full rebuild while the machine changes; installing the full one",
			"differences", topology.Diff(inc, full).String(), "queued", queued(), "triggers", b.triggers)
		return after, how
	}
	how.Reason = "the incremental model differed from a full rebuild"
	how.Mismatch = mismatch(again, after)
	if ids := blocksAhead(again, after); ids != nil {
		// Only memory blocks differ: the kernel changes a block before
		// it sends the block's uevent, so the full rebuild may see a
		// block whose event is still on its way. Judge it when the next
		// batch comes: a bug only if no event named those blocks.
		m.suspect = &suspectMismatch{blocks: ids, until: m.clock.Now().Add(suspectGrace), mismatch: how.Mismatch,
			devs: devices(b.devs), triggers: b.triggers, seqnums: b.seqnums.String()}
		return after, how
	}
	m.mismatch(how.Mismatch, devices(b.devs), b.triggers, b.seqnums.String())
	return after, how
}

// suspectGrace is how long the uevents of memory blocks that a full
// rebuild saw changed, and an incremental one did not, may take to arrive
// before the disagreement counts as a bug.
const suspectGrace = time.Second

// suspectMismatch is a disagreement in memory blocks awaiting their
// uevents.
type suspectMismatch struct {
	blocks                  []int
	until                   time.Time
	mismatch, devs, seqnums string
	triggers                []Trigger
}

// judge settles a pending suspect with the next batch: the blocks that
// the batch's uevents name are cleared from it, and when none is left it
// was an event on its way; past the grace with blocks left, it is counted
// and logged as a mismatch.
func (m *Monitor) judge(b *batch) {
	sp := m.suspect
	if sp == nil {
		return
	}
	sp.blocks = slices.DeleteFunc(sp.blocks, func(id int) bool {
		return slices.Contains(b.devs, topology.Device{Kind: topology.DeviceMemory, ID: id})
	})
	switch {
	case len(sp.blocks) == 0:
		m.suspect = nil
	case m.clock.Now().After(sp.until):
		m.suspect = nil
		m.mismatch(sp.mismatch, sp.devs, sp.triggers, sp.seqnums)
	}
}

// mismatch counts and logs an incremental model a full rebuild
// contradicted.
func (m *Monitor) mismatch(what, devs string, triggers []Trigger, seqnums string) {
	m.cfg.Metrics.IncrementalMismatch.Inc()
	m.log.Error("incremental model differs from a full rebuild of the same moment; installing the full one",
		"mismatch", what, "devices", devs, "triggers", triggers, "seqnums", seqnums)
}

// blocksAhead returns the ids of the memory blocks in which inc and full
// differ, when the differences are all of the kind a uevent announces (a
// block's state, a block added or removed) and nothing else differs; nil
// otherwise.
func blocksAhead(inc, full *topology.Snapshot) []int {
	c := *inc
	c.MemoryBlocks = full.MemoryBlocks
	if !reflect.DeepEqual(&c, full) {
		return nil
	}
	byID := make(map[int]topology.MemoryBlock, len(inc.MemoryBlocks))
	for _, blk := range inc.MemoryBlocks {
		byID[blk.ID] = blk
	}
	var ids []int
	for _, blk := range full.MemoryBlocks {
		old, ok := byID[blk.ID]
		switch {
		case ok && old.State == blk.State && old != blk:
			return nil // a zone or node that no uevent of its own announces
		case !ok || old != blk:
			ids = append(ids, blk.ID)
		}
		delete(byID, blk.ID)
	}
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// mismatch says what the full model has that the incremental one does
// not: topology.Diff between them, and the fields that differ.
func mismatch(inc, full *topology.Snapshot) string {
	return topology.Diff(inc, full).String() + "; fields: " + strings.Join(fieldDiffs(*inc, *full, 8), "; ")
}

// fieldDiffs returns up to most paths at which a and b differ, each with
// both values ("MemoryBlocks[301].State: offline, full online"). Slices of
// structs are compared element by element, other slices whole.
func fieldDiffs(a, b any, most int) []string {
	var out []string
	var walk func(path string, x, y reflect.Value)
	walk = func(path string, x, y reflect.Value) {
		if len(out) >= most || !x.CanInterface() {
			return
		}
		switch x.Kind() {
		case reflect.Struct:
			for i := range x.NumField() {
				name := x.Type().Field(i).Name
				if path != "" {
					name = path + "." + name
				}
				walk(name, x.Field(i), y.Field(i))
			}
			return
		case reflect.Slice:
			if k := x.Type().Elem().Kind(); k == reflect.Struct || k == reflect.Slice {
				if x.Len() != y.Len() || x.IsNil() != y.IsNil() {
					out = append(out, fmt.Sprintf("%s: %s, full %s", path, count(x), count(y)))
				}
				for i := range min(x.Len(), y.Len()) {
					walk(fmt.Sprintf("%s[%d]", path, i), x.Index(i), y.Index(i))
				}
				return
			}
		}
		if !reflect.DeepEqual(x.Interface(), y.Interface()) {
			out = append(out, fmt.Sprintf("%s: %v, full %v", path, x.Interface(), y.Interface()))
		}
	}
	walk("", reflect.ValueOf(a), reflect.ValueOf(b))
	return out
}

func count(v reflect.Value) string {
	if v.IsNil() {
		return "nil"
	}
	return fmt.Sprintf("%d elements", v.Len())
}

// devices names the distinct devices of a batch, for a log line.
func devices(devs []topology.Device) string {
	seen := make(map[topology.Device]bool, len(devs))
	var names []string
	for _, d := range devs {
		if !seen[d] {
			seen[d] = true
			names = append(names, d.String())
		}
	}
	const most = 16
	if len(names) > most {
		return strings.Join(names[:most], ",") + fmt.Sprintf(",... (%d devices)", len(names))
	}
	return strings.Join(names, ",")
}
