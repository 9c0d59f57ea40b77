//go:build linux

package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

// TestOpenFilesFollowTheTree changes a synthetic tree the way the kernel
// changes sysfs, under an FS that keeps its files open: with inotify
// watches telling it which directories changed, and with the fstat before
// each read that stands in when there are no watches to be had. After
// every change its full rebuild must equal a fresh FS's.
func TestOpenFilesFollowTheTree(t *testing.T) {
	for _, watched := range []bool{true, false} {
		name := "watched"
		if !watched {
			name = "fstat"
		}
		t.Run(name, func(t *testing.T) {
			if !watched {
				noWatches(t)
			}
			tree := propertyMachine(false).WriteTree(t, topologytest.Dir(t))
			fsys, err := NewFS(tree.Sys, tree.Proc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Snapshot(); err != nil {
				t.Fatal(err)
			}
			checkFiles(t, fsys, watched)
			for _, c := range []struct {
				what   string
				change func()
			}{
				{"cpu3 offline", func() { tree.SetCPUOnline(3, false) }},
				{"cpu3 online", func() { tree.SetCPUOnline(3, true) }},
				{"memory24 online", func() { tree.SetBlockState(24, BlockOnline) }},
				{"memory2 offline", func() { tree.SetBlockState(2, BlockOffline) }},
				{"memory25-27 removed", func() { tree.RemoveBlocks(25, 3) }},
				{"memory25-26 back in node 1", func() { tree.AddBlocks(25, 2, 1, BlockOffline, "Movable Normal") }},
				{"MemTotal", func() { tree.SetMemTotalKB(tree.MemTotalKB() - 128*1024) }},
				{"node1 MemTotal", func() { tree.SetNodeMemTotalKB(1, tree.NodeMemTotalKB(1)-128*1024) }},
				{"cpu13 offline", func() { tree.SetCPUOnline(13, false) }},
				{"cpu13 removed", func() { tree.RemoveCPU(13) }},
			} {
				c.change()
				got, err := fsys.Snapshot()
				if err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				want := freshSnapshot(t, tree.Sys, tree.Proc)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: the rebuild through the open files differs from a fresh one: %v", c.what, Diff(want, got))
				}
				checkFiles(t, fsys, watched)
			}
		})
	}
}

// noWatches makes the process's inotify watches unavailable to caches
// until the test ends.
func noWatches(t *testing.T) {
	watcher.mu.Lock()
	watchInit()
	saved := watcher.max
	watcher.max = 0
	watcher.mu.Unlock()
	t.Cleanup(func() {
		watcher.mu.Lock()
		watcher.max = saved
		watcher.mu.Unlock()
	})
}

// checkFiles requires fsys to keep files open, each watched or checked
// with an fstat as watched says.
func checkFiles(t *testing.T, fsys FS, watched bool) {
	t.Helper()
	f := fsys.cache.acquire()
	if f == nil {
		t.Fatal("the open files are in use")
	}
	defer fsys.cache.release(f)
	if len(f.attrs) == 0 || len(f.named) == 0 {
		t.Fatalf("%d attribute files and %d other files open, want some of each", len(f.attrs), len(f.named))
	}
	n := 0
	for _, a := range f.attrs {
		if (a.wd != 0) != watched || a.check == watched {
			n++
		}
	}
	for _, a := range f.named {
		if (a.wd != 0) != watched || a.check == watched {
			n++
		}
	}
	if n > 0 {
		t.Errorf("%d of %d open files are not %s", n, f.len(), map[bool]string{true: "watched", false: "checked with fstat"}[watched])
	}
}

// TestParallelRebuildSharesAFile reads, in parallel, a tree in which two
// node directories link the same CPU, so that two workers read its open
// topology files at once. Every rebuild through the open files must equal
// a fresh FS's, which reads in order (and, under -race, must not race).
func TestParallelRebuildSharesAFile(t *testing.T) {
	saved := parallelism
	t.Cleanup(func() { parallelism = saved })
	parallelism.workers, parallelism.minBlocks, parallelism.blockChunk, parallelism.minCPUs = 4, 1, 2, 1

	tree := propertyMachine(false).WriteTree(t, topologytest.Dir(t))
	// node2 has no CPUs of its own; make it link cpu0 too.
	if err := os.Symlink("../../cpu/cpu0", filepath.Join(tree.Sys, "devices/system/node/node2/cpu0")); err != nil {
		t.Fatal(err)
	}
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		got := snapshotOf(t, fsys)
		want := freshSnapshot(t, tree.Sys, tree.Proc)
		if len(want.Nodes) != 3 || len(want.Nodes[2].CPUs) != 1 || want.Nodes[2].CPUs[0].ID != 0 {
			t.Fatalf("node2 holds %+v, want cpu0", want.Nodes)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("rebuild %d through the open files differs from a fresh one: %v", i, Diff(want, got))
		}
	}
}
