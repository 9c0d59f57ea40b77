package topology

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

func TestParseDevPath(t *testing.T) {
	for _, c := range []struct {
		path string
		want Device
	}{
		{"/devices/system/cpu/cpu17", Device{DeviceCPU, 17}},
		{"/devices/system/memory/memory4711", Device{DeviceMemory, 4711}},
		{"/devices/system/node/node3", Device{DeviceNode, 3}},
		{"/devices/system/cpu/cpu17/cache", Device{}},
		{"/devices/system/cpu/cpufreq", Device{}},
		{"/devices/system/memory/memory", Device{}},
		{"/devices/system/node/memory3", Device{}},
		{"/devices/virtual/cpuid/cpu1", Device{}},
		{"/devices/system/cpu/cpu99999999999", Device{}},
		{"", Device{}},
	} {
		if got := ParseDevPath(c.path); got != c.want {
			t.Errorf("ParseDevPath(%q) = %v, want %v", c.path, got, c.want)
		}
	}
	if s := (Device{DeviceMemory, 4711}).String(); s != "memory4711" {
		t.Errorf("String() = %q", s)
	}
}

// propertyMachine is a two-socket machine with three nodes (node2 holds
// only memory), room for more CPUs, blocks online and offline, pools.
func propertyMachine(lean bool) topologytest.Machine {
	return topologytest.Machine{
		CPUs:     append(topologytest.SMTCPUs(0, 6, 0, 0, 5), topologytest.SMTCPUs(8, 6, 1, 0, 12)...),
		Possible: topologytest.Ints(0, 19),
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: topologytest.Ints(0, 5), MemKB: 24 * 128 * 1024, Pools: []topologytest.Pool{{KB: 2048, Nr: 8}}, Distances: []int{10, 20, 30}},
			{ID: 1, CPUs: topologytest.Ints(8, 13), MemKB: 20 * 128 * 1024, Pools: []topologytest.Pool{{KB: 2048, Nr: 8}}, Distances: []int{20, 10, 30}},
			{ID: 2, MemKB: 4 * 128 * 1024, Distances: []int{30, 30, 10}},
		},
		BlockSize: 128 << 20,
		Blocks: concat(
			topologytest.Blocks(0, 24, BlockOnline, "Normal", 0),
			topologytest.Blocks(24, 4, BlockOffline, "Movable Normal", 0),
			topologytest.Blocks(32, 20, BlockOnline, "Movable", 1),
			topologytest.Blocks(52, 4, BlockOffline, "Normal Movable", 1),
			topologytest.Blocks(64, 4, BlockOnline, "Movable", 2),
		),
		MemKB:  48 * 128 * 1024,
		SwapKB: 1 << 20,
		Pools:  []topologytest.Pool{{KB: 2048, Nr: 16}},
		Lean:   lean,
	}
}

// step is one change of the tree and the devices its uevents name.
type step struct {
	what string
	devs []Device
	// incremental says Update must not fall back: the events name every
	// object that changed, and none is a node.
	incremental bool
}

// stepper makes random changes to a tree as the kernel makes them.
type stepper struct {
	t    *testing.T
	rnd  *rand.Rand
	tree *topologytest.Tree
}

func (p *stepper) pick(n int) int { return p.rnd.IntN(n) }

// memKB moves MemTotal, and the node's, by kb as onlining or offlining a
// block of node does.
func (p *stepper) memKB(node int, kb int64) {
	p.tree.SetMemTotalKB(uint64(int64(p.tree.MemTotalKB()) + kb))
	if node >= 0 && p.tree.Machine().Nodes != nil {
		p.tree.SetNodeMemTotalKB(node, uint64(int64(p.tree.NodeMemTotalKB(node))+kb))
	}
}

