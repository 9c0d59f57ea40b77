package release

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// memMachine is what the memory choice knows of each block.
type memMachine struct {
	blockSize  uint64
	blocks     map[int]topology.MemoryBlock
	kind       map[int]DeviceKind // block → its device's kind
	device     map[int]string     // block → its device's name
	dimms      []topology.MemoryDevice
	virtio     []topology.VirtioMemDevice
	notRemov   map[int]bool
	skip       map[int]bool
	virtioErr  string
	virtioNote string
}

func newMemMachine(in Input) memMachine {
	m := memMachine{
		blockSize: in.Machine.MemoryBlockSize,
		blocks:    map[int]topology.MemoryBlock{},
		kind:      map[int]DeviceKind{},
		device:    map[int]string{},
		notRemov:  map[int]bool{},
		skip:      map[int]bool{},
	}
	for _, b := range in.Machine.MemoryBlocks {
		m.blocks[b.ID] = b
	}
	if h := in.Hotplug; h != nil {
		m.dimms, m.virtio, m.virtioErr, m.virtioNote = h.MemoryDevices, h.VirtioMem, h.VirtioMemError, h.VirtioMemNote
		for _, d := range h.MemoryDevices {
			for _, b := range d.Blocks {
				m.kind[b], m.device[b] = DIMM, d.ID
			}
		}
		for _, v := range h.VirtioMem {
			for _, b := range v.Blocks {
				m.kind[b], m.device[b] = VirtioMem, v.Name
			}
		}
		for _, b := range h.NotRemovable {
			m.notRemov[b] = true
		}
	}
	for _, b := range in.Skip.Blocks {
		m.skip[b] = true
	}
	return m
}

// canGo reports a block Choose may take offline: online, in zone Movable,
// not marked not removable, not skipped.
func (m memMachine) canGo(id int) bool {
	b, ok := m.blocks[id]
	return ok && b.State == topology.BlockOnline && b.Zone == "Movable" && !m.notRemov[id] && !m.skip[id]
}

func (m memMachine) step(id int) BlockStep {
	return BlockStep{ID: id, Kind: m.kind[id], Device: m.device[id]}
}

// dimmState is a DIMM's blocks that are present: how many are offline,
// which are online and could go, and whether every online one could.
type dimmState struct {
	dev      topology.MemoryDevice
	offline  int
	canGo    []int // ascending
	allCanGo bool  // every present block is offline or can go
}

func (m memMachine) dimmStates() []dimmState {
	var out []dimmState
	for _, d := range m.dimms {
		s := dimmState{dev: d, allCanGo: true}
		for _, id := range d.Blocks {
			b, ok := m.blocks[id]
			switch {
			case !ok:
			case b.State == topology.BlockOffline:
				s.offline++
			case m.canGo(id):
				s.canGo = append(s.canGo, id)
			default:
				s.allCanGo = false
			}
		}
		out = append(out, s)
	}
	return out
}

