package topology

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

// hotplugMachine is an SMT2 machine with a CPU that has no online file,
// two DIMMs (one partly offline), a virtio-mem device with two ranges
// plugged, and boot memory in zone Normal.
func hotplugMachine() topologytest.Machine {
	cpus := topologytest.SMTCPUs(0, 8, 0, 0, 7)
	cpus[2].NoOnlineFile = true
	blocks := append(topologytest.Blocks(0, 16, topologytest.BlockOnline, "Normal", 0),
		topologytest.Blocks(16, 8, topologytest.BlockOnline, "Movable", 0)...)
	blocks = append(blocks, topologytest.Blocks(24, 2, topologytest.BlockOffline, "Movable Normal", 0)...)
	blocks = append(blocks, topologytest.Blocks(40, 3, topologytest.BlockOnline, "Movable", 0)...)
	blocks = append(blocks, topologytest.Blocks(44, 1, topologytest.BlockOnline, "Movable", 0)...)
	return topologytest.Machine{
		CPUs:      cpus,
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 7), MemKB: 3 << 20}},
		BlockSize: 128 * miB,
		Blocks:    blocks,
		DIMMs: []topologytest.DIMM{
			{Instance: 0, Blocks: topologytest.Ints(16, 19)},
			{Instance: 1, Blocks: topologytest.Ints(20, 25)},
		},
		VirtioMem: []topologytest.VirtioMem{{Index: 3, Start: 40 * 128 * miB, Size: 8 * 128 * miB, Blocks: []int{40, 41, 42, 44}}},
		MemKB:     3 << 20,
		Extra: func(sys string) {
			p := filepath.Join(sys, "devices/system/memory/memory17/removable")
			if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
				panic(err)
			}
		},
	}
}

func TestHotplug(t *testing.T) {
	h, err := newFixtureFS(t, hotplugMachine()).Hotplug()
	if err != nil {
		t.Fatal(err)
	}
	wantCPUs := []HotplugCPU{
		{ID: 0, OnlineFile: false, Siblings: NewCPUSet(0, 1)},
		{ID: 1, OnlineFile: true, Siblings: NewCPUSet(0, 1)},
		{ID: 2, OnlineFile: false, Siblings: NewCPUSet(2, 3)},
		{ID: 3, OnlineFile: true, Siblings: NewCPUSet(2, 3)},
		{ID: 4, OnlineFile: true, Siblings: NewCPUSet(4, 5)},
		{ID: 5, OnlineFile: true, Siblings: NewCPUSet(4, 5)},
		{ID: 6, OnlineFile: true, Siblings: NewCPUSet(6)}, // its sibling is offline
		{ID: 7, OnlineFile: true},                         // offline: no topology
	}
	if !reflect.DeepEqual(h.CPUs, wantCPUs) {
		t.Errorf("CPUs\n got %+v\nwant %+v", h.CPUs, wantCPUs)
	}
	const bs = 128 * miB
	wantDevs := []MemoryDevice{
		{ID: "PNP0C80:00", Blocks: []int{16, 17, 18, 19}, Start: 16 * bs, End: 20 * bs, Size: 4 * bs},
		{ID: "PNP0C80:01", Blocks: []int{20, 21, 22, 23, 24, 25}, Start: 20 * bs, End: 26 * bs, Size: 6 * bs},
	}
	if !reflect.DeepEqual(h.MemoryDevices, wantDevs) {
		t.Errorf("memory devices\n got %+v\nwant %+v", h.MemoryDevices, wantDevs)
	}
	wantVirtio := []VirtioMemDevice{{
		Name: "virtio3", Start: 40 * bs, End: 48 * bs,
		Ranges: []Range{{40 * bs, 43 * bs}, {44 * bs, 45 * bs}},
		Blocks: []int{40, 41, 42, 44},
	}}
	if !reflect.DeepEqual(h.VirtioMem, wantVirtio) || h.VirtioMemError != "" {
		t.Errorf("virtio-mem\n got %+v (%q)\nwant %+v", h.VirtioMem, h.VirtioMemError, wantVirtio)
	}
	if !reflect.DeepEqual(h.NotRemovable, []int{17}) {
		t.Errorf("not removable: got %v, want [17]", h.NotRemovable)
	}
}

