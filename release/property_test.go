package release

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

// randomInput builds a machine and a request from seed: SMT1, 2 or 4 cores,
// some CPUs offline, some without an online file; blocks in Normal,
// Movable, none and going offline, some offline; DIMMs and a virtio-mem
// device over the blocks; reserved, exclusive, skipped and released sets.
func randomInput(seed uint64) Input {
	rng := rand.New(rand.NewPCG(seed, seed>>32|1))
	threads := []int{1, 2, 4}[rng.IntN(3)]
	n := threads * (1 + rng.IntN(8))
	var offline []int
	for id := 1; id < n; id++ {
		if rng.IntN(6) == 0 {
			offline = append(offline, id)
		}
	}
	m := cpuMachineOf(n, threads, offline...)
	for i := range m.hp.CPUs {
		if rng.IntN(10) == 0 {
			m.hp.CPUs[i].OnlineFile = false
		}
	}
	nb := 4 + rng.IntN(60)
	for id := range nb {
		state, zone := topology.BlockOnline, "Movable"
		switch r := rng.IntN(10); {
		case r < 3:
			zone = "Normal"
		case r == 3:
			state, zone = topology.BlockOffline, "Movable Normal"
		case r == 4:
			zone = "none"
		case r == 5 && rng.IntN(3) == 0:
			state = topology.BlockGoingOffline
		}
		m.blocks(id, 1, state, zone)
	}
	m.less(uint64(rng.IntN(64)) * miB)
	for id, dev := 0, 0; id < nb; {
		size := 1 + rng.IntN(6)
		switch rng.IntN(3) {
		case 0:
			m.dimm(fmt.Sprintf("PNP0C80:%02X", dev), id, min(size, nb-id))
			dev++
		case 1:
			m.virtio(fmt.Sprintf("virtio%d", dev), ints(id, min(id+size, nb)-1)...)
			dev++
		}
		id += size
	}
	for _, b := range m.snap.MemoryBlocks {
		if rng.IntN(12) == 0 {
			m.hp.NotRemovable = append(m.hp.NotRemovable, b.ID)
		}
	}
	in := m.input()
	online := m.snap.CPUs.Online
	in.TargetCPUs = rng.IntN(n + 2)
	in.TargetMemory = uint64(rng.Int64N(int64(m.snap.MemTotal + 2*bs)))
	var reserved, skip, released []int
	in.Exclusive = map[int]string{}
	for _, id := range online {
		switch rng.IntN(8) {
		case 0:
			reserved = append(reserved, id)
		case 1:
			skip = append(skip, id)
		case 2, 3:
			in.Exclusive[id] = fmt.Sprintf("pod-%d", rng.IntN(3))
		}
	}
	for id := range n {
		if rng.IntN(4) == 0 {
			released = append(released, id)
		}
	}
	in.ReservedCPUs, in.Skip.CPUs, in.Released.CPUs = topology.NewCPUSet(reserved...), topology.NewCPUSet(skip...), topology.NewCPUSet(released...)
	for _, b := range m.snap.MemoryBlocks {
		if rng.IntN(10) == 0 {
			in.Skip.Blocks = append(in.Skip.Blocks, b.ID)
		}
		if rng.IntN(4) == 0 {
			in.Released.Blocks = append(in.Released.Blocks, b.ID)
		}
	}
	return in
}

