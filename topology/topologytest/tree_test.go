package topologytest

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestFormatList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{[]int{8, 3, 1, 2, 3, 0}, "0-3,8"},
	} {
		if got := formatList(c.in); got != c.want {
			t.Errorf("formatList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := formatList(without(Ints(0, 15), []int{0, 1, 2, 4})); got != "3,5-15" {
		t.Errorf("without = %q, want 3,5-15", got)
	}
}

// small is a two-socket machine with every attribute written (not Lean),
// caches and a firmware memmap, so that the changes touch every kind of
// file.
func small() Machine {
	m := Machine{
		CPUs:     append(SMTCPUs(0, 4, 0, 0, 3), SMTCPUs(4, 4, 1, 0)...),
		Possible: Ints(0, 15),
		Nodes: []Node{
			{ID: 0, CPUs: Ints(0, 3), MemKB: 4000000, Pools: []Pool{{KB: 2048, Nr: 8}}, Distances: []int{10, 20}},
			{ID: 1, CPUs: Ints(4, 7), MemKB: 4100000, Pools: []Pool{{KB: 2048, Nr: 8}}, Distances: []int{20, 10}},
		},
		BlockSize: 128 << 20,
		Blocks: append(append(append(Blocks(0, 32, BlockOnline, "Normal", 0),
			Blocks(32, 28, BlockOnline, "Movable", 1)...),
			Blocks(80, 4, BlockOnline, "Movable", 1)...),
			Blocks(60, 4, BlockOffline, "Movable Normal", 1)...),
		// Two DIMMs, one with offline blocks, and a virtio-mem device
		// with four of its sixteen blocks plugged.
		DIMMs:     []DIMM{{Instance: 0, Blocks: Ints(48, 55)}, {Instance: 1, Blocks: Ints(56, 63)}},
		VirtioMem: []VirtioMem{{Index: 0, Start: 80 << 27, Size: 16 << 27, Blocks: Ints(80, 83)}},
		MemKB:     8100000,
		SwapKB:    1 << 20,
		Pools:     []Pool{{KB: 2048, Nr: 16}},
		Caches:    true,
	}
	m.Memmap = m.PCMemmap()
	return m
}

// entries maps each path under root to what it is: a directory and its
// mode, a symlink and its target, or a file, its mode and its content.
// For meminfo files only the MemTotal line counts: the Tree keeps the
// other lines as they were.
func entries(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case d.IsDir():
			out[rel] = "dir " + info.Mode().String()
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			content := string(b)
			if d.Name() == "meminfo" {
				for _, l := range strings.Split(content, "\n") {
					if strings.Contains(l, "MemTotal:") {
						content = l
					}
				}
			}
			out[rel] = "file " + info.Mode().String() + " " + content
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree fails the test where the trees under a and b differ.
func sameTree(t *testing.T, what, a, b string) {
	t.Helper()
	ea, eb := entries(t, a), entries(t, b)
	n := 0
	for k, v := range ea {
		if w, ok := eb[k]; !ok || w != v {
			if n++; n <= 10 {
				t.Errorf("%s: %s: changed tree %q, written tree %q", what, k, v, w)
			}
		}
	}
	for k, w := range eb {
		if _, ok := ea[k]; !ok {
			if n++; n <= 10 {
				t.Errorf("%s: %s: missing from the changed tree, written tree %q", what, k, w)
			}
		}
	}
	if n > 10 {
		t.Errorf("%s: %d differences in all", what, n)
	}
}

// After every change the tree is what Write writes for Machine().
func TestTreeChangesMatchWrite(t *testing.T) {
	lean := small()
	lean.Lean = true
	// As an s390x kernel writes it: each socket in a book of its own,
	// in one drawer.
	s390 := small()
	s390.Arch = "s390x"
	for i := range s390.CPUs {
		s390.CPUs[i].Book, s390.CPUs[i].Drawer = s390.CPUs[i].Socket+1, 1
	}
	for name, m := range map[string]Machine{"full": small(), "lean": lean, "s390x": s390} {
		t.Run(name, func(t *testing.T) {
			root := Dir(t)
			tree := m.WriteTree(t, root)
			check := func(step string) {
				t.Helper()
				again := Dir(t)
				sys, proc := tree.Machine().Write(t, again)
				sameTree(t, step+": sys", tree.Sys, sys)
				sameTree(t, step+": proc", tree.Proc, proc)
				if left, _ := os.ReadDir(filepath.Join(root, ".stage")); len(left) != 0 {
					t.Errorf("%s: %d entries left in the stage", step, len(left))
				}
			}
			check("written")
			for _, step := range []struct {
				name   string
				change func()
			}{
				{"cpu5 offline", func() { tree.SetCPUOnline(5, false) }},
				{"cpu3 online", func() { tree.SetCPUOnline(3, true) }},
				{"cpu3 online again", func() { tree.SetCPUOnline(3, true) }},
				{"cpu5 online", func() { tree.SetCPUOnline(5, true) }},
				{"block 31 offline", func() { tree.SetBlockState(31, BlockOffline) }},
				{"block 60 online", func() { tree.SetBlockState(60, BlockOnline) }},
				{"block 59 going offline", func() { tree.SetBlockState(59, BlockGoingOffline) }},
				{"blocks 64-71 added", func() { tree.AddBlocks(64, 8, 1, BlockOffline, "Movable Normal") }},
				{"blocks 64-65 online", func() {
					tree.SetBlockState(64, BlockOnline)
					tree.SetBlockState(65, BlockOnline)
				}},
				{"blocks 66-71 removed", func() { tree.RemoveBlocks(66, 6) }},
				{"blocks 128-129 added without a node", func() { tree.AddBlocks(128, 2, -1, BlockOffline, "") }},
				{"MemTotal", func() { tree.SetMemTotalKB(8100000 - 131072) }},
				{"node0 MemTotal", func() { tree.SetNodeMemTotalKB(0, 4000000-131072) }},
				{"node1 without memory", func() { tree.SetNodeMemTotalKB(1, 0) }},
				{"cpu9 added to node1", func() { tree.AddCPU(CPU{ID: 9, Core: 4, Socket: 1}, 1) }},
				{"cpu9 online", func() { tree.SetCPUOnline(9, true) }},
				{"cpu3 offline", func() { tree.SetCPUOnline(3, false) }},
				{"cpu3 removed", func() { tree.RemoveCPU(3) }},
				{"node2 added", func() { tree.AddNode(2, 1<<20) }},
				{"blocks 72-73 added to node2", func() { tree.AddBlocks(72, 2, 2, BlockOffline, "Movable") }},
				{"blocks 72-73 removed", func() { tree.RemoveBlocks(72, 2) }},
				{"node2 removed", func() { tree.RemoveNode(2) }},
				{"DIMM 2 added", func() { tree.AddDIMM(DIMM{Instance: 2, Blocks: Ints(100, 103)}, 1, BlockOffline, "Movable Normal") }},
				{"DIMM 2 removed", func() { tree.RemoveDIMM(2) }},
				{"DIMM 1 ejected", func() {
					for id := 56; id <= 63; id++ {
						tree.SetBlockState(id, BlockOffline)
					}
					tree.RemoveDIMM(1)
				}},
				{"virtio0 plugs 84-85", func() { tree.AddVirtioMemBlocks(0, 84, 2, 1, BlockOnline, "Movable") }},
				{"virtio0 unplugs 85", func() {
					tree.SetBlockState(85, BlockOffline)
					tree.RemoveBlocks(85, 1)
				}},
			} {
				step.change()
				check(step.name)
			}
		})
	}
}

// read returns the content of the file at rel under root, "" if absent.
func read(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The changes look like the kernel's, checked file by file.
func TestTreeChangesLikeTheKernel(t *testing.T) {
	tree := small().WriteTree(t, Dir(t))
	cpu := func(rel string) string { return read(t, tree.Sys, "devices/system/cpu/"+rel) }
	mem := func(rel string) string { return read(t, tree.Sys, "devices/system/memory/"+rel) }

	tree.SetCPUOnline(5, false)
	for rel, want := range map[string]string{
		"online":                             "0-2,4,6-7\n",
		"offline":                            "3,5,8-15\n",
		"present":                            "0-7\n",
		"cpu5/online":                        "0\n",
		"cpu5/topology/core_id":              "", // gone while offline
		"cpu5/cache/index0/id":               "",
		"cpu4/topology/thread_siblings_list": "4\n", // its SMT sibling left
		"cpu4/topology/package_cpus_list":    "4,6-7\n",
		"cpu7/cache/index3/shared_cpu_map":   "000000d0\n",
		"cpu6/cache/index3/shared_cpu_list":  "4,6-7\n",
		"cpu0/topology/core_siblings_list":   "0-2\n", // the other socket is unchanged
		"cpu0/online":                        "",      // cpu0 has none
		"../node/node1/cpulist":              "4-7\n", // the present CPUs
		"../node/node1/cpu5/online":          "0\n",   // the node keeps its link
	} {
		if got := cpu(rel); got != want {
			t.Errorf("cpu/%s = %q, want %q", rel, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(tree.Sys, "devices/system/cpu/cpu5/topology")); !os.IsNotExist(err) {
		t.Errorf("cpu5/topology of an offline CPU: %v", err)
	}

	// An offline block that could go to Movable or Normal is onlined to
	// its default zone, Movable; an online Normal block offlined lists
	// Normal first.
	tree.SetBlockState(60, BlockOnline)
	tree.SetBlockState(31, BlockOffline)
	for rel, want := range map[string]string{
		"memory60/state":       "online\n",
		"memory60/online":      "1\n",
		"memory60/valid_zones": "Movable\n",
		"memory31/state":       "offline\n",
		"memory31/online":      "0\n",
		"memory31/valid_zones": "Normal Movable\n",
	} {
		if got := mem(rel); got != want {
			t.Errorf("memory/%s = %q, want %q", rel, got, want)
		}
	}

	tree.AddBlocks(64, 2, 1, BlockOffline, "Movable Normal")
	for rel, want := range map[string]string{
		"memory65/state":                     "offline\n",
		"memory65/valid_zones":               "Movable Normal\n",
		"memory65/phys_index":                "00000041\n",
		"memory65/node1/memory65/state":      "offline\n", // both links
		"../node/node1/memory64/valid_zones": "Movable Normal\n",
	} {
		if got := mem(rel); got != want {
			t.Errorf("memory/%s = %q, want %q", rel, got, want)
		}
	}
	tree.RemoveBlocks(64, 2)
	for _, p := range []string{"devices/system/memory/memory64", "devices/system/node/node1/memory64"} {
		if _, err := os.Lstat(filepath.Join(tree.Sys, p)); !os.IsNotExist(err) {
			t.Errorf("%s after RemoveBlocks: %v", p, err)
		}
	}

	tree.SetMemTotalKB(7968928)
	meminfo := read(t, tree.Proc, "meminfo")
	if !strings.HasPrefix(meminfo, "MemTotal:        7968928 kB\nMemFree:         4050000 kB\n") ||
		!strings.Contains(meminfo, "\nSwapTotal:       1048576 kB\n") || !strings.HasSuffix(meminfo, "DirectMap2M:     8000000 kB\n") {
		t.Errorf("meminfo after SetMemTotalKB:\n%s", meminfo)
	}
	tree.SetNodeMemTotalKB(1, 0)
	node1 := read(t, tree.Sys, "devices/system/node/node1/meminfo")
	if !strings.HasPrefix(node1, "Node 1 MemTotal:              0 kB\nNode 1 MemFree:         2050000 kB\n") {
		t.Errorf("node1/meminfo after SetNodeMemTotalKB:\n%s", node1)
	}
	if got := read(t, tree.Sys, "devices/system/node/has_memory"); got != "0\n" {
		t.Errorf("has_memory = %q, want 0", got)
	}
	if tree.MemTotalKB() != 7968928 || tree.NodeMemTotalKB(1) != 0 || tree.BlockSize() != 128<<20 {
		t.Errorf("MemTotalKB %d NodeMemTotalKB(1) %d BlockSize %d", tree.MemTotalKB(), tree.NodeMemTotalKB(1), tree.BlockSize())
	}
}

// The firmware memmap has an entry per DIMM, added and removed with it,
// and none for virtio-mem's blocks; the virtio-mem device is bound to
// its driver.
func TestTreeMemmapLikeTheKernel(t *testing.T) {
	tree := small().WriteTree(t, Dir(t))
	memmap := func() map[string]string {
		out := map[string]string{}
		dir := filepath.Join(tree.Sys, "firmware/memmap")
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			rel := "firmware/memmap/" + e.Name() + "/"
			out[e.Name()] = strings.TrimSpace(read(t, tree.Sys, rel+"start")) + "-" +
				strings.TrimSpace(read(t, tree.Sys, rel+"end")) + " " + strings.TrimSpace(read(t, tree.Sys, rel+"type"))
		}
		return out
	}
	boot := map[string]string{
		"0": "0x0-0x9fbff System RAM",
		"1": "0x9fc00-0xfffff Reserved",
		"2": "0x100000-0x17fffffff System RAM",    // memory0-47: boot memory
		"3": "0x180000000-0x1bfffffff System RAM", // PNP0C80:00, memory48-55
		"4": "0x1c0000000-0x1ffffffff System RAM", // PNP0C80:01, memory56-63
	}
	if got := memmap(); !reflect.DeepEqual(got, boot) {
		t.Errorf("written memmap\n got %v\nwant %v", got, boot)
	}
	if got := read(t, tree.Sys, "bus/virtio/drivers/virtio_mem/virtio0/device"); got != "0x0018\n" {
		t.Errorf("virtio_mem/virtio0/device = %q, want the virtio-mem id", got)
	}
	if got := read(t, tree.Sys, "bus/virtio/devices/virtio0/driver/virtio0/device"); got != "0x0018\n" {
		t.Errorf("virtio0/driver/virtio0/device = %q, want the device through its driver", got)
	}

	tree.AddDIMM(DIMM{Instance: 2, Blocks: Ints(100, 103)}, 1, BlockOffline, "Movable Normal")
	tree.AddVirtioMemBlocks(0, 84, 2, 1, BlockOnline, "Movable")
	tree.AddBlocks(64, 2, 1, BlockOffline, "Movable")
	want := maps.Clone(boot)
	want["5"] = "0x320000000-0x33fffffff System RAM" // the DIMM, whole
	want["6"] = "0x200000000-0x207ffffff System RAM" // memory64, probed
	want["7"] = "0x208000000-0x20fffffff System RAM" // memory65
	if got := memmap(); !reflect.DeepEqual(got, want) {
		t.Errorf("after the hot-adds\n got %v\nwant %v", got, want)
	}

	tree.RemoveDIMM(2)
	tree.SetBlockState(85, BlockOffline)
	tree.RemoveBlocks(85, 1) // virtio-mem's: no entry to remove
	tree.RemoveBlocks(64, 1)
	tree.SetBlockState(31, BlockOffline)
	tree.RemoveBlocks(31, 1) // boot memory: its entry covers more, and stays
	delete(want, "5")
	delete(want, "6")
	if got := memmap(); !reflect.DeepEqual(got, want) {
		t.Errorf("after the removals\n got %v\nwant %v", got, want)
	}
	tree.AddDIMM(DIMM{Instance: 3, Blocks: Ints(104, 105)}, 1, BlockOffline, "Movable")
	if got := memmap()["8"]; got != "0x340000000-0x34fffffff System RAM" {
		t.Errorf("a later DIMM's entry: memmap/8 = %q; numbers are not reused", got)
	}
}

// fatalTB records the first Fatal and ends the goroutine, as testing does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fails runs change on a tree whose test is tb and returns the message
// it stopped the test with, "" if none.
func fails(tb *fatalTB, change func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		change()
	}()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	msg := tb.msg
	tb.msg = ""
	return msg
}

// Changes the kernel would refuse stop the test instead of writing a tree
// no kernel shows.
func TestTreeRefusesImpossibleChanges(t *testing.T) {
	tb := &fatalTB{TB: t}
	tree := small().WriteTree(tb, Dir(t))
	for _, c := range []struct {
		name   string
		change func()
		want   string
	}{
		{"remove an online block", func() { tree.RemoveBlocks(0, 1) }, "memory0 is online"},
		{"remove a missing block", func() { tree.RemoveBlocks(200, 1) }, "no memory200"},
		{"add an existing block", func() { tree.AddBlocks(63, 2, 1, BlockOffline, "") }, "memory63 exists"},
		{"add to a missing node", func() { tree.AddBlocks(64, 1, 7, BlockOffline, "") }, "no node7"},
		{"bad state", func() { tree.SetBlockState(0, "on") }, `state "on"`},
		{"cpu0", func() { tree.SetCPUOnline(0, false) }, "cpu0 has no online file"},
		{"missing cpu", func() { tree.SetCPUOnline(9, true) }, "no cpu9"},
		{"add a present cpu", func() { tree.AddCPU(CPU{ID: 2}, 0) }, "cpu2 exists"},
		{"add an impossible cpu", func() { tree.AddCPU(CPU{ID: 16}, 0) }, "not possible"},
		{"remove an online cpu", func() { tree.RemoveCPU(1) }, "cpu1 is online"},
		{"remove a node with cpus", func() { tree.RemoveNode(0) }, "node0 has CPUs"},
		{"add a node below another", func() { tree.AddNode(1, 0) }, "must be above"},
		{"remove a DIMM's block alone", func() { tree.RemoveBlocks(60, 1) }, "belongs to PNP0C80:01"},
		{"eject a DIMM with online blocks", func() { tree.RemoveDIMM(1) }, "memory56 is online"},
		{"add a DIMM in two ranges", func() { tree.AddDIMM(DIMM{Instance: 5, Blocks: []int{100, 102}}, 1, BlockOffline, "") }, "not one range"},
		{"plug outside virtio0", func() { tree.AddVirtioMemBlocks(0, 96, 1, 1, BlockOnline, "Movable") }, "outside virtio0"},
	} {
		if got := fails(tb, c.change); !strings.Contains(got, c.want) {
			t.Errorf("%s: stopped with %q, want %q", c.name, got, c.want)
		}
	}
	noMem := small()
	noMem.BlockSize, noMem.Blocks, noMem.DIMMs, noMem.VirtioMem = 0, nil, nil, nil
	bare := noMem.WriteTree(tb, Dir(t))
	if got := fails(tb, func() { bare.AddBlocks(0, 1, 0, BlockOffline, "") }); !strings.Contains(got, "no memory blocks") {
		t.Errorf("AddBlocks without a memory directory: stopped with %q", got)
	}
}