// change makes one random change and returns it.
func (p *stepper) change() step {
	m := p.tree.Machine()
	blockKB := int64(m.BlockSize / 1024)
	cpu := func(id int) Device { return Device{DeviceCPU, id} }
	mem := func(id int) Device { return Device{DeviceMemory, id} }
	for {
		switch p.pick(12) {
		case 0, 1: // a CPU online or offline
			c := m.CPUs[p.pick(len(m.CPUs))]
			if c.ID == 0 {
				continue
			}
			p.tree.SetCPUOnline(c.ID, !c.Online)
			return step{fmt.Sprintf("cpu%d online=%v", c.ID, !c.Online), []Device{cpu(c.ID)}, true}
		case 2: // a CPU hot-added, sometimes onlined at once
			var free []int
			for _, id := range m.Possible {
				if !slices.ContainsFunc(m.CPUs, func(c topologytest.CPU) bool { return c.ID == id }) {
					free = append(free, id)
				}
			}
			if len(free) == 0 || m.Nodes == nil {
				continue
			}
			id := free[p.pick(len(free))]
			node := p.pick(2)
			p.tree.AddCPU(topologytest.CPU{ID: id, Core: 100 + id/2, Socket: node}, node)
			if p.pick(2) == 0 {
				p.tree.SetCPUOnline(id, true)
				return step{fmt.Sprintf("cpu%d added to node%d and onlined", id, node), []Device{cpu(id), cpu(id)}, true}
			}
			return step{fmt.Sprintf("cpu%d added to node%d", id, node), []Device{cpu(id)}, true}
		case 3: // an offline CPU hot-removed
			var offline []int
			for _, c := range m.CPUs {
				if !c.Online && c.ID != 0 {
					offline = append(offline, c.ID)
				}
			}
			if len(offline) == 0 {
				continue
			}
			id := offline[p.pick(len(offline))]
			p.tree.RemoveCPU(id)
			return step{fmt.Sprintf("cpu%d removed", id), []Device{cpu(id)}, true}
		case 4, 5: // a block onlined or offlined
			if len(m.Blocks) == 0 {
				continue
			}
			b := m.Blocks[p.pick(len(m.Blocks))]
			if b.State == BlockOnline {
				p.tree.SetBlockState(b.ID, BlockOffline)
				p.memKB(b.Node, -blockKB)
				return step{fmt.Sprintf("memory%d offline", b.ID), []Device{mem(b.ID)}, true}
			}
			p.tree.SetBlockState(b.ID, BlockOnline)
			p.memKB(b.Node, blockKB)
			return step{fmt.Sprintf("memory%d online", b.ID), []Device{mem(b.ID)}, true}
		case 6: // a DIMM of 1-3 blocks hot-added to a node, sometimes onlined
			first := 0
			for _, b := range m.Blocks {
				first = max(first, b.ID+1+p.pick(3))
			}
			n := 1 + p.pick(3)
			node := -1
			if len(m.Nodes) > 0 {
				node = m.Nodes[p.pick(len(m.Nodes))].ID
			}
			zones := [...]string{"Movable Normal", "Normal Movable", ""}[p.pick(3)]
			p.tree.AddBlocks(first, n, node, BlockOffline, zones)
			var devs []Device
			for id := first; id < first+n; id++ {
				devs = append(devs, mem(id))
			}
			if p.pick(2) == 0 {
				for id := first; id < first+n; id++ {
					p.tree.SetBlockState(id, BlockOnline)
					p.memKB(node, blockKB)
					devs = append(devs, mem(id))
				}
				return step{fmt.Sprintf("memory%d-%d added to node%d and onlined", first, first+n-1, node), devs, true}
			}
			return step{fmt.Sprintf("memory%d-%d added to node%d", first, first+n-1, node), devs, true}
		case 7: // an offline block hot-removed
			var offline []int
			for _, b := range m.Blocks {
				if b.State == BlockOffline {
					offline = append(offline, b.ID)
				}
			}
			if len(offline) == 0 {
				continue
			}
			id := offline[p.pick(len(offline))]
			p.tree.RemoveBlocks(id, 1)
			return step{fmt.Sprintf("memory%d removed", id), []Device{mem(id)}, true}
		case 8: // a node appears, or an empty one goes away
			if p.pick(4) != 0 {
				continue // rarer: each ends in a full rebuild
			}
			if m.Nodes == nil {
				continue
			}
			last := m.Nodes[len(m.Nodes)-1]
			empty := len(last.CPUs) == 0 && !slices.ContainsFunc(m.Blocks, func(b topologytest.Block) bool { return b.Node == last.ID })
			if empty && len(m.Nodes) > 1 && p.pick(2) == 0 {
				p.tree.RemoveNode(last.ID)
				return step{fmt.Sprintf("node%d removed", last.ID), []Device{{DeviceNode, last.ID}}, false}
			}
			id := last.ID + 1
			p.tree.AddNode(id, 0)
			return step{fmt.Sprintf("node%d added", id), []Device{{DeviceNode, id}}, false}
		case 9: // a forged or stale event: nothing changed
			d := [...]Device{cpu(p.pick(24)), mem(p.pick(80))}[p.pick(2)]
			return step{"forged event for " + d.String(), []Device{d}, true}
		case 10: // a lost event: a CPU moved, the batch names another
			if p.pick(4) != 0 {
				continue // rarer: each ends in a full rebuild
			}
			c := m.CPUs[p.pick(len(m.CPUs))]
			if c.ID == 0 {
				continue
			}
			p.tree.SetCPUOnline(c.ID, !c.Online)
			return step{fmt.Sprintf("cpu%d online=%v, event lost", c.ID, !c.Online), []Device{cpu(0)}, false}
		case 11: // a balloon: MemTotal moves without a uevent
			if p.pick(4) != 0 {
				continue // rarer: each ends in a full rebuild
			}
			if m.Nodes == nil || m.Nodes[0].MemKB < 1<<20 {
				continue
			}
			p.memKB(m.Nodes[0].ID, -4096)
			return step{"balloon inflated by 4 MiB on node0", nil, false}
		}
	}
}

