package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// bindKmem makes sys show the dax devices names bound to kmem.
func bindKmem(names ...string) func(string) {
	return func(sys string) {
		drv := filepath.Join(sys, "bus/dax/drivers/kmem")
		if err := os.MkdirAll(drv, 0o755); err != nil {
			panic(err)
		}
		for _, f := range []string{"bind", "unbind", "uevent", "new_id", "remove_id"} {
			if err := os.WriteFile(filepath.Join(drv, f), nil, 0o200); err != nil {
				panic(err)
			}
		}
		for _, n := range names {
			if err := os.Symlink("../../../../devices/platform/hmem.0/"+n, filepath.Join(drv, n)); err != nil {
				panic(err)
			}
		}
	}
}

func TestBoundDevices(t *testing.T) {
	m := hotplugMachine()
	fsys := newFixtureFS(t, m)
	if got, err := fsys.VirtioMemDevices(); err != nil || !reflect.DeepEqual(got, []string{"virtio3"}) {
		t.Errorf("VirtioMemDevices = %v, %v; want [virtio3]", got, err)
	}
	if got, err := fsys.KmemDevices(); err != nil || got != nil {
		t.Errorf("KmemDevices with no kmem driver = %v, %v; want none", got, err)
	}

	m.VirtioMem = nil
	m.Extra = bindKmem("dax0.10", "dax0.2", "dax1.0")
	fsys = newFixtureFS(t, m)
	if got, err := fsys.VirtioMemDevices(); err != nil || got != nil {
		t.Errorf("VirtioMemDevices with no virtio_mem driver = %v, %v; want none", got, err)
	}
	if got, err := fsys.KmemDevices(); err != nil || !reflect.DeepEqual(got, []string{"dax0.2", "dax0.10", "dax1.0"}) {
		t.Errorf("KmemDevices = %v, %v; want dax0.2, dax0.10, dax1.0", got, err)
	}
}

func TestDeviceNames(t *testing.T) {
	for name, want := range map[string][2]bool{ // virtio, dax
		"virtio0": {true, false}, "virtio12": {true, false}, "virtio": {false, false},
		"virtio-x": {false, false}, "bind": {false, false}, "uevent": {false, false},
		"module": {false, false}, "dax0.0": {false, true}, "dax12.3": {false, true},
		"dax0": {false, false}, "dax0.": {false, false}, "dax.0": {false, false},
		"daxa.0": {false, false}, "new_id": {false, false},
	} {
		if got := [2]bool{isVirtioName(name), isDaxName(name)}; got != want {
			t.Errorf("%q: virtio, dax = %v, want %v", name, got, want)
		}
	}
	for _, want := range [][]string{
		{"virtio1", "virtio2", "virtio10"},
		{"dax0.9", "dax0.10", "dax1.0"},
	} {
		names := slices.Clone(want)
		slices.Reverse(names)
		if slices.SortFunc(names, compareNumbered); !reflect.DeepEqual(names, want) {
			t.Errorf("sorted %v, want %v", names, want)
		}
	}
}
