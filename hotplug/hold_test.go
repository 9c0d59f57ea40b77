package hotplug

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHolds(t *testing.T) {
	var h Holds
	if h.CPUHeld(1) || h.BlockHeld(1) {
		t.Fatal("the zero Holds holds something")
	}
	h.Release([]int{1}, []int{1}) // nothing held: nothing happens
	h.Hold([]int{3, 2}, []int{42, 40, 41})
	h.Hold([]int{2}, nil)
	cpus, blocks := h.Held()
	if !slices.Equal(cpus, []int{2, 3}) || !slices.Equal(blocks, []int{40, 41, 42}) {
		t.Errorf("Held = %v %v", cpus, blocks)
	}
	if !h.CPUHeld(2) || h.CPUHeld(42) || !h.BlockHeld(42) || h.BlockHeld(2) {
		t.Error("CPUs and blocks are not held apart")
	}
	h.Release([]int{2}, []int{41})
	cpus, blocks = h.Held()
	if !slices.Equal(cpus, []int{3}) || !slices.Equal(blocks, []int{40, 42}) {
		t.Errorf("Held after a release = %v %v", cpus, blocks)
	}
}

// A held CPU or block is not onlined by anyone writing through the Writer;
// it can still be offlined; released, it can be onlined again.
func TestWriterRefusesToOnlineWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	root := machine(t) // cpu2, cpu3 offline; memory4, memory5 offline
	w := NewWriter(root, Config{})
	w.Holds().Hold([]int{2, 1}, []int{4, 3})
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for _, tc := range []struct {
		name string
		do   func() error
		file string
		want string
		held bool
	}{
		{"online a held cpu", func() error { return w.OnlineCPU(ctx, 2) }, "devices/system/cpu/cpu2/online", "0", true},
		{"online a cpu not held", func() error { return w.OnlineCPU(ctx, 3) }, "devices/system/cpu/cpu3/online", "1", false},
		{"online a held block movable", func() error { return w.OnlineBlock(ctx, 4, true) }, "devices/system/memory/memory4/state", "offline", true},
		{"online a held block", func() error { return w.OnlineBlock(ctx, 4, false) }, "devices/system/memory/memory4/state", "offline", true},
		{"online a block not held", func() error { return w.OnlineBlock(ctx, 5, true) }, "devices/system/memory/memory5/state", "online_movable", false},
		{"offline a held cpu", func() error { return w.OfflineCPU(ctx, 1) }, "devices/system/cpu/cpu1/online", "0", false},
		{"offline a held block", func() error { return w.OfflineBlock(ctx, 3) }, "devices/system/memory/memory3/state", "offline", false},
	} {
		err := tc.do()
		if tc.held != errors.Is(err, ErrHeld) || (!tc.held && err != nil) {
			t.Errorf("%s: %v (want held: %v)", tc.name, err, tc.held)
		}
		if got := read(tc.file); got != tc.want {
			t.Errorf("%s: %s = %q, want %q", tc.name, tc.file, got, tc.want)
		}
	}
	w.Holds().Release([]int{2}, []int{4})
	if err := w.OnlineCPU(ctx, 2); err != nil {
		t.Errorf("online a released cpu: %v", err)
	}
	if err := w.OnlineBlock(ctx, 4, true); err != nil {
		t.Errorf("online a released block: %v", err)
	}
}