// cloneSnapshot copies s deeply, to check that Update leaves prev alone.
func cloneSnapshot(s *Snapshot) *Snapshot {
	c := *s
	c.CPUs = CPUs{slices.Clone(s.CPUs.Online), slices.Clone(s.CPUs.Offline), slices.Clone(s.CPUs.Present),
		slices.Clone(s.CPUs.Possible), slices.Clone(s.CPUs.Devices)}
	c.Nodes = slices.Clone(s.Nodes)
	for i, n := range c.Nodes {
		c.Nodes[i].CPUs = slices.Clone(n.CPUs)
		c.Nodes[i].Hugepages = slices.Clone(n.Hugepages)
		c.Nodes[i].Distances = slices.Clone(n.Distances)
	}
	c.MemoryBlocks = slices.Clone(s.MemoryBlocks)
	c.Hugepages = slices.Clone(s.Hugepages)
	return &c
}

// Random hotplug sequences on synthetic trees: after every batch of
// changes, the incremental update of the previous incremental model is
// exactly the full rebuild (reflect.DeepEqual, nil and empty slices
// told apart), it falls back only where it must, and it never modifies
// the snapshot it started from. The full rebuild of an FS that keeps its
// attribute files open between rebuilds is checked the same way.
func TestUpdateMatchesSnapshot(t *testing.T) {
	noNodes := scenarios()[3].fix // no node directories
	if noNodes.Nodes != nil {
		t.Fatal("scenario 3 has node directories")
	}
	machines := []struct {
		name  string
		m     topologytest.Machine
		seeds int
	}{
		{"lean", propertyMachine(true), 6},
		{"full", propertyMachine(false), 2},
		{"no-node-dirs", noNodes, 2},
	}
	steps := 80
	if testing.Short() {
		steps = 20
	}
	// The long-lived FS's full rebuilds read in parallel however small
	// the tree, in small chunks on more goroutines than blocks or nodes
	// are split into; the fresh FS's reference, which opens every file,
	// reads them in order.
	saved := parallelism
	t.Cleanup(func() { parallelism = saved })
	parallelism.workers, parallelism.minBlocks, parallelism.blockChunk, parallelism.minCPUs = 4, 1, 3, 1
	for _, mc := range machines {
		for seed := range mc.seeds {
			t.Run(fmt.Sprintf("%s/seed%d", mc.name, seed), func(t *testing.T) {
				tree := mc.m.WriteTree(t, topologytest.Dir(t))
				fsys, err := NewFS(tree.Sys, tree.Proc)
				if err != nil {
					t.Fatal(err)
				}
				prev := snapshotOf(t, fsys)
				p := &stepper{t: t, rnd: rand.New(rand.NewPCG(uint64(seed), 9)), tree: tree}
				var fallbacks, incremental, fastOnes int
				for i := range steps {
					// A batch of one to three changes, as one coalescing
					// window collects them.
					var batch []step
					for range 1 + p.pick(3) {
						batch = append(batch, p.change())
					}
					var devs []Device
					var whats []string
					mustIncr := true
					for _, s := range batch {
						devs = append(devs, s.devs...)
						whats = append(whats, s.what)
						mustIncr = mustIncr && s.incremental
					}
					// The events of a batch arrive in any order.
					p.rnd.Shuffle(len(devs), func(i, j int) { devs[i], devs[j] = devs[j], devs[i] })
					desc := fmt.Sprintf("step %d (%s)", i, strings.Join(whats, "; "))

					before := cloneSnapshot(prev)
					// A batch whose every change is of CPUs, named by
					// its events (no balloon, no lazy node memory).
					allCPUs := !slices.ContainsFunc(devs, func(d Device) bool { return d.Kind != DeviceCPU }) &&
						!slices.ContainsFunc(batch, func(s step) bool { return len(s.devs) == 0 })
					var fast *Snapshot
					var why string
					if allCPUs {
						if fast, why, err = fsys.UpdateCPUs(prev, devs); err != nil {
							t.Fatalf("%s: UpdateCPUs: %v", desc, err)
						}
					}
					got, full, err := fsys.Update(prev, devs)
					if err != nil {
						t.Fatalf("%s: Update: %v", desc, err)
					}
					// The reference is a full rebuild by an FS made
					// afresh, which has no file open from before; the
					// long-lived FS's own full rebuild must agree too.
					want := freshSnapshot(t, tree.Sys, tree.Proc)
					if again, err := fsys.Snapshot(); err != nil || !reflect.DeepEqual(again, want) {
						t.Fatalf("%s: the full rebuild through the open files differs from a fresh one (%v): %v", desc, err, Diff(want, again))
					}
					if !reflect.DeepEqual(before, prev) {
						t.Fatalf("%s: Update modified the previous snapshot", desc)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: incremental (full %q) differs from the full rebuild: %v\n got %+v\nwant %+v",
							desc, full, Diff(want, got), got, want)
					}
					if mustIncr && full != "" {
						t.Fatalf("%s: fell back to a full rebuild: %s", desc, full)
					}
					// Only CPUs changed: the first half of the update
					// is the whole model, unless the update had to
					// read everything, and then it says why too.
					switch {
					case allCPUs && why == "" && !reflect.DeepEqual(fast, want):
						t.Fatalf("%s: UpdateCPUs differs from the full rebuild: %v", desc, Diff(want, fast))
					case allCPUs && why != "" && full == "":
						t.Fatalf("%s: UpdateCPUs gave up (%s) where Update was incremental", desc, why)
					case allCPUs && why == "":
						fastOnes++
					}
					if full != "" {
						fallbacks++
					} else {
						incremental++
					}
					prev = got
				}
				t.Logf("%d incremental updates (%d of CPUs only, by UpdateCPUs too), %d full rebuilds", incremental, fastOnes, fallbacks)
				if fastOnes == 0 && mc.m.Nodes != nil {
					t.Error("no step was a batch of CPU events that UpdateCPUs read")
				}
			})
		}
	}
}

