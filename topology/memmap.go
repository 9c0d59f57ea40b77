package topology

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

// ErrNoFirmwareMemmap is wrapped by the error [FS.FirmwareMemmap] returns
// when sysfs has no firmware/memmap: the kernel was built without
// CONFIG_FIRMWARE_MEMMAP, which only x86 has by default (x86 fills it from
// its e820 table; no other architecture adds boot entries).
var ErrNoFirmwareMemmap = errors.New("no /sys/firmware/memmap (a kernel without CONFIG_FIRMWARE_MEMMAP; only x86 has it by default)")

// memmapRAM is the type of RAM in the firmware memory map: x86's e820
// usable memory, and what add_memory_resource adds for memory hot-added
// under that resource name (firmware_map_add_hotplug, mm/memory_hotplug.c).
const memmapRAM = "System RAM"

// MemmapEntry is one entry of /sys/firmware/memmap: the raw memory map
// the firmware handed the kernel at boot, plus an entry the kernel adds
// for each range of memory it hot-adds as "System RAM" (ACPI DIMMs, the
// memory/probe file, the Xen and Hyper-V balloons), and removes with it.
// Driver-managed memory, added with add_memory_driver_managed (virtio-mem,
// dax/kmem), gets no entry. Addresses are half open, [Start, End).
type MemmapEntry struct {
	// Index is N of memmap/N; the kernel numbers entries as it adds
	// them and never reuses a number.
	Index int    `json:"index"`
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	// Type is "System RAM", "Reserved", "ACPI Tables", ...
	Type string `json:"type"`
}

// FirmwareMemmap reads /sys/firmware/memmap, in address order. The files
// are readable by root with no capability (drivers/firmware/memmap.c makes
// them read-only attributes), unlike the addresses of /proc/iomem. An
// entry removed while it is read is left out. No memmap directory is
// an error that wraps ErrNoFirmwareMemmap: what it would say is unknown.
func (fs FS) FirmwareMemmap() ([]MemmapEntry, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	dir := filepath.Join(fs.sys, "firmware/memmap")
	r := getReader()
	defer putReader(r)
	var idx []int
	err := r.scan(r.at(dir, -1, ""), func(name []byte) {
		if n, ok := numberedName(name, ""); ok {
			idx = append(idx, n)
		}
	})
	if err != nil {
		if isNotExist(err) {
			return nil, ErrNoFirmwareMemmap
		}
		return nil, err
	}
	es := make([]MemmapEntry, 0, len(idx))
	for _, n := range idx {
		e, ok, err := readMemmapEntry(r, dir, n)
		if err != nil {
			return nil, err
		}
		if ok {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b MemmapEntry) int {
		if a.Start != b.Start {
			return cmpUint64(a.Start, b.Start)
		}
		return a.Index - b.Index
	})
	return es, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readMemmapEntry reads memmap/n; ok is false when it is gone, or empty
// (an end one below its start: the kernel stores end-1 of a range given
// as [start, end)).
func readMemmapEntry(r *reader, dir string, n int) (MemmapEntry, bool, error) {
	e := MemmapEntry{Index: n}
	var end uint64
	for _, f := range [...]struct {
		name string
		v    *uint64
	}{{"/start", &e.Start}, {"/end", &end}} {
		p := r.at(dir+"/", n, f.name)
		b, ok, err := r.readOptional(cwd, p)
		if err != nil || !ok {
			return MemmapEntry{}, false, err
		}
		v, valid := parseMemmapAddr(b)
		if !valid {
			return MemmapEntry{}, false, fmt.Errorf("parse %s: %q is not a 0x address", p, trimSpace(b))
		}
		*f.v = v
	}
	p := r.at(dir+"/", n, "/type")
	b, ok, err := r.readOptional(cwd, p)
	if err != nil || !ok {
		return MemmapEntry{}, false, err
	}
	e.Type = string(trimSpace(b))
	switch {
	case end == ^uint64(0):
		e.End = end // the top of the address space: one byte short
	case end+1 <= e.Start:
		return MemmapEntry{}, false, nil
	default:
		e.End = end + 1 // the file's end is inclusive
	}
	return e, true, nil
}

// parseMemmapAddr parses a memmap start or end file: "0x%llx\n".
func parseMemmapAddr(b []byte) (uint64, bool) {
	b = trimSpace(b)
	if len(b) < 3 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') {
		return 0, false
	}
	return parseUint(b[2:], 16)
}

// overlapsRAM reports whether [start, end) overlaps a System RAM entry.
func overlapsRAM(es []MemmapEntry, start, end uint64) bool {
	for _, e := range es {
		if e.Type == memmapRAM && e.Start < end && start < e.End {
			return true
		}
	}
	return false
}
