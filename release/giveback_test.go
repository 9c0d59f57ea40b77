package release

import (
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

// releasedMachine is sharedMemory after a release and a partial unplug:
// PNP0C80:00 wholly offline (released), PNP0C80:01's 24-25 offline
// (released), virtio3's 43-44 offline (released), 31 offline (released),
// 30 offline by someone else; block 50 was released and the hypervisor
// took it. CPUs 8 SMT2, 5-7 released: 7 unplugged, 6 online again.
func releasedMachine() (*machine, Set) {
	m := smt2(8, 4, 5, 7).
		blocks(0, 16, topology.BlockOnline, "Normal").
		blocks(16, 4, topology.BlockOffline, "Movable Normal").
		blocks(20, 4, topology.BlockOnline, "Movable").
		blocks(24, 2, topology.BlockOffline, "Movable Normal").
		blocks(30, 2, topology.BlockOffline, "Movable Normal").
		blocks(40, 3, topology.BlockOnline, "Movable").
		blocks(43, 2, topology.BlockOffline, "Movable Normal").
		dimm("PNP0C80:00", 16, 4).
		dimm("PNP0C80:01", 20, 6).
		virtio("virtio3", 40, 41, 42, 43, 44)
	// cpu7 is gone: no longer present.
	m.snap.CPUs.Present = topology.NewCPUSet(0, 1, 2, 3, 4, 5, 6)
	released := Set{CPUs: topology.NewCPUSet(5, 6, 7), Blocks: ids(16, 17, 18, 19, 24, 25, 31, 43, 44, 50)}
	return m, released
}

func TestGiveBack(t *testing.T) {
	m, released := releasedMachine()
	in := m.input()
	in.Released = released
	total := m.snap.MemTotal

	r := GiveBack(in)
	wantBlocks := []BlockStep{
		{ID: 31},
		{ID: 24, Kind: DIMM, Device: "PNP0C80:01"}, {ID: 25, Kind: DIMM, Device: "PNP0C80:01"},
		{ID: 43, Kind: VirtioMem, Device: "virtio3"}, {ID: 44, Kind: VirtioMem, Device: "virtio3"},
		{ID: 16, Kind: DIMM, Device: "PNP0C80:00"}, {ID: 17, Kind: DIMM, Device: "PNP0C80:00"},
		{ID: 18, Kind: DIMM, Device: "PNP0C80:00"}, {ID: 19, Kind: DIMM, Device: "PNP0C80:00"},
	}
	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s\n got %+v\nwant %+v", name, got, want)
		}
	}
	check("no target: CPUs", r.CPUs, ids(5))
	check("no target: blocks", r.Blocks, wantBlocks)
	check("no target: gone", r.Gone, Set{CPUs: topology.NewCPUSet(7), Blocks: ids(50)})
	check("no target: online again", r.Online, Set{CPUs: topology.NewCPUSet(6)})
	check("no target: kept", r.Kept, Set{})
	check("no target: MemTotal", r.MemTotal, total+9*bs)
	check("no target: online CPUs", r.OnlineCPUs, len(m.snap.CPUs.Online)+1)

	// Block 30 is offline but not released: never given back.
	for _, b := range r.Blocks {
		if b.ID == 30 {
			t.Errorf("gave back block 30, which someone else took offline")
		}
	}

	// A target that allows three blocks (and a little more) and no CPU.
	in.TargetMemory = total + 3*bs + bs/2
	in.TargetCPUs = len(m.snap.CPUs.Online)
	r = GiveBack(in)
	check("target: CPUs", r.CPUs, []int(nil))
	check("target: blocks", r.Blocks, wantBlocks[:3])
	check("target: kept", r.Kept, Set{CPUs: topology.NewCPUSet(5), Blocks: ids(16, 17, 18, 19, 43, 44)})
	check("target: MemTotal", r.MemTotal, total+3*bs)

	// A target below the machine gives nothing back.
	in.TargetMemory, in.TargetCPUs = total-bs, 1
	r = GiveBack(in)
	if len(r.CPUs) != 0 || len(r.Blocks) != 0 {
		t.Errorf("target below the machine: gave back %v, %+v", r.CPUs, r.Blocks)
	}

	// Nothing released, nothing given back.
	in = m.input()
	r = GiveBack(in)
	if len(r.CPUs) != 0 || len(r.Blocks) != 0 || !r.Gone.IsEmpty() {
		t.Errorf("nothing released: %+v", r)
	}
}

func TestUnpluggable(t *testing.T) {
	m, released := releasedMachine()
	in := m.input()
	in.Released = released
	u := Unpluggable(in)
	want := Unplug{
		MemoryDevices: []DeviceState{
			{ID: "PNP0C80:00", Start: 16 * bs, End: 20 * bs, Size: 4 * bs, BlocksOffline: 4, Blocks: 4, SafeToUnplug: true},
			{ID: "PNP0C80:01", Start: 20 * bs, End: 26 * bs, Size: 6 * bs, BlocksOffline: 2, Blocks: 6},
		},
		VirtioMem: []VirtioMemState{{Name: "virtio3", Blocks: ids(43, 44), ReleasedBytes: 2 * bs}},
		CPUs:      topology.NewCPUSet(5),
	}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Unpluggable\n got %+v\nwant %+v", u, want)
	}
	if got, w := u.String(), "safe to unplug: PNP0C80:00 (512Mi at 0x80000000), virtio3 256Mi, CPUs 5"; got != w {
		t.Errorf("String = %q, want %q", got, w)
	}
	if got := (Unplug{}).String(); got != "nothing safe to unplug" {
		t.Errorf("empty String = %q", got)
	}
}
