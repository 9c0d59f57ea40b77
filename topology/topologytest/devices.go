package topologytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Where the kernel puts QEMU's ACPI memory devices, relative to the sysfs
// root, and the links to them.
const (
	acpiMemParent = "devices/LNXSYSTM:00/LNXSYBUS:00/PNP0A06:00"
	acpiBusPath   = "bus/acpi/devices"
)

// DIMMName is the ACPI name of memory device instance n, "PNP0C80:00".
func DIMMName(n int) string { return fmt.Sprintf("PNP0C80:%02X", n) }

// writeDIMMs writes the ACPI memory devices and their links, and the
// container and bus directories the kernel has with or without them.
func (m *Machine) writeDIMMs(w *writer, sys string) {
	w.tb.Helper()
	parent := filepath.Join(sys, acpiMemParent)
	bus := filepath.Join(sys, acpiBusPath)
	w.extra(parent+"/hid", "PNP0A06\n")
	w.mkdir(bus)
	w.extra(filepath.Join(bus, "../uevent"), "")
	for _, d := range m.DIMMs {
		m.writeDIMM(w, sys, d)
	}
}

// writeDIMM writes device d, its bus link, its physical_node links and
// its blocks' firmware_node links.
func (m *Machine) writeDIMM(w *writer, sys string, d DIMM) {
	w.tb.Helper()
	name := DIMMName(d.Instance)
	dir := filepath.Join(sys, acpiMemParent, name)
	w.file(dir+"/hid", "PNP0C80\n")
	w.extra(dir+"/path", fmt.Sprintf("\\_SB_.MHPC.MP%02X\n", d.Instance))
	w.extra(dir+"/uid", fmt.Sprintf("%d\n", d.Instance))
	w.extra(dir+"/status", "15\n")
	w.extra(dir+"/modalias", "acpi:PNP0C80:\n")
	w.extraDir(dir + "/power")
	blocks := slices.Clone(d.Blocks)
	slices.Sort(blocks)
	for i, b := range blocks {
		w.link("../../../../system/memory/"+blockName(b), filepath.Join(dir, physicalNodeName(i)))
		w.link("../../../"+acpiMemParent[len("devices/"):]+"/"+name,
			filepath.Join(sys, memPath, blockName(b), "firmware_node"))
	}
	w.link("../../../"+acpiMemParent+"/"+name, filepath.Join(sys, acpiBusPath, name))
}

// physicalNodeName is the name of the i-th link acpi_bind_one makes:
// "physical_node", then "physical_node1", "physical_node2", ...
func physicalNodeName(i int) string {
	if i == 0 {
		return "physical_node"
	}
	return fmt.Sprintf("physical_node%d", i)
}

func blockName(id int) string { return fmt.Sprintf("memory%d", id) }

// iomemResource is one line of /proc/iomem, end inclusive.
type iomemResource struct {
	start, end uint64
	name       string
	children   []iomemResource
}

// procIomem renders /proc/iomem: the low reserved ranges and boot RAM of
// a PC, the Blocks outside virtio-mem devices as "System RAM" runs, and
// each virtio-mem region with its plugged blocks, in address order.
func procIomem(m Machine) string {
	top := []iomemResource{
		{start: 0, end: 0xfff, name: "Reserved"},
		{start: 0x1000, end: 0x9fbff, name: "System RAM"},
		{start: 0xf0000, end: 0xfffff, name: "Reserved", children: []iomemResource{
			{start: 0xf0000, end: 0xfffff, name: "System ROM"},
		}},
	}
	if m.BlockSize > 0 {
		virtio := map[int]bool{}
		for _, v := range m.VirtioMem {
			for _, b := range v.Blocks {
				virtio[b] = true
			}
		}
		var boot []int
		for _, b := range m.Blocks {
			if !virtio[b.ID] {
				boot = append(boot, b.ID)
			}
		}
		for _, rg := range blockRuns(boot, m.BlockSize) {
			rg.start = max(rg.start, 0x100000)
			rg.name = "System RAM"
			if rg.start <= 0x1000000 && rg.end >= 0x1ffffff {
				rg.children = []iomemResource{{start: 0x1000000, end: 0x1ffffff, name: "Kernel code"}}
			}
			top = append(top, rg)
		}
		for _, v := range m.VirtioMem {
			region := iomemResource{start: v.Start, end: v.Start + v.Size - 1, name: fmt.Sprintf("virtio%d", v.Index)}
			for _, rg := range blockRuns(v.Blocks, m.BlockSize) {
				rg.name = "System RAM (virtio_mem)"
				region.children = append(region.children, rg)
			}
			top = append(top, region)
		}
	}
	slices.SortFunc(top, func(a, b iomemResource) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	var sb strings.Builder
	var write func(rs []iomemResource, depth int)
	write = func(rs []iomemResource, depth int) {
		for _, r := range rs {
			start, end := r.start, r.end
			if m.HideIomem {
				start, end = 0, 0
			}
			fmt.Fprintf(&sb, "%*s%08x-%08x : %s\n", depth*2, "", start, end, r.name)
			write(r.children, depth+1)
		}
	}
	write(top, 0)
	return sb.String()
}

// blockRuns returns the address ranges of runs of adjacent blocks.
func blockRuns(ids []int, blockSize uint64) []iomemResource {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	var runs []iomemResource
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		runs = append(runs, iomemResource{start: uint64(s[i]) * blockSize, end: uint64(s[j]+1)*blockSize - 1})
		i = j + 1
	}
	return runs
}

