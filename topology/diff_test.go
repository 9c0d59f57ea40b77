package topology

import (
	"reflect"
	"strings"
	"testing"
)

// baseSnapshot is a 2-node machine with 8 CPUs and 64 blocks of 128 MiB.
func baseSnapshot() *Snapshot {
	s := &Snapshot{
		CPUs: CPUs{
			Online:   CPUSet{0, 1, 2, 3, 4, 5, 6, 7},
			Present:  CPUSet{0, 1, 2, 3, 4, 5, 6, 7},
			Possible: CPUSet{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
			Offline:  CPUSet{8, 9, 10, 11},
			Devices:  CPUSet{0, 1, 2, 3, 4, 5, 6, 7},
		},
		MemoryBlockSize: 128 * miB,
		MemTotal:        24 * giB,
		Hugepages:       []Hugepages{{2 * miB, 512}, {1 * giB, 2}},
	}
	for n := range 2 {
		node := Node{ID: n, MemTotal: 12 * giB, Hugepages: []Hugepages{{2 * miB, 256}, {1 * giB, 1}}, Distances: []int{10, 20}}
		for c := n * 4; c < n*4+4; c++ {
			node.CPUs = append(node.CPUs, CPU{ID: c, CoreID: (c % 4) / 2, SocketID: n})
		}
		s.Nodes = append(s.Nodes, node)
	}
	for id := range 64 {
		zone := "Normal"
		if id >= 48 {
			zone = "Movable"
		}
		s.MemoryBlocks = append(s.MemoryBlocks, MemoryBlock{ID: id, State: BlockOnline, Zone: zone, Node: id / 32})
	}
	return s
}

// clone deep-copies a snapshot so a case can edit it.
func clone(s *Snapshot) *Snapshot {
	c := *s
	c.CPUs.Online = append(CPUSet(nil), s.CPUs.Online...)
	c.CPUs.Present = append(CPUSet(nil), s.CPUs.Present...)
	c.Nodes = append([]Node(nil), s.Nodes...)
	for i := range c.Nodes {
		c.Nodes[i].CPUs = append([]CPU(nil), s.Nodes[i].CPUs...)
		c.Nodes[i].Hugepages = append([]Hugepages(nil), s.Nodes[i].Hugepages...)
	}
	c.MemoryBlocks = append([]MemoryBlock(nil), s.MemoryBlocks...)
	c.Hugepages = append([]Hugepages(nil), s.Hugepages...)
	return &c
}

func TestDiff(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(s *Snapshot) // applied to a copy of baseSnapshot
		want Changes
	}{
		{
			name: "nothing changed",
			edit: func(*Snapshot) {},
			want: nil,
		},
		{
			name: "cpu offline",
			edit: func(s *Snapshot) {
				s.CPUs.Online = CPUSet{0, 2, 3, 4, 5, 6, 7}
				s.Nodes[0].CPUs = append(s.Nodes[0].CPUs[:1], s.Nodes[0].CPUs[2:]...)
			},
			want: Changes{
				{ChangeCPUOffline, "cpu1 offline"},
				{ChangeNodeCPUs, "node0 cpus 0-3 -> 0,2-3"},
			},
		},
		{
			name: "cpus hot-added and onlined",
			edit: func(s *Snapshot) {
				s.CPUs.Present = append(s.CPUs.Present, 8, 9)
				s.CPUs.Online = append(s.CPUs.Online, 8, 9)
				s.Nodes[1].CPUs = append(s.Nodes[1].CPUs, CPU{ID: 8, CoreID: 2, SocketID: 1}, CPU{ID: 9, CoreID: 2, SocketID: 1})
			},
			want: Changes{
				{ChangeCPUAdded, "cpus 8-9 added"},
				{ChangeCPUOnline, "cpus 8-9 online"},
				{ChangeNodeCPUs, "node1 cpus 4-7 -> 4-9"},
			},
		},
		{
			name: "cpu removed",
			edit: func(s *Snapshot) {
				s.CPUs.Present = s.CPUs.Present[:7]
				s.CPUs.Online = s.CPUs.Online[:7]
				s.Nodes[1].CPUs = s.Nodes[1].CPUs[:3]
			},
			want: Changes{
				{ChangeCPUOffline, "cpu7 offline"},
				{ChangeCPURemoved, "cpu7 removed"},
				{ChangeNodeCPUs, "node1 cpus 4-7 -> 4-6"},
			},
		},
		{
			name: "blocks offline",
			edit: func(s *Snapshot) {
				for id := 56; id < 64; id++ {
					s.MemoryBlocks[id].State = BlockOffline
				}
				s.MemoryBlocks[55].State = BlockGoingOffline
			},
			want: Changes{
				{ChangeMemoryBlockOffline, "memory block 55 going-offline"},
				{ChangeMemoryBlockOffline, "memory blocks 56-63 offline"},
			},
		},
		{
			name: "blocks removed",
			edit: func(s *Snapshot) {
				s.MemoryBlocks = append(s.MemoryBlocks[:40], s.MemoryBlocks[41:60]...)
			},
			want: Changes{
				{ChangeMemoryBlockRemoved, "memory blocks 40,60-63 removed"},
			},
		},
		{
			name: "blocks hot-added offline",
			edit: func(s *Snapshot) {
				for id := 64; id < 68; id++ {
					s.MemoryBlocks = append(s.MemoryBlocks, MemoryBlock{ID: id, State: BlockOffline, Zone: "Movable", Node: 1})
				}
			},
			want: Changes{
				{ChangeMemoryBlockAdded, "memory blocks 64-67 added (offline)"},
			},
		},
		{
			name: "zone change only",
			edit: func(s *Snapshot) {
				s.MemoryBlocks[3].Zone = "none"
			},
			want: Changes{
				{ChangeMemoryBlockZone, "memory block 3 zone Normal -> none"},
			},
		},
		{
			name: "MemTotal drop only",
			edit: func(s *Snapshot) { s.MemTotal -= 128 * miB },
			want: Changes{
				{ChangeMemTotal, "MemTotal 24.0GiB -> 23.9GiB (-128.0MiB)"},
			},
		},
		{
			name: "node memory, swap, pools and ephemeral storage",
			edit: func(s *Snapshot) {
				s.Nodes[1].MemTotal -= 1 * giB
				s.Nodes[0].Hugepages[0].Count = 128
				s.SwapTotal = 2 * giB
				s.Hugepages = s.Hugepages[:1]
				s.Hugepages[0].Count = 384
				s.EphemeralStorage = 100 * giB
			},
			want: Changes{
				{ChangeNodeMemTotal, "node1 MemTotal 12.0GiB -> 11.0GiB (-1.0GiB)"},
				{ChangeNodeHugepages, "node0 hugepages-2Mi 256 -> 128 pages"},
				{ChangeSwap, "SwapTotal 0B -> 2.0GiB (+2.0GiB)"},
				{ChangeHugepages, "hugepages-2Mi 512 -> 384 pages"},
				{ChangeHugepages, "hugepages-1Gi pool removed (2 pages)"},
				{ChangeEphemeralStorage, "ephemeral-storage 0B -> 100.0GiB (+100.0GiB)"},
			},
		},
		{
			name: "node added with CPUs and memory",
			edit: func(s *Snapshot) {
				s.CPUs.Present = append(s.CPUs.Present, 8)
				s.Nodes = append(s.Nodes, Node{ID: 2, MemTotal: 4 * giB})
				for id := 64; id < 96; id++ {
					s.MemoryBlocks = append(s.MemoryBlocks, MemoryBlock{ID: id, State: BlockOnline, Zone: "Movable", Node: 2})
				}
				s.MemTotal += 4 * giB
			},
			want: Changes{
				{ChangeCPUAdded, "cpu8 added"},
				{ChangeNodeAdded, "node2 added"},
				{ChangeMemoryBlockAdded, "memory blocks 64-95 added (online)"},
				{ChangeMemTotal, "MemTotal 24.0GiB -> 28.0GiB (+4.0GiB)"},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := baseSnapshot()
			new := clone(old)
			c.edit(new)
			got := Diff(old, new)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Diff()\n got %q\nwant %q", got, c.want)
			}
			if len(got) == 0 && got.String() != "no change" {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

// Onlining blocks: grouped by the zone they went to, in id order.
func TestDiffBlocksOnline(t *testing.T) {
	old := baseSnapshot()
	for id := 40; id < 64; id++ {
		old.MemoryBlocks[id].State = BlockOffline
	}
	new := baseSnapshot()
	new.MemoryBlocks[40].Zone = "Normal"
	got := Diff(old, new)
	want := Changes{
		{ChangeMemoryBlockOnline, "memory blocks 40-47 online (Normal)"},
		{ChangeMemoryBlockOnline, "memory blocks 48-63 online (Movable)"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff()\n got %q\nwant %q", got, want)
	}
	if s := got.String(); s != "memory blocks 40-47 online (Normal); memory blocks 48-63 online (Movable)" {
		t.Errorf("String() = %q", s)
	}
}

func TestDiffNil(t *testing.T) {
	if d := Diff(nil, baseSnapshot()); d != nil {
		t.Errorf("Diff(nil, s) = %v, want empty", d)
	}
	if d := Diff(baseSnapshot(), nil); d != nil {
		t.Errorf("Diff(s, nil) = %v, want empty", d)
	}
}

func TestChangesString(t *testing.T) {
	old := baseSnapshot()
	new := clone(old)
	new.CPUs.Online = CPUSet{0}
	new.MemTotal -= 128 * miB
	got := Changes{Diff(old, new)[0], Diff(old, new)[len(Diff(old, new))-1]}.String()
	if want := "cpus 1-7 offline; MemTotal 24.0GiB -> 23.9GiB (-128.0MiB)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	var many Changes
	for range 11 {
		many = append(many, Change{ChangeSwap, "x"})
	}
	if s := many.String(); !strings.HasSuffix(s, "x; and 3 more") || strings.Count(s, "x") != 8 {
		t.Errorf("String() of 11 = %q", s)
	}
}

// Diff must be deterministic: the same inputs give the same output.
func TestDiffDeterministic(t *testing.T) {
	old := baseSnapshot()
	new := clone(old)
	for id := range 64 {
		if id%3 == 0 {
			new.MemoryBlocks[id].State = BlockOffline
		}
		if id%5 == 0 {
			new.MemoryBlocks[id].Zone = "Movable"
		}
	}
	first := Diff(old, new).String()
	for range 20 {
		if s := Diff(old, new).String(); s != first {
			t.Fatalf("Diff changed between runs:\n%s\n%s", first, s)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want string
	}{
		{0, "0B"}, {1023, "1023B"}, {1024, "1.0KiB"}, {1536, "1.5KiB"},
		{24 * giB, "24.0GiB"}, {24*giB - 128*miB, "23.9GiB"}, {3 * 1024 * giB, "3.0TiB"},
	} {
		if got := humanBytes(c.v); got != c.want {
			t.Errorf("humanBytes(%d) = %q, want %q", c.v, got, c.want)
		}
	}
}
