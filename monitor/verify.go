package monitor

import (
	"fmt"
	"reflect"
	"strings"

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
// and no input waits in the queue, is it a bug. Either way the newest full
// model is installed.
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
	m.cfg.Metrics.IncrementalMismatch.Inc()
	m.log.Error("incremental model differs from a full rebuild of the same moment; installing the full one",
		"mismatch", how.Mismatch, "devices", devices(b.devs), "triggers", b.triggers, "seqnums", b.seqnums.String())
	return after, how
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