// Hidden iomem addresses leave virtio-mem to the firmware memmap: its
// blocks are found where x86 has one, and unknown, said as such, where
// there is none; the rest of the reads stand.
func TestHotplugIomemHidden(t *testing.T) {
	const bs = 128 * miB
	m := hotplugMachine()
	m.HideIomem = true
	fsys := newFixtureFS(t, m)
	if _, err := fsys.VirtioMem(); !errors.Is(err, ErrIomemHidden) {
		t.Errorf("VirtioMem: error %v, want ErrIomemHidden", err)
	}
	h, err := fsys.Hotplug()
	if err != nil {
		t.Fatal(err)
	}
	if h.VirtioMem != nil || !strings.Contains(h.VirtioMemError, "CAP_SYS_ADMIN") || !strings.Contains(h.VirtioMemError, "no /sys/firmware/memmap") {
		t.Errorf("no memmap: virtio-mem %+v, error %q; want none and why", h.VirtioMem, h.VirtioMemError)
	}
	if len(h.MemoryDevices) != 2 || len(h.CPUs) != 8 {
		t.Errorf("got %d devices, %d CPUs; want 2, 8", len(h.MemoryDevices), len(h.CPUs))
	}

	m.Memmap = m.PCMemmap()
	if h, err = newFixtureFS(t, m).Hotplug(); err != nil {
		t.Fatal(err)
	}
	want := []VirtioMemDevice{{Name: "virtio3", Start: 40 * bs, End: 45 * bs,
		Ranges: []Range{{40 * bs, 43 * bs}, {44 * bs, 45 * bs}}, Blocks: []int{40, 41, 42, 44}}}
	if !reflect.DeepEqual(h.VirtioMem, want) || h.VirtioMemError != "" || h.VirtioMemNote != "" {
		t.Errorf("memmap: virtio-mem %+v (error %q, note %q)\nwant %+v", h.VirtioMem, h.VirtioMemError, h.VirtioMemNote, want)
	}
}

// With iomem hidden, the memmap follows a DIMM's hot-add and eject, a
// block probed, and virtio-mem's plug and unplug.
func TestHotplugIomemHiddenFollowsTree(t *testing.T) {
	m := hotplugMachine()
	m.HideIomem = true
	m.Memmap = m.PCMemmap()
	tree := m.WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := func() []int {
		t.Helper()
		h, err := fsys.Hotplug()
		if err != nil {
			t.Fatal(err)
		}
		if len(h.VirtioMem) != 1 || h.VirtioMemError != "" {
			t.Fatalf("virtio-mem %+v, error %q", h.VirtioMem, h.VirtioMemError)
		}
		return h.VirtioMem[0].Blocks
	}
	tree.AddDIMM(topologytest.DIMM{Instance: 2, Blocks: topologytest.Ints(32, 35)}, 0, topologytest.BlockOffline, "Movable Normal")
	tree.AddBlocks(36, 1, 0, topologytest.BlockOffline, "Movable Normal")
	tree.AddVirtioMemBlocks(3, 43, 1, 0, topologytest.BlockOnline, "Movable")
	if got := blocks(); !reflect.DeepEqual(got, []int{40, 41, 42, 43, 44}) {
		t.Errorf("after the hot-adds: blocks %v; want virtio-mem's, not the DIMM's or the probed one", got)
	}
	tree.RemoveDIMM(2)
	tree.SetBlockState(41, topologytest.BlockOffline)
	tree.RemoveBlocks(41, 1)
	if got := blocks(); !reflect.DeepEqual(got, []int{40, 42, 43, 44}) {
		t.Errorf("after the unplug: blocks %v", got)
	}
}

