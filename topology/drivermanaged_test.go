package topology

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

func TestDriverManaged(t *testing.T) {
	const bs = 128 * miB
	ram := func(start, end uint64) MemmapEntry { return MemmapEntry{Start: start, End: end, Type: "System RAM"} }
	pc := []MemmapEntry{
		ram(0, 0x9fc00),
		{Start: 0x9fc00, End: 0x100000, Type: "Reserved"},
		ram(0x100000, 8*bs-4096),                             // the last block only partly RAM
		{Start: 8 * bs, End: 10 * bs, Type: "Soft Reserved"}, // dax/kmem's kind of memory
		ram(12*bs, 14*bs),                                    // a DIMM
	}
	for _, c := range []struct {
		name string
		ids  []int
		es   []MemmapEntry
		want []int
		err  string
	}{
		{"boot memory only", []int{0, 1, 7}, pc, nil, ""},
		{"a block partly RAM is RAM's", []int{0, 7}, pc, nil, ""},
		{"in no entry, or only in non-RAM entries", []int{0, 8, 9, 10, 12, 13, 20}, pc, []int{8, 9, 10, 20}, ""},
		{"no blocks", nil, pc, nil, ""},
		{"hot-added entries only: not the boot memory map", []int{0, 12, 13, 20}, []MemmapEntry{ram(12*bs, 14*bs)}, nil, "memory0, the lowest"},
		{"empty memmap", []int{0, 1}, nil, nil, "lowest"},
	} {
		got, err := driverManaged(c.ids, bs, c.es)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (!errors.Is(err, ErrDriverManagedUnknown) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want ErrDriverManagedUnknown with %q", c.name, err, c.err)
		case !reflect.DeepEqual(got, c.want):
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestVirtioMemFromMemmap(t *testing.T) {
	const bs = 128 * miB
	x86 := func(edit func(m *topologytest.Machine)) topologytest.Machine {
		m := hotplugMachine()
		m.HideIomem = true
		if edit != nil {
			edit(&m)
		}
		m.Memmap = m.PCMemmap()
		return m
	}
	virtio3 := VirtioMemDevice{Name: "virtio3", Start: 40 * bs, End: 45 * bs,
		Ranges: []Range{{40 * bs, 43 * bs}, {44 * bs, 45 * bs}}, Blocks: []int{40, 41, 42, 44}}
	for _, c := range []struct {
		name string
		m    topologytest.Machine
		want []VirtioMemDevice
		note string // a part of the note; "": none
		err  string // a part of the error, which wraps ErrDriverManagedUnknown
	}{
		{name: "one device: its blocks, by its name", m: x86(nil), want: []VirtioMemDevice{virtio3}},
		{name: "two devices: one group, and a note", m: x86(func(m *topologytest.Machine) {
			m.Blocks = append(m.Blocks, topologytest.Blocks(48, 2, topologytest.BlockOffline, "Movable Normal", 0)...)
			m.VirtioMem = append(m.VirtioMem, topologytest.VirtioMem{Index: 5, Start: 48 * bs, Size: 8 * bs, Blocks: []int{48, 49}})
		}), want: []VirtioMemDevice{{Name: "virtio_mem", Start: 40 * bs, End: 50 * bs,
			Ranges: []Range{{40 * bs, 43 * bs}, {44 * bs, 45 * bs}, {48 * bs, 50 * bs}}, Blocks: []int{40, 41, 42, 44, 48, 49}}},
			note: "virtio3, virtio5 are reported as one group, \"virtio_mem\""},
		{name: "a device with nothing plugged", m: x86(func(m *topologytest.Machine) {
			m.Blocks = m.Blocks[:26]
			m.VirtioMem[0].Blocks = nil
		})},
		{name: "driver-managed memory but no virtio-mem device: not virtio-mem's", m: func() topologytest.Machine {
			m := x86(nil)
			m.VirtioMem = nil
			return m
		}()},
		{name: "no memmap (not x86): unknown", m: func() topologytest.Machine {
			m := x86(nil)
			m.Memmap = nil
			return m
		}(), err: "no /sys/firmware/memmap"},
		{name: "a memmap of hot-added DIMMs only: unknown", m: func() topologytest.Machine {
			m := x86(nil)
			m.Memmap = m.Memmap[3:]
			return m
		}(), err: "no System RAM over memory0"},
		{name: "dax devices bound to kmem: unknown", m: x86(func(m *topologytest.Machine) {
			m.Extra = bindKmem("dax0.0")
		}), err: "kmem (dax0.0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, note, err := newFixtureFS(t, c.m).VirtioMemFromMemmap()
			if c.err != "" {
				if !errors.Is(err, ErrDriverManagedUnknown) || !strings.Contains(err.Error(), c.err) {
					t.Errorf("error %v, want ErrDriverManagedUnknown with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
				t.Errorf("note %q, want one with %q", note, c.note)
			}
		})
	}
}

// No memmap is said twice: driver-managed memory unknown, for want of a
// memmap.
func TestVirtioMemFromMemmapWithoutMemmap(t *testing.T) {
	m := hotplugMachine()
	_, _, err := newFixtureFS(t, m).VirtioMemFromMemmap()
	if !errors.Is(err, ErrNoFirmwareMemmap) || !errors.Is(err, ErrDriverManagedUnknown) {
		t.Errorf("error %v, want ErrDriverManagedUnknown and ErrNoFirmwareMemmap", err)
	}
}