// chooseMemory fills the plan's block steps, MemTotal and a memory
// shortfall.
func chooseMemory(in Input, p *Plan) {
	p.MemTotal = in.Machine.MemTotal
	m := newMemMachine(in)
	if m.virtioErr != "" {
		p.Notes = append(p.Notes, "virtio-mem memory could not be identified ("+m.virtioErr+"): its blocks count as memory of no device")
	}
	if m.virtioNote != "" {
		p.Notes = append(p.Notes, "virtio-mem: "+m.virtioNote)
	}
	if in.TargetMemory == 0 || in.Machine.MemTotal <= in.TargetMemory {
		return
	}
	need := in.Machine.MemTotal - in.TargetMemory
	if m.blockSize == 0 {
		p.Shortfalls = append(p.Shortfalls, Shortfall{Resource: resources.Memory, Missing: int64(need),
			Reason: "the kernel has no memory blocks (no memory hotplug support)"})
		return
	}
	n := int((need + m.blockSize - 1) / m.blockSize)
	taken := map[int]bool{}
	add := func(s BlockStep) {
		if len(p.Blocks) < n && !taken[s.ID] {
			taken[s.ID] = true
			p.Blocks = append(p.Blocks, s)
		}
	}

	// 1. Whole DIMMs.
	dimms := m.dimmStates()
	slices.SortFunc(dimms, func(a, b dimmState) int {
		return cmp.Or(
			cmp.Compare(rank(a.offline > 0), rank(b.offline > 0)),
			cmp.Compare(len(b.canGo), len(a.canGo)),
			cmp.Compare(b.dev.Start, a.dev.Start))
	})
	whole := map[string]bool{}
	for _, d := range dimms {
		if !d.allCanGo || len(d.canGo) == 0 || len(p.Blocks)+len(d.canGo) > n {
			continue
		}
		whole[d.dev.ID] = true
		for _, id := range descending(d.canGo) {
			s := m.step(id)
			s.WholeDevice = true
			add(s)
		}
	}
	// 2. virtio-mem blocks, highest first.
	var virtio []int
	for _, v := range m.virtio {
		for _, id := range v.Blocks {
			if m.canGo(id) && m.kind[id] == VirtioMem {
				virtio = append(virtio, id)
			}
		}
	}
	for _, id := range descending(virtio) {
		add(m.step(id))
	}
	// 3. Blocks of DIMMs that cannot go whole: the closest to whole first.
	var partial []dimmState
	for _, d := range dimms {
		if !whole[d.dev.ID] && len(d.canGo) > 0 {
			partial = append(partial, d)
		}
	}
	slices.SortFunc(partial, func(a, b dimmState) int {
		return cmp.Or(
			cmp.Compare(len(a.dev.Blocks)-a.offline, len(b.dev.Blocks)-b.offline),
			cmp.Compare(b.dev.Start, a.dev.Start))
	})
	for _, d := range partial {
		for _, id := range descending(d.canGo) {
			add(m.step(id))
		}
	}
	// 4. Other Movable blocks, highest first.
	var other []int
	for id := range m.blocks {
		if m.kind[id] == NoDevice && m.canGo(id) {
			other = append(other, id)
		}
	}
	for _, id := range descending(other) {
		add(m.step(id))
	}

	p.MemTotal = in.Machine.MemTotal - min(in.Machine.MemTotal, uint64(len(p.Blocks))*m.blockSize)
	if len(p.Blocks) < n {
		missing := need - (in.Machine.MemTotal - p.MemTotal)
		p.Shortfalls = append(p.Shortfalls, Shortfall{Resource: resources.Memory, Missing: int64(missing), Reason: m.reason(taken)})
	}
}

// reason says why the online blocks that stay could not go.
func (m memMachine) reason(taken map[int]bool) string {
	type group struct {
		n   int
		ids []int
	}
	groups := map[string]*group{}
	var order []string
	for _, id := range slices.Sorted(maps.Keys(m.blocks)) {
		b := m.blocks[id]
		if taken[id] || b.State == topology.BlockOffline {
			continue
		}
		var why string
		switch {
		case b.State == topology.BlockGoingOffline:
			why = "are going offline now"
		case m.skip[id]:
			why = "failed to go offline before"
		case b.Zone == "Movable" && m.notRemov[id]:
			why = "are marked not removable"
		case b.Zone == "":
			why = "have no valid_zones (the kernel cannot offline memory)"
		case b.Zone == "none":
			why = "span two zones and cannot go offline"
		case b.Zone != "Movable":
			why = "are in zone " + b.Zone + " (kernel memory; boot memory is there unless movablecore= is set)"
		default:
			continue
		}
		g := groups[why]
		if g == nil {
			g = &group{}
			groups[why] = g
			order = append(order, why)
		}
		g.n++
		g.ids = append(g.ids, id)
	}
	if len(order) == 0 {
		return "no other block is online"
	}
	clauses := make([]string, len(order))
	for i, why := range order {
		g := groups[why]
		size := resources.Format(resources.Memory, int64(uint64(g.n)*m.blockSize))
		if g.n <= 4 {
			names := make([]string, len(g.ids))
			for k, id := range g.ids {
				names[k] = fmt.Sprintf("memory%d", id)
			}
			clauses[i] = fmt.Sprintf("%s (%s, %s)", why, strings.Join(names, ", "), size)
		} else {
			clauses[i] = fmt.Sprintf("%s (%d blocks, %s)", why, g.n, size)
		}
	}
	return "the other online blocks " + reasons(clauses)
}

// rank orders true before false.
func rank(b bool) int {
	if b {
		return 0
	}
	return 1
}
