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
	// VirtioMem are the virtio-mem devices' memory (see FS.VirtioMem).
	VirtioMem []VirtioMemDevice `json:"virtioMem"`
	// VirtioMemError says why the virtio-mem memory is unknown (procfs
	// iomem hides its addresses from a reader that is not root); "" when
	// VirtioMem is known.
	VirtioMemError string `json:"virtioMemError,omitempty"`
	// NotRemovable are the blocks whose removable file reads 0 (see
	// FS.NotRemovable).
	NotRemovable []int `json:"notRemovable,omitempty"`
}

// Hotplug reads the CPUs' online files and siblings, the ACPI memory
// devices, the virtio-mem ranges and the blocks' removable files. Hidden
// iomem addresses leave VirtioMem nil and say so in VirtioMemError; any
// other failure is an error.
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
		h.VirtioMem, h.VirtioMemError = nil, err.Error()
	}
	if h.NotRemovable, err = fs.NotRemovable(); err != nil {
		return nil, err
	}
	return &h, nil
}
