package release

import (
	"fmt"
	"strings"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// Unplug says what the hypervisor may unplug now: per ACPI memory device,
// per virtio-mem device and per CPU. It is small and JSON-tagged for the
// local API; String is its one line for the Node's condition message.
type Unplug struct {
	// MemoryDevices are every ACPI memory device, by ID.
	MemoryDevices []DeviceState `json:"memoryDevices,omitempty"`
	// VirtioMem are the virtio-mem devices that hold released blocks.
	VirtioMem []VirtioMemState `json:"virtioMem,omitempty"`
	// CPUs are the released CPUs that are present and offline: the
	// hypervisor may unplug them.
	CPUs topology.CPUSet `json:"cpus,omitempty"`
}

// DeviceState is an ACPI memory device and how much of it is offline.
type DeviceState struct {
	ID    string `json:"id"` // "PNP0C80:01"
	Start uint64 `json:"start"`
	End   uint64 `json:"end"` // exclusive
	Size  uint64 `json:"sizeBytes"`
	// BlocksOffline of Blocks are offline.
	BlocksOffline int `json:"blocksOffline"`
	Blocks        int `json:"blocks"`
	// SafeToUnplug is true only when every block of the device is
	// offline: the guest then lets the hypervisor take it.
	SafeToUnplug bool `json:"safeToUnplug"`
}

// VirtioMemState is a virtio-mem device and the memory released from it:
// the host may lower its requested size by ReleasedBytes, and the driver
// gives back those offline blocks first.
type VirtioMemState struct {
	Name          string `json:"name"` // "virtio0"
	Blocks        []int  `json:"blocks"`
	ReleasedBytes uint64 `json:"releasedBytes"`
}

// Unpluggable reports, from the machine now and in.Released, what the
// hypervisor may unplug: each ACPI memory device with its offline blocks
// (safe to unplug only when all are offline, whoever offlined them), each
// virtio-mem device with the bytes of released blocks still offline in
// it, and the released CPUs still present and offline.
func Unpluggable(in Input) Unplug {
	var u Unplug
	if in.Machine == nil {
		return u
	}
	m := newMemMachine(in)
	for _, d := range m.dimmStates() {
		u.MemoryDevices = append(u.MemoryDevices, DeviceState{
			ID: d.dev.ID, Start: d.dev.Start, End: d.dev.End, Size: d.dev.Size,
			BlocksOffline: d.offline, Blocks: len(d.dev.Blocks),
			SafeToUnplug: len(d.dev.Blocks) > 0 && d.offline == len(d.dev.Blocks),
		})
	}
	released := map[int]bool{}
	for _, id := range in.Released.Blocks {
		released[id] = true
	}
	for _, v := range m.virtio {
		s := VirtioMemState{Name: v.Name}
		for _, id := range v.Blocks {
			if b, ok := m.blocks[id]; ok && released[id] && b.State == topology.BlockOffline {
				s.Blocks = append(s.Blocks, id)
			}
		}
		if len(s.Blocks) > 0 {
			s.ReleasedBytes = uint64(len(s.Blocks)) * m.blockSize
			u.VirtioMem = append(u.VirtioMem, s)
		}
	}
	present := in.Machine.CPUs.Present
	if present == nil {
		present = in.Machine.CPUs.Devices
	}
	var cpus []int
	for _, id := range in.Released.CPUs {
		if present.Contains(id) && !in.Machine.CPUs.Online.Contains(id) {
			cpus = append(cpus, id)
		}
	}
	u.CPUs = topology.NewCPUSet(cpus...)
	return u
}

// String is what is safe to unplug, in one line: "safe to unplug:
// PNP0C80:01 (1Gi at 0x140000000), virtio0 1Gi, CPUs 6-7"; "nothing safe
// to unplug" when there is nothing.
func (u Unplug) String() string {
	var parts []string
	for _, d := range u.MemoryDevices {
		if d.SafeToUnplug {
			parts = append(parts, fmt.Sprintf("%s (%s at %#x)", d.ID, resources.Format(resources.Memory, int64(d.Size)), d.Start))
		}
	}
	for _, v := range u.VirtioMem {
		parts = append(parts, fmt.Sprintf("%s %s", v.Name, resources.Format(resources.Memory, int64(v.ReleasedBytes))))
	}
	if len(u.CPUs) > 0 {
		parts = append(parts, "CPUs "+u.CPUs.String())
	}
	if len(parts) == 0 {
		return "nothing safe to unplug"
	}
	return "safe to unplug: " + strings.Join(parts, ", ")
}
