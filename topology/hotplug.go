package topology

import (
	"errors"
)

// Hotplug is what taking CPUs and memory offline, and telling the
// hypervisor what it may unplug, needs to know beyond a [Snapshot]: which
// CPUs can go offline and which share a core, which memory blocks form
// one device, and which blocks the kernel says it cannot remove. A rebuild
// never reads it; [FS.Hotplug] does, on demand. Like a Snapshot, it is
// never modified once returned and may be shared freely.
type Hotplug struct {
	// CPUs are every cpuN directory (see FS.HotplugCPUs).
	CPUs []HotplugCPU `json:"cpus"`
	// MemoryDevices are the ACPI memory devices (see FS.MemoryDevices).
	MemoryDevices []MemoryDevice `json:"memoryDevices"`
	// VirtioMem are the virtio-mem devices' memory (see FS.VirtioMem),
	// or, where procfs iomem hides its addresses, the blocks the firmware
	// memmap shows are virtio-mem's (see FS.VirtioMemFromMemmap).
	VirtioMem []VirtioMemDevice `json:"virtioMem"`
	// VirtioMemNote says what VirtioMem does not: that it is one group
	// of several devices' blocks, whose split is unknown. "" otherwise.
	VirtioMemNote string `json:"virtioMemNote,omitempty"`
	// VirtioMemError says why the virtio-mem memory is unknown (procfs
	// iomem hides its addresses from a reader without CAP_SYS_ADMIN,
	// and the firmware memmap cannot tell either); "" when VirtioMem is
	// known.
	VirtioMemError string `json:"virtioMemError,omitempty"`
	// NotRemovable are the blocks whose removable file reads 0 (see
	// FS.NotRemovable).
	NotRemovable []int `json:"notRemovable,omitempty"`
}

// Hotplug reads the CPUs' online files and siblings, the ACPI memory
// devices, the virtio-mem ranges and the blocks' removable files. The
// virtio-mem ranges come from procfs iomem, which names each device; where
// it hides its addresses (the daemon runs without CAP_SYS_ADMIN), from the
// firmware memmap and the virtio_mem driver's devices. When neither tells,
// VirtioMem is nil and VirtioMemError says why; any other failure is an
// error.
func (fs FS) Hotplug() (*Hotplug, error) {
	var h Hotplug
	var err error
	if h.CPUs, err = fs.HotplugCPUs(); err != nil {
		return nil, err
	}
	if h.MemoryDevices, err = fs.MemoryDevices(); err != nil {
		return nil, err
	}
	if h.VirtioMem, err = fs.VirtioMem(); err != nil {
		if !errors.Is(err, ErrIomemHidden) {
			return nil, err
		}
		var merr error
		h.VirtioMem, h.VirtioMemNote, merr = fs.VirtioMemFromMemmap()
		if merr != nil {
			if !errors.Is(merr, ErrDriverManagedUnknown) {
				return nil, merr
			}
			h.VirtioMem, h.VirtioMemError = nil, err.Error()+"; "+merr.Error()
		}
	}
	if h.NotRemovable, err = fs.NotRemovable(); err != nil {
		return nil, err
	}
	return &h, nil
}