func ints(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// checkPlan fails where p breaks a rule of Choose.
func checkPlan(t *testing.T, in Input, p Plan) {
	t.Helper()
	facts := map[int]topology.HotplugCPU{}
	for _, c := range in.Hotplug.CPUs {
		facts[c.ID] = c
	}
	online := in.Machine.CPUs.Online
	seen := map[int]bool{}
	evicted := map[string]bool{}
	for _, uid := range p.EvictFirst {
		evicted[uid] = true
	}
	used := map[string]bool{}
	for _, s := range p.CPUs {
		switch {
		case seen[s.ID]:
			t.Errorf("cpu%d twice", s.ID)
		case !online.Contains(s.ID):
			t.Errorf("cpu%d is not online", s.ID)
		case in.ReservedCPUs.Contains(s.ID):
			t.Errorf("cpu%d is reserved", s.ID)
		case !facts[s.ID].OnlineFile:
			t.Errorf("cpu%d has no online file", s.ID)
		case in.Skip.CPUs.Contains(s.ID):
			t.Errorf("cpu%d was skipped", s.ID)
		case in.Exclusive[s.ID] != s.AfterEvicting:
			t.Errorf("cpu%d is held by %q, step says after evicting %q", s.ID, in.Exclusive[s.ID], s.AfterEvicting)
		case s.AfterEvicting != "" && !evicted[s.AfterEvicting]:
			t.Errorf("cpu%d waits for %q, which is not in EvictFirst", s.ID, s.AfterEvicting)
		}
		seen[s.ID] = true
		used[s.AfterEvicting] = true
	}
	for uid := range evicted {
		if !used[uid] {
			t.Errorf("pod %q evicted for no CPU", uid)
		}
	}
	// Never more CPUs than needed; exactly as many unless short.
	need := 0
	if in.TargetCPUs > 0 {
		need = max(0, len(online)-in.TargetCPUs)
	}
	short := func(res string) bool {
		return slices.ContainsFunc(p.Shortfalls, func(s Shortfall) bool { return s.Resource == res })
	}
	if len(p.CPUs) > need || (len(p.CPUs) < need) != short("cpu") {
		t.Errorf("%d CPUs offlined for a need of %d (shortfall %v)", len(p.CPUs), need, short("cpu"))
	}
	// An exclusive CPU only when every free CPU that could go went.
	if slices.ContainsFunc(p.CPUs, func(s CPUStep) bool { return s.AfterEvicting != "" }) {
		for _, id := range online {
			if facts[id].OnlineFile && !in.ReservedCPUs.Contains(id) && !in.Skip.CPUs.Contains(id) &&
				in.Exclusive[id] == "" && !seen[id] {
				t.Errorf("evicts for CPUs while free cpu%d stays", id)
			}
		}
	}

	// Memory.
	blocks := map[int]topology.MemoryBlock{}
	for _, b := range in.Machine.MemoryBlocks {
		blocks[b.ID] = b
	}
	seen = map[int]bool{}
	for _, s := range p.Blocks {
		b := blocks[s.ID]
		switch {
		case seen[s.ID]:
			t.Errorf("memory%d twice", s.ID)
		case b.State != topology.BlockOnline:
			t.Errorf("memory%d is %s", s.ID, b.State)
		case b.Zone != "Movable":
			t.Errorf("memory%d is in zone %q", s.ID, b.Zone)
		case slices.Contains(in.Skip.Blocks, s.ID):
			t.Errorf("memory%d was skipped", s.ID)
		case slices.Contains(in.Hotplug.NotRemovable, s.ID):
			t.Errorf("memory%d is not removable", s.ID)
		}
		seen[s.ID] = true
	}
	total, target := in.Machine.MemTotal, in.TargetMemory
	if target == 0 || total <= target {
		if len(p.Blocks) > 0 {
			t.Errorf("%d blocks offlined with no need", len(p.Blocks))
		}
		return
	}
	if p.MemTotal != total-min(total, uint64(len(p.Blocks))*bs) {
		t.Errorf("MemTotal %d, want %d - %d blocks", p.MemTotal, total, len(p.Blocks))
	}
	if p.MemTotal > 0 && p.MemTotal+bs <= target {
		t.Errorf("MemTotal %d ends a block or more below the target %d", p.MemTotal, target)
	}
	if (p.MemTotal > target) != short("memory") {
		t.Errorf("MemTotal %d, target %d, shortfall %v", p.MemTotal, target, short("memory"))
	}
}

// checkReturn fails where r gives back what was not released, or breaks a
// target.
func checkReturn(t *testing.T, in Input, r Return) {
	t.Helper()
	for _, id := range r.CPUs {
		if !in.Released.CPUs.Contains(id) || in.Machine.CPUs.Online.Contains(id) {
			t.Errorf("gives back cpu%d: released %v, online %v", id, in.Released.CPUs, in.Machine.CPUs.Online)
		}
	}
	for _, s := range r.Blocks {
		if !slices.Contains(in.Released.Blocks, s.ID) {
			t.Errorf("gives back memory%d, which was not released", s.ID)
		}
	}
	if in.TargetCPUs > 0 && len(r.CPUs) > 0 && r.OnlineCPUs > in.TargetCPUs {
		t.Errorf("gives back CPUs up to %d online, above the target %d", r.OnlineCPUs, in.TargetCPUs)
	}
	if in.TargetMemory > 0 && len(r.Blocks) > 0 && r.MemTotal > in.TargetMemory {
		t.Errorf("gives back blocks up to MemTotal %d, above the target %d", r.MemTotal, in.TargetMemory)
	}
}

func TestProperties(t *testing.T) {
	for seed := range uint64(2000) {
		in := randomInput(seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			checkPlan(t, in, Choose(in))
			checkReturn(t, in, GiveBack(in))
		})
		if t.Failed() {
			break
		}
	}
}

func FuzzChoose(f *testing.F) {
	for _, seed := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		in := randomInput(seed)
		checkPlan(t, in, Choose(in))
		checkReturn(t, in, GiveBack(in))
	})
}