// What makes Update read everything, and says so.
func TestUpdateFallsBack(t *testing.T) {
	tree := propertyMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	prev := snapshotOf(t, fsys)
	for _, c := range []struct {
		name   string
		noPrev bool
		devs   []Device
		change func()
		want   string
	}{
		{"no previous model", true, nil, nil, "no previous model"},
		{"other device", false, []Device{ParseDevPath("/devices/virtual/cpuid/cpu1")}, nil, "no cpu, memory block or node"},
		{"node event", false, []Device{{DeviceNode, 1}}, nil, "node1 event"},
		{"a CPU no event named", false, []Device{{DeviceCPU, 2}}, func() { tree.SetCPUOnline(3, false) }, "cpu/online changed for cpu3"},
		{"a node appears", false, []Device{{DeviceMemory, 0}}, func() { tree.AddNode(7, 0) }, "node directories changed"},
		{"MemTotal moves elsewhere", false, []Device{{DeviceMemory, 0}}, func() { tree.SetMemTotalKB(tree.MemTotalKB() - 4) }, "MemTotal moved by -4096 bytes, the nodes of the named devices by 0"},
		{"a block onlined on a node no event named", false, []Device{{DeviceMemory, 0}}, func() {
			tree.SetNodeMemTotalKB(1, tree.NodeMemTotalKB(1)+128*1024)
			tree.SetMemTotalKB(tree.MemTotalKB() + 128*1024)
		}, "MemTotal moved by 134217728 bytes, the nodes of the named devices by 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.change != nil {
				c.change()
			}
			from := prev
			if c.noPrev {
				from = nil
			}
			got, full, err := fsys.Update(from, c.devs)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(full, c.want) {
				t.Errorf("full = %q, want %q", full, c.want)
			}
			want := snapshotOf(t, fsys)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the fallback differs from Snapshot: %v", Diff(want, got))
			}
			prev = got
		})
	}
}

