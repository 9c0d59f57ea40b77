package topology

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrIomemHidden is wrapped by the error [FS.VirtioMem] returns when
// /proc/iomem shows every range as 0-0: the kernel hides the addresses
// from a reader without CAP_SYS_ADMIN. Which memory blocks belong to a
// virtio-mem device is then unknown, not absent.
var ErrIomemHidden = errors.New("/proc/iomem hides its addresses from a reader without CAP_SYS_ADMIN")

// virtioMemRAM is the name virtio-mem gives the memory it adds
// (drivers/virtio/virtio_mem.c), under a parent resource named after the
// virtio device.
const virtioMemRAM = "System RAM (virtio_mem)"

// VirtioMemDevice is the memory a virtio-mem device has added to the
// machine, from /proc/iomem: its region, the ranges of it that are system
// RAM now, and the memory blocks those cover. Addresses are half open,
// [Start, End).
type VirtioMemDevice struct {
	// Name is the region's resource name: the virtio device, "virtio0".
	Name   string  `json:"name"`
	Start  uint64  `json:"start"`
	End    uint64  `json:"end"`
	Ranges []Range `json:"ranges"`
	// Blocks are the ids of the memory blocks the ranges cover,
	// ascending: the driver adds memory in whole blocks.
	Blocks []int `json:"blocks"`
}

// Range is a physical address range, [Start, End).
type Range struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// VirtioMem reads the virtio-mem devices' memory from procfs iomem, in
// address order: every "System RAM (virtio_mem)" range, grouped by its
// parent region. The blocks are the ranges divided by
// memory/block_size_bytes. No virtio-mem memory is no devices. When the
// file hides its addresses (not read as root) the error wraps
// ErrIomemHidden: the caller must not take that for "no virtio-mem".
func (fs FS) VirtioMem() ([]VirtioMemDevice, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	path := filepath.Join(fs.proc, "iomem")
	r := getReader()
	defer putReader(r)
	b, ok, err := r.readOptional(cwd, r.at(path, -1, ""))
	if err != nil || !ok {
		return nil, err // no iomem (a synthetic tree) is no virtio-mem
	}
	devs, err := parseIomem(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(devs) == 0 {
		return nil, nil
	}
	blockSize, err := fs.blockSize()
	if err != nil {
		return nil, err
	}
	for i := range devs {
		devs[i].Blocks = rangeBlocks(devs[i].Ranges, blockSize)
	}
	return devs, nil
}

// rangeBlocks returns the ids of the blocks that the ranges touch.
func rangeBlocks(ranges []Range, blockSize uint64) []int {
	var ids []int
	for _, rg := range ranges {
		for id := rg.Start / blockSize; id*blockSize < rg.End; id++ {
			if len(ids) == 0 || ids[len(ids)-1] < int(id) {
				ids = append(ids, int(id))
			}
		}
	}
	return ids
}

// iomemLine is one line of /proc/iomem: "%*s%08llx-%08llx : %s", indented
// two spaces a level, the end inclusive.
type iomemLine struct {
	depth      int
	start, end uint64 // end inclusive, as the file has it
	name       string
}

// parseIomem returns the virtio-mem devices of an iomem file, without
// their blocks. A range nested in another is its child; the parent of a
// "System RAM (virtio_mem)" range is its device's region. Adjacent ranges
// of one device are merged (the kernel merges them too, when it can).
func parseIomem(b []byte) ([]VirtioMemDevice, error) {
	var (
		devs    []VirtioMemDevice
		parents []iomemLine // the open line at each depth
	)
	for len(b) > 0 {
		line := b
		if i := indexByteFrom(b, '\n', 0); i < len(b) {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		l, err := parseIomemLine(line)
		if err != nil {
			return nil, err
		}
		if l.depth > len(parents) {
			return nil, fmt.Errorf("line %q is nested %d levels under a line %d levels deep", line, l.depth, len(parents)-1)
		}
		parents = append(parents[:l.depth], l)
		if l.name != virtioMemRAM {
			continue
		}
		if l.start == 0 && l.end == 0 {
			return nil, ErrIomemHidden
		}
		var parent iomemLine
		if l.depth > 0 {
			parent = parents[l.depth-1]
		}
		rg := Range{Start: l.start, End: l.end + 1}
		if n := len(devs); n > 0 && devs[n-1].Name == parent.name && devs[n-1].Start == parent.start {
			d := &devs[n-1]
			if last := &d.Ranges[len(d.Ranges)-1]; last.End == rg.Start {
				last.End = rg.End
			} else {
				d.Ranges = append(d.Ranges, rg)
			}
			continue
		}
		d := VirtioMemDevice{Name: parent.name, Start: parent.start, End: parent.end + 1, Ranges: []Range{rg}}
		if l.depth == 0 {
			d.Start, d.End = rg.Start, rg.End
		}
		devs = append(devs, d)
	}
	// The names show whoever reads: with no virtio-mem line there is no
	// virtio-mem memory, hidden addresses or not.
	return devs, nil
}

// parseIomemLine parses "  140000000-147ffffff : System RAM (virtio_mem)".
func parseIomemLine(line []byte) (iomemLine, error) {
	var l iomemLine
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	l.depth = i / 2
	rest := line[i:]
	dash := indexByteFrom(rest, '-', 0)
	colon := indexByteFrom(rest, ':', 0)
	if dash == len(rest) || colon == len(rest) || dash > colon {
		return iomemLine{}, fmt.Errorf("bad line %q", line)
	}
	var ok1, ok2 bool
	l.start, ok1 = parseUint(rest[:dash], 16)
	l.end, ok2 = parseUint(rest[dash+1:colon], 16)
	if !ok1 || !ok2 || l.end < l.start {
		return iomemLine{}, fmt.Errorf("bad range in line %q", line)
	}
	l.name = string(trimSpace(rest[colon+1:]))
	return l, nil
}
