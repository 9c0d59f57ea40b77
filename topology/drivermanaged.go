package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDriverManagedUnknown is wrapped by the errors of
// [FS.DriverManagedBlocks] and [FS.VirtioMemFromMemmap] when the machine
// does not say which memory is driver-managed: unknown, not none.
var ErrDriverManagedUnknown = errors.New("which memory is driver-managed is unknown")

// DriverManagedBlocks returns the memory blocks, ascending, whose
// addresses (id × memory/block_size_bytes) overlap no "System RAM" entry
// of /sys/firmware/memmap: memory a driver added with
// add_memory_driver_managed (virtio-mem, dax/kmem), for which the kernel
// adds no entry, while boot memory is in the firmware's map and every
// other hot-add gets one (add_memory_resource, mm/memory_hotplug.c). Root
// reads it without CAP_SYS_ADMIN.
//
// When the memmap cannot tell, the error wraps ErrDriverManagedUnknown:
// no memmap directory (also wrapping ErrNoFirmwareMemmap: every
// architecture but x86), or a memmap with no System RAM over the lowest
// block, which is boot memory on every machine (a kernel that exports
// only hot-added entries: CONFIG_FIRMWARE_MEMMAP off x86). No memory
// blocks is none.
func (fs FS) DriverManagedBlocks() ([]int, error) {
	ids, err := fs.blockIDs()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	blockSize, err := fs.blockSize()
	if err != nil {
		return nil, err
	}
	es, err := fs.FirmwareMemmap()
	if err != nil {
		if errors.Is(err, ErrNoFirmwareMemmap) {
			return nil, fmt.Errorf("%w: %w", ErrDriverManagedUnknown, err)
		}
		return nil, err
	}
	return driverManaged(ids, blockSize, es)
}

// driverManaged returns the ids (ascending) whose blocks overlap no
// System RAM entry of es; the lowest must overlap one.
func driverManaged(ids []int, blockSize uint64, es []MemmapEntry) ([]int, error) {
	var out []int
	for i, id := range ids {
		start := uint64(id) * blockSize
		if overlapsRAM(es, start, start+blockSize) {
			continue
		}
		if i == 0 {
			return nil, fmt.Errorf("%w: /sys/firmware/memmap has no System RAM over memory%d, the lowest block: it does not show boot memory", ErrDriverManagedUnknown, id)
		}
		out = append(out, id)
	}
	return out, nil
}

// blockIDs returns the ids of the memoryN directories, ascending; none
// when there is no memory directory.
func (fs FS) blockIDs() ([]int, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	r := getReader()
	defer putReader(r)
	var ids []int
	err := r.scan(r.at(fs.memDir, -1, ""), func(name []byte) {
		if id, ok := numberedName(name, "memory"); ok {
			ids = append(ids, id)
		}
	})
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// VirtioMemFromMemmap finds the virtio-mem devices' memory blocks where
// /proc/iomem hides its addresses: with a virtio-mem device bound to its
// driver (see FS.VirtioMemDevices) and no dax device bound to kmem (the
// other driver that adds driver-managed memory), the driver-managed blocks
// (see FS.DriverManagedBlocks) are virtio-mem's. They come as one
// VirtioMemDevice whose Ranges are the runs of blocks and whose Start and
// End bound them (the device's region is only in /proc/iomem). It is named
// after the device when one is bound; with several, which holds which
// block is unknown: the group is named "virtio_mem" and note says so. No
// device bound is no virtio-mem memory, whatever the memmap says.
//
// When the blocks cannot be told, the error wraps ErrDriverManagedUnknown.
func (fs FS) VirtioMemFromMemmap() (devs []VirtioMemDevice, note string, err error) {
	names, err := fs.VirtioMemDevices()
	if err != nil || len(names) == 0 {
		return nil, "", err
	}
	kmem, err := fs.KmemDevices()
	if err != nil {
		return nil, "", err
	}
	if len(kmem) > 0 {
		return nil, "", fmt.Errorf("%w: dax devices bound to kmem (%s) add driver-managed memory too, and only /proc/iomem tells theirs from virtio-mem's", ErrDriverManagedUnknown, strings.Join(kmem, ", "))
	}
	blocks, err := fs.DriverManagedBlocks()
	if err != nil || len(blocks) == 0 {
		return nil, "", err
	}
	blockSize, err := fs.blockSize()
	if err != nil {
		return nil, "", err
	}
	devs, note = virtioMemGroup(names, blocks, blockSize)
	return devs, note, nil
}

// virtioMemGroup returns blocks (ascending) as the memory of the virtio-mem
// devices names, and the note that says when the split among them is
// unknown.
func virtioMemGroup(names []string, blocks []int, blockSize uint64) ([]VirtioMemDevice, string) {
	d := VirtioMemDevice{Name: names[0], Blocks: slices.Clone(blocks)}
	for _, id := range blocks {
		rg := Range{Start: uint64(id) * blockSize, End: uint64(id+1) * blockSize}
		if n := len(d.Ranges); n > 0 && d.Ranges[n-1].End == rg.Start {
			d.Ranges[n-1].End = rg.End
		} else {
			d.Ranges = append(d.Ranges, rg)
		}
	}
	d.Start, d.End = d.Ranges[0].Start, d.Ranges[len(d.Ranges)-1].End
	var note string
	if len(names) > 1 {
		d.Name = VirtioMemDriver
		note = fmt.Sprintf("the blocks of virtio-mem devices %s are reported as one group, %q: which device holds which block is only in /proc/iomem, whose addresses are hidden without CAP_SYS_ADMIN", strings.Join(names, ", "), VirtioMemDriver)
	}
	return []VirtioMemDevice{d}, note
}