// A kernel that accounts memory to its nodes lazily moves nodeN/meminfo
// with no uevent and no move of /proc/meminfo: every update re-reads each
// node's MemTotal, and stays incremental.
func TestUpdateRereadsLazyNodeMemory(t *testing.T) {
	tree := propertyMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	prev := snapshotOf(t, fsys)
	for _, devs := range [][]Device{nil, {{DeviceCPU, 9}}, {{DeviceMemory, 40}}} {
		tree.SetNodeMemTotalKB(0, tree.NodeMemTotalKB(0)+1<<20)
		tree.SetNodeMemTotalKB(2, tree.NodeMemTotalKB(2)+3<<20)
		got, full, err := fsys.Update(prev, devs)
		if err != nil || full != "" {
			t.Fatalf("Update(%v): %q, %v; want incremental", devs, full, err)
		}
		want := snapshotOf(t, fsys)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Update(%v) differs from the full rebuild: %v", devs, Diff(got, want))
		}
		if got.Nodes[0].MemTotal == prev.Nodes[0].MemTotal || got.Nodes[2].MemTotal == prev.Nodes[2].MemTotal {
			t.Errorf("Update(%v): node MemTotals %d, %d as before", devs, got.Nodes[0].MemTotal, got.Nodes[2].MemTotal)
		}
		prev = got
	}
}

