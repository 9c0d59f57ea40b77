package release

import (
	"cmp"
	"slices"

	"github.com/node-resized/node-resized/topology"
)

// Return is what GiveBack decides: which released CPUs and blocks to bring
// back online, in order, and what became of the rest of the record.
type Return struct {
	// CPUs to bring online (write 1 to cpuN/online), in order.
	CPUs []int `json:"cpus,omitempty"`
	// Blocks to bring online, in order, each with online_movable: Choose
	// only releases blocks of zone Movable.
	Blocks []BlockStep `json:"blocks,omitempty"`
	// Gone were released and are no longer present: the hypervisor
	// unplugged them, as the release meant it to. Not a loss; drop them
	// from the record.
	Gone Set `json:"gone,omitempty"`
	// Online were released and are online again: someone else brought
	// them back. Drop them from the record.
	Online Set `json:"online,omitempty"`
	// Kept were released and stay offline: the targets want them off (or
	// a block is still going offline).
	Kept Set `json:"kept,omitempty"`
	// OnlineCPUs and MemTotal are the machine expected once the CPUs and
	// Blocks are online.
	OnlineCPUs int    `json:"onlineCPUs"`
	MemTotal   uint64 `json:"memTotalBytes"`
}

// GiveBack returns which of the released CPUs and blocks (in.Released) to
// bring back online, and what happened to the others. It never names a CPU
// or block that in.Released does not: what someone else took offline stays
// offline. With no target (0) it gives back everything still present;
// with one, only as much as keeps the machine at or below it (MemTotal at
// or below TargetMemory, by less than a block). CPUs come back lowest id
// first (SMT siblings have adjacent ids on the usual hypervisors, so whole
// cores come back together; an offline CPU's core is not known). Blocks
// come back in the reverse of Choose's order: memory of no device first,
// then blocks of DIMMs that are not wholly offline, then virtio-mem
// blocks, then wholly offline DIMMs, so what the hypervisor could unplug
// stays unpluggable longest.
func GiveBack(in Input) Return {
	var r Return
	if in.Machine == nil {
		return r
	}
	giveBackCPUs(in, &r)
	giveBackMemory(in, &r)
	return r
}

func giveBackCPUs(in Input, r *Return) {
	online := in.Machine.CPUs.Online
	r.OnlineCPUs = len(online)
	present := in.Machine.CPUs.Present
	if present == nil {
		present = in.Machine.CPUs.Devices
	}
	room := -1 // no limit
	if in.TargetCPUs > 0 {
		room = max(0, in.TargetCPUs-len(online))
	}
	var gone, back, kept, again []int
	for _, id := range in.Released.CPUs {
		switch {
		case online.Contains(id):
			again = append(again, id)
		case !present.Contains(id):
			gone = append(gone, id)
		case room < 0 || len(back) < room:
			back = append(back, id)
		default:
			kept = append(kept, id)
		}
	}
	r.CPUs = back
	r.Gone.CPUs = topology.NewCPUSet(gone...)
	r.Online.CPUs = topology.NewCPUSet(again...)
	r.Kept.CPUs = topology.NewCPUSet(kept...)
	r.OnlineCPUs += len(back)
}

func giveBackMemory(in Input, r *Return) {
	r.MemTotal = in.Machine.MemTotal
	m := newMemMachine(in)
	room := -1
	if in.TargetMemory > 0 && m.blockSize > 0 {
		room = 0
		if in.TargetMemory > in.Machine.MemTotal {
			room = int((in.TargetMemory - in.Machine.MemTotal) / m.blockSize)
		}
	}
	// Released blocks that could come back, ranked.
	wholeOff := map[string]bool{}
	for _, d := range m.dimmStates() {
		wholeOff[d.dev.ID] = d.offline == len(d.dev.Blocks) && d.offline > 0
	}
	rankOf := func(id int) int {
		switch m.kind[id] {
		case NoDevice:
			return 0
		case DIMM:
			if !wholeOff[m.device[id]] {
				return 1
			}
			return 3
		}
		return 2 // virtio-mem
	}
	var cands []int
	released := slices.Clone(in.Released.Blocks)
	slices.Sort(released)
	for _, id := range slices.Compact(released) {
		b, ok := m.blocks[id]
		switch {
		case !ok:
			r.Gone.Blocks = append(r.Gone.Blocks, id)
		case b.State == topology.BlockOnline:
			r.Online.Blocks = append(r.Online.Blocks, id)
		case b.State == topology.BlockOffline:
			cands = append(cands, id)
		default:
			r.Kept.Blocks = append(r.Kept.Blocks, id) // going offline: not ours to undo
		}
	}
	slices.SortStableFunc(cands, func(a, b int) int { return cmp.Compare(rankOf(a), rankOf(b)) })
	for _, id := range cands {
		if room >= 0 && len(r.Blocks) >= room {
			r.Kept.Blocks = append(r.Kept.Blocks, id)
			continue
		}
		r.Blocks = append(r.Blocks, m.step(id))
	}
	slices.Sort(r.Kept.Blocks)
	r.MemTotal += uint64(len(r.Blocks)) * m.blockSize
}
