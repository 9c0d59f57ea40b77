package topologytest

import (
	"fmt"
	"path/filepath"
	"slices"
)

// Where the kernel puts the firmware memory map, relative to the sysfs
// root (drivers/firmware/memmap.c).
const memmapPath = "firmware/memmap"

// MemmapRAM is the type of RAM in the firmware memory map: e820's usable
// memory, and the memory that add_memory hot-adds.
const MemmapRAM = "System RAM"

// MemmapEntry is one entry of /sys/firmware/memmap, the directory N with
// its start, end and type files. End is inclusive, as the file has it.
type MemmapEntry struct {
	Index      int // N: the kernel numbers entries as it adds them, never reusing one
	Start, End uint64
	Type       string
}

// PCMemmap returns the firmware memory map x86 exports for m
// (CONFIG_FIRMWARE_MEMMAP, which only x86 has by default): the e820 table
// at boot, then one entry per DIMM, as add_memory adds for each ACPI
// memory device it finds at boot. The e820 table is a PC's: RAM below
// 640 KiB, the reserved BIOS area, and System RAM over each run of the
// Blocks that belong to no DIMM and no virtio-mem device, from 1 MiB
// (boot memory). Memory a virtio-mem device plugs is never in it: the
// kernel adds no entry for driver-managed memory.
func (m Machine) PCMemmap() []MemmapEntry {
	es := []MemmapEntry{
		{Start: 0, End: 0x9fbff, Type: MemmapRAM},
		{Start: 0x9fc00, End: 0xfffff, Type: "Reserved"},
	}
	if m.BlockSize > 0 {
		other := map[int]bool{}
		for _, d := range m.DIMMs {
			for _, b := range d.Blocks {
				other[b] = true
			}
		}
		for _, v := range m.VirtioMem {
			for _, b := range v.Blocks {
				other[b] = true
			}
		}
		var boot []int
		for _, b := range m.Blocks {
			if !other[b.ID] {
				boot = append(boot, b.ID)
			}
		}
		for _, rg := range blockRuns(boot, m.BlockSize) {
			es = append(es, MemmapEntry{Start: max(rg.start, 0x100000), End: rg.end, Type: MemmapRAM})
		}
		slices.SortFunc(es, func(a, b MemmapEntry) int { return compareUint64(a.Start, b.Start) })
		for _, d := range m.DIMMs {
			for _, rg := range blockRuns(d.Blocks, m.BlockSize) {
				es = append(es, MemmapEntry{Start: rg.start, End: rg.end, Type: MemmapRAM})
			}
		}
	}
	for i := range es {
		es[i].Index = i
	}
	return es
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeMemmapEntry writes entry e into dir (memmap/N, or a staging copy
// of it) as firmware_map_entry's attributes show it: "0x%llx".
func writeMemmapEntry(w *writer, dir string, e MemmapEntry) {
	w.tb.Helper()
	w.file(dir+"/start", fmt.Sprintf("%#x\n", e.Start))
	w.file(dir+"/end", fmt.Sprintf("%#x\n", e.End))
	w.file(dir+"/type", e.Type+"\n")
}

// writeMemmap writes the firmware memory map; none when m.Memmap is nil.
func (m *Machine) writeMemmap(w *writer, sys string) {
	w.tb.Helper()
	if m.Memmap == nil {
		return
	}
	dir := filepath.Join(sys, memmapPath)
	w.mkdir(dir)
	for _, e := range m.Memmap {
		writeMemmapEntry(w, fmt.Sprintf("%s/%d", dir, e.Index), e)
	}
}

// addMemmapRAM adds a System RAM entry for blocks first..first+n-1, as
// add_memory_resource does for memory added under the name "System RAM"
// (firmware_map_add_hotplug); nothing when the machine has no memmap.
func (t *Tree) addMemmapRAM(first, n int) {
	t.tb.Helper()
	if t.m.Memmap == nil {
		return
	}
	e := MemmapEntry{Index: t.memmapNext, Start: uint64(first) * t.m.BlockSize,
		End: uint64(first+n)*t.m.BlockSize - 1, Type: MemmapRAM}
	t.memmapNext++
	staged := t.stageDir()
	writeMemmapEntry(t.plain(), staged, e)
	t.moveIn(staged, fmt.Sprintf("%s/%d", filepath.Join(t.Sys, memmapPath), e.Index))
	t.m.Memmap = append(t.m.Memmap, e)
}

// removeMemmapRAM removes the System RAM entry of exactly blocks
// first..first+n-1, as try_remove_memory does (firmware_map_remove); an
// entry over other addresses (boot memory's) stays, and a range with no
// entry (driver-managed memory) removes nothing.
func (t *Tree) removeMemmapRAM(first, n int) {
	t.tb.Helper()
	start, end := uint64(first)*t.m.BlockSize, uint64(first+n)*t.m.BlockSize-1
	i := slices.IndexFunc(t.m.Memmap, func(e MemmapEntry) bool {
		return e.Start == start && e.End == end && e.Type == MemmapRAM
	})
	if i < 0 {
		return
	}
	t.moveOut(fmt.Sprintf("%s/%d", filepath.Join(t.Sys, memmapPath), t.m.Memmap[i].Index))
	t.m.Memmap = slices.Delete(t.m.Memmap, i, i+1)
}

// nextMemmapIndex is the number the kernel gives the next entry it adds.
func nextMemmapIndex(es []MemmapEntry) int {
	n := 0
	for _, e := range es {
		n = max(n, e.Index+1)
	}
	return n
}