// writeIomem rewrites /proc/iomem for what the tree holds now.
func (t *Tree) writeIomem() {
	t.tb.Helper()
	t.writer().file(filepath.Join(t.Proc, "iomem"), procIomem(t.m))
}

// dimmOf returns the index in the description of the DIMM block id is
// bound to, -1 for none.
func (t *Tree) dimmOf(id int) int {
	for i, d := range t.m.DIMMs {
		if slices.Contains(d.Blocks, id) {
			return i
		}
	}
	return -1
}

// AddDIMM hot-adds ACPI memory device d, as an ACPI memory hot-add does:
// the device directory and its bus link appear, then its blocks in state
// with valid_zones zones on node (-1 for none), as AddBlocks adds them,
// then, with a firmware memmap, one System RAM entry for the DIMM
// (add_memory_resource), then the links that bind the blocks. The blocks
// must be new and adjacent (a DIMM is one range).
func (t *Tree) AddDIMM(d DIMM, node int, state, zones string) {
	t.tb.Helper()
	for _, o := range t.m.DIMMs {
		if o.Instance == d.Instance {
			t.tb.Fatalf("topologytest: %s exists", DIMMName(d.Instance))
		}
	}
	blocks := slices.Clone(d.Blocks)
	slices.Sort(blocks)
	if len(blocks) == 0 || blocks[len(blocks)-1]-blocks[0] != len(blocks)-1 {
		t.tb.Fatalf("topologytest: %s: blocks %v are not one range", DIMMName(d.Instance), d.Blocks)
	}
	d.Blocks = blocks
	name := DIMMName(d.Instance)
	staged := t.stageDir()
	w := t.plain()
	w.file(staged+"/hid", "PNP0C80\n")
	w.extra(staged+"/path", fmt.Sprintf("\\_SB_.MHPC.MP%02X\n", d.Instance))
	w.extra(staged+"/uid", fmt.Sprintf("%d\n", d.Instance))
	w.extra(staged+"/status", "15\n")
	w.extra(staged+"/modalias", "acpi:PNP0C80:\n")
	w.extraDir(staged + "/power")
	dir := filepath.Join(t.Sys, acpiMemParent, name)
	t.moveIn(staged, dir)
	w.link("../../../"+acpiMemParent+"/"+name, filepath.Join(t.Sys, acpiBusPath, name))
	t.addBlocks(blocks[0], len(blocks), node, state, zones)
	t.addMemmapRAM(blocks[0], len(blocks))
	for i, b := range blocks {
		w.link("../../../../system/memory/"+blockName(b), filepath.Join(dir, physicalNodeName(i)))
		w.link("../../../"+acpiMemParent[len("devices/"):]+"/"+name,
			filepath.Join(t.Sys, memPath, blockName(b), "firmware_node"))
	}
	t.m.DIMMs = append(t.m.DIMMs, d)
}

// RemoveDIMM removes ACPI memory device instance, as the eject that
// follows a hypervisor's unplug does: every block of it must be offline
// (the kernel offlines them first, or refuses the eject); the links
// that bind them go, then the blocks and the DIMM's memmap entry, then
// the device and its bus link.
func (t *Tree) RemoveDIMM(instance int) {
	t.tb.Helper()
	i := slices.IndexFunc(t.m.DIMMs, func(d DIMM) bool { return d.Instance == instance })
	if i < 0 {
		t.tb.Fatalf("topologytest: no %s", DIMMName(instance))
	}
	d := t.m.DIMMs[i]
	name := DIMMName(instance)
	for _, b := range d.Blocks {
		if st := t.m.Blocks[t.block(b)].State; st != BlockOffline {
			t.tb.Fatalf("topologytest: %s: memory%d is %s; the kernel refuses the eject", name, b, st)
		}
	}
	dir := filepath.Join(t.Sys, acpiMemParent, name)
	for k, b := range d.Blocks {
		for _, p := range []string{filepath.Join(dir, physicalNodeName(k)), filepath.Join(t.Sys, memPath, blockName(b), "firmware_node")} {
			if err := os.Remove(p); err != nil {
				t.tb.Fatal(err)
			}
		}
	}
	t.m.DIMMs = slices.Delete(t.m.DIMMs, i, i+1)
	for _, b := range d.Blocks {
		t.RemoveBlocks(b, 1)
	}
	t.removeMemmapRAM(d.Blocks[0], len(d.Blocks))
	if err := os.Remove(filepath.Join(t.Sys, acpiBusPath, name)); err != nil {
		t.tb.Fatal(err)
	}
	t.moveOut(dir)
}

// AddVirtioMemBlocks plugs blocks first..first+n-1 into virtio-mem device
// virtio<index>, as its driver does: the blocks are added as AddBlocks
// adds them, but with no firmware memmap entry (the driver adds them with
// add_memory_driver_managed), and /proc/iomem shows them under the
// device's region. To unplug them, take them offline and remove them
// with RemoveBlocks, as the driver does.
func (t *Tree) AddVirtioMemBlocks(index, first, n, node int, state, zones string) {
	t.tb.Helper()
	k := slices.IndexFunc(t.m.VirtioMem, func(v VirtioMem) bool { return v.Index == index })
	if k < 0 {
		t.tb.Fatalf("topologytest: no virtio%d", index)
	}
	v := &t.m.VirtioMem[k]
	for id := first; id < first+n; id++ {
		if a := uint64(id) * t.m.BlockSize; a < v.Start || a+t.m.BlockSize > v.Start+v.Size {
			t.tb.Fatalf("topologytest: memory%d is outside virtio%d's region", id, index)
		}
		v.Blocks = append(v.Blocks, id)
	}
	t.addBlocks(first, n, node, state, zones)
}