// UpdateCPUs reads the CPUs the events name and nothing of the memory
// or the totals: a node's MemTotal moved lazily and pid_max changed at
// the same time are left as they were, where Update reads them. Any
// other device, and no previous model, make it give up.
func TestUpdateCPUsReadsOnlyCPUs(t *testing.T) {
	tree := propertyMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	prev := snapshotOf(t, fsys)
	tree.SetCPUOnline(5, true)
	tree.SetNodeMemTotalKB(0, tree.NodeMemTotalKB(0)+1<<20)
	if err := os.WriteFile(filepath.Join(tree.Proc, "sys/kernel/pid_max"), []byte("99999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cpu5 := []Device{{DeviceCPU, 5}}
	fast, why, err := fsys.UpdateCPUs(prev, cpu5)
	if err != nil || why != "" {
		t.Fatalf("UpdateCPUs: %q, %v", why, err)
	}
	full, fullWhy, err := fsys.Update(prev, cpu5)
	if err != nil || fullWhy != "" {
		t.Fatalf("Update: %q, %v", fullWhy, err)
	}
	if !fast.CPUs.Online.Contains(5) || !reflect.DeepEqual(fast.CPUs, full.CPUs) {
		t.Errorf("UpdateCPUs' CPUs %+v, Update's %+v", fast.CPUs, full.CPUs)
	}
	if fast.Nodes[0].MemTotal != prev.Nodes[0].MemTotal || fast.PIDMax != prev.PIDMax {
		t.Errorf("UpdateCPUs read the memory or the totals: node0 MemTotal %d (was %d), pid_max %d (was %d)",
			fast.Nodes[0].MemTotal, prev.Nodes[0].MemTotal, fast.PIDMax, prev.PIDMax)
	}
	if full.Nodes[0].MemTotal == prev.Nodes[0].MemTotal || full.PIDMax != 99999 {
		t.Errorf("Update: node0 MemTotal %d, pid_max %d; want both re-read", full.Nodes[0].MemTotal, full.PIDMax)
	}
	if d := Diff(fast, full).String(); !strings.Contains(d, "node 0") && !strings.Contains(d, "node0") {
		t.Logf("the rest Update read: %s", d)
	}
	for _, tc := range []struct {
		prev *Snapshot
		devs []Device
	}{
		{nil, cpu5},
		{prev, []Device{{DeviceCPU, 5}, {DeviceMemory, 40}}},
		{prev, []Device{{DeviceNode, 1}}},
		{prev, []Device{{}}},
	} {
		if s, why, err := fsys.UpdateCPUs(tc.prev, tc.devs); s != nil || why == "" || err != nil {
			t.Errorf("UpdateCPUs(%v): %v, %q, %v; want no model and why", tc.devs, s != nil, why, err)
		}
	}
}

// An update that changes nothing shares every slice with prev.
func TestUpdateSharesUnchangedParts(t *testing.T) {
	tree := propertyMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	prev := snapshotOf(t, fsys)
	got, full, err := fsys.Update(prev, []Device{{DeviceCPU, 9}, {DeviceMemory, 40}})
	if err != nil || full != "" {
		t.Fatalf("Update: %q, %v", full, err)
	}
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	if !same(got.MemoryBlocks, prev.MemoryBlocks) || !same(got.CPUs.Devices, prev.CPUs.Devices) ||
		!same(got.Nodes[0].CPUs, prev.Nodes[0].CPUs) || !same(got.Nodes[2].Distances, prev.Nodes[2].Distances) {
		t.Error("an unchanged part was copied")
	}

	// cpu9 goes offline: node1's CPUs are new, node0's still shared.
	tree.SetCPUOnline(9, false)
	next, full, err := fsys.Update(got, []Device{{DeviceCPU, 9}})
	if err != nil || full != "" {
		t.Fatalf("Update: %q, %v", full, err)
	}
	if same(next.Nodes[1].CPUs, got.Nodes[1].CPUs) || !same(next.Nodes[0].CPUs, got.Nodes[0].CPUs) {
		t.Error("node1's CPUs shared or node0's copied")
	}
	if len(got.Nodes[1].CPUs) != 5 || len(next.Nodes[1].CPUs) != 4 {
		t.Errorf("node1 cpus: before %d, after %d", len(got.Nodes[1].CPUs), len(next.Nodes[1].CPUs))
	}
}

// Onlining a block can change the default zone the kernel shows for the
// other offline blocks of its node, with no uevent for them: an update
// for a block of that node re-reads them.
func TestUpdateRereadsOfflineZonesOfTheNode(t *testing.T) {
	tree := propertyMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	prev := snapshotOf(t, fsys)
	tree.SetBlockState(24, BlockOnline) // node0, "Movable Normal": onlined to Movable
	tree.SetMemTotalKB(tree.MemTotalKB() + 128*1024)
	tree.SetNodeMemTotalKB(0, tree.NodeMemTotalKB(0)+128*1024)
	// The kernel's default for the next offline block of node0 moves (as
	// the zones' spans change, under memory_hotplug.online_policy).
	zones := filepath.Join(tree.Sys, "devices/system/memory/memory25/valid_zones")
	if err := os.WriteFile(zones, []byte("Normal Movable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, full, err := fsys.Update(prev, []Device{{DeviceMemory, 24}})
	if err != nil || full != "" {
		t.Fatalf("Update: %q, %v", full, err)
	}
	want := snapshotOf(t, fsys)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("differs from the full rebuild: %v", Diff(want, got))
	}
	if z := got.MemoryBlocks[25].Zone; z != "Normal" {
		t.Errorf("memory25 zone %q, want Normal", z)
	}
}

// A memory block whose memory spans two nodes is linked from both node
// directories. The full rebuild and Update both give it the lower node,
// however many links are sorted.
func TestBlockLinkedByTwoNodesTakesTheLower(t *testing.T) {
	m := propertyMachine(true)
	tree := m.WriteTree(t, topologytest.Dir(t))
	var shared []int
	for _, b := range m.Blocks {
		if b.Node == 1 {
			link := filepath.Join(tree.Sys, fmt.Sprintf("devices/system/node/node0/memory%d", b.ID))
			if err := os.Symlink(fmt.Sprintf("../../memory/memory%d", b.ID), link); err != nil {
				t.Fatal(err)
			}
			shared = append(shared, b.ID)
		}
	}
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	full := snapshotOf(t, fsys)
	for _, b := range full.MemoryBlocks {
		if slices.Contains(shared, b.ID) && b.Node != 0 {
			t.Errorf("memory%d (linked from node0 and node1) in node%d, want node0", b.ID, b.Node)
		}
	}
	tree.SetBlockState(shared[0], BlockOffline)
	tree.SetMemTotalKB(tree.MemTotalKB() - 128*1024)
	tree.SetNodeMemTotalKB(0, tree.NodeMemTotalKB(0)-128*1024)
	got, why, err := fsys.Update(full, []Device{{DeviceMemory, shared[0]}})
	if err != nil || why != "" {
		t.Fatalf("Update: %q, %v", why, err)
	}
	want := snapshotOf(t, fsys)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Update differs from the full rebuild: %v", Diff(want, got))
	}
}

// snapshotOf is fsys's full model; the test stops if it cannot be read.
func snapshotOf(t testing.TB, fsys FS) *Snapshot {
	t.Helper()
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// freshSnapshot reads the tree at sys and proc through an FS made afresh,
// which opens every file and so reads everything in order.
func freshSnapshot(t testing.TB, sys, proc string) *Snapshot {
	t.Helper()
	fresh, err := NewFS(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	return snapshotOf(t, fresh)
}