// The reads follow a DIMM's hot-add and eject, and virtio-mem's plug and
// unplug.
func TestHotplugFollowsTree(t *testing.T) {
	tree := hotplugMachine().WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	tree.AddDIMM(topologytest.DIMM{Instance: 2, Blocks: topologytest.Ints(32, 35)}, 0, topologytest.BlockOffline, "Movable Normal")
	tree.AddVirtioMemBlocks(3, 43, 1, 0, topologytest.BlockOnline, "Movable")
	h, err := fsys.Hotplug()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.MemoryDevices) != 3 || h.MemoryDevices[2].ID != "PNP0C80:02" || !reflect.DeepEqual(h.MemoryDevices[2].Blocks, []int{32, 33, 34, 35}) {
		t.Errorf("after the hot-add: %+v", h.MemoryDevices)
	}
	if got := h.VirtioMem[0].Ranges; !reflect.DeepEqual(got, []Range{{40 * 128 * miB, 45 * 128 * miB}}) {
		t.Errorf("after the plug, one merged range: %+v", got)
	}

	tree.RemoveDIMM(2)
	tree.SetBlockState(41, topologytest.BlockOffline)
	tree.RemoveBlocks(41, 1)
	if h, err = fsys.Hotplug(); err != nil {
		t.Fatal(err)
	}
	if len(h.MemoryDevices) != 2 {
		t.Errorf("after the eject: %+v", h.MemoryDevices)
	}
	if got := h.VirtioMem[0].Blocks; !reflect.DeepEqual(got, []int{40, 42, 43, 44}) {
		t.Errorf("after the unplug: blocks %v", got)
	}
}

func TestParseIomem(t *testing.T) {
	const bootOnly = `00000000-00000fff : Reserved
00001000-0009fbff : System RAM
00100000-bfffffff : System RAM
  01000000-01ffffff : Kernel code
100000000-13fffffff : System RAM
`
	for _, c := range []struct {
		name string
		in   string
		want []VirtioMemDevice
		err  string // "": no error
	}{
		{"no virtio-mem", bootOnly, nil, ""},
		{"empty", "", nil, ""},
		{"two devices, one range merged", bootOnly + `140000000-333ffffff : virtio0
  140000000-147ffffff : System RAM (virtio_mem)
334000000-533ffffff : virtio1
  338000000-33fffffff : System RAM (virtio_mem)
  340000000-347ffffff : System RAM (virtio_mem)
  350000000-357ffffff : System RAM (virtio_mem)
4000000000-7fffffffff : PCI Bus 0000:00
`, []VirtioMemDevice{
			{Name: "virtio0", Start: 0x140000000, End: 0x334000000, Ranges: []Range{{0x140000000, 0x148000000}}},
			{Name: "virtio1", Start: 0x334000000, End: 0x534000000, Ranges: []Range{{0x338000000, 0x348000000}, {0x350000000, 0x358000000}}},
		}, ""},
		{"hidden", strings.Repeat("00000000-00000000 : System RAM\n", 3) + "00000000-00000000 : virtio0\n  00000000-00000000 : System RAM (virtio_mem)\n", nil, "CAP_SYS_ADMIN"},
		// The names show whoever reads: no virtio-mem line is no
		// virtio-mem memory, hidden addresses or not.
		{"hidden, no virtio-mem", "00000000-00000000 : Reserved\n00000000-00000000 : System RAM\n", nil, ""},
		{"no range", "System RAM\n", nil, "bad line"},
		{"end before start", "00002000-00001000 : System RAM\n", nil, "bad range"},
		{"nested too deep", "00000000-00000fff : Reserved\n      00000000-000000ff : x\n", nil, "nested"},
	} {
		got, err := parseIomem([]byte(c.in))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.err)
		case !reflect.DeepEqual(got, c.want):
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestRangeBlocks(t *testing.T) {
	const bs = 128 * miB
	got := rangeBlocks([]Range{{2 * bs, 4 * bs}, {4 * bs, 5 * bs}, {7*bs + 4096, 8*bs - 4096}}, bs)
	if want := []int{2, 3, 4, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("rangeBlocks = %v, want %v", got, want)
	}
}

func TestIsPhysicalNode(t *testing.T) {
	for name, want := range map[string]bool{
		"physical_node": true, "physical_node1": true, "physical_node12": true,
		"physical_node0": false, "physical_node01": false, "physical_nodes": false,
		"firmware_node": false, "physical_node-1": false,
	} {
		if got := isPhysicalNode(name); got != want {
			t.Errorf("isPhysicalNode(%q) = %v, want %v", name, got, want)
		}
	}
}
