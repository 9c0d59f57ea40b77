package types

import (
	"fmt"
	"slices"
	"strings"

	"github.com/node-resized/node-resized/resources"
)

// ReleaseReport is the releaser's word on the planned release (or the give
// back) of one generation: what node-resized took offline, and what is now
// safe to unplug. It is a plain value, safe for concurrent reads.
type ReleaseReport struct {
	// Generation is the Release.Generation (or GiveBack.Generation) the
	// report is about; a report for another generation is ignored.
	Generation int64 `json:"generation"`
	// GiveBack says that the report is about a give back, not a release.
	GiveBack bool `json:"giveBack,omitempty"`
	// Done is true once the release (or give back) has gone as far as it
	// can: every CPU and memory block it chose is offline (onlined), or was
	// skipped for the reason Short gives.
	Done bool `json:"done,omitempty"`
	// Short says what could not be released (or given back) and why; empty
	// when the target was reached.
	Short string `json:"short,omitempty"`
}

// Released is what node-resized holds offline after a planned release,
// and what of it the hypervisor may now remove. It is a plain value, safe
// for concurrent reads.
type Released struct {
	// Spec is the configured capacity's Key the release was made for.
	Spec string `json:"spec,omitempty"`
	// CPUs are the CPUs node-resized took offline that are still present.
	CPUs []int `json:"cpus,omitempty"`
	// Blocks are the memory blocks node-resized took offline that are
	// still present.
	Blocks []int `json:"blocks,omitempty"`
	// Devices are the memory devices with a block among Blocks.
	Devices []ReleasedDevice `json:"devices,omitempty"`
}

// ReleasedDevice is one memory device (an ACPI memory device such as a
// QEMU pc-dimm, or a virtio-mem device's memory) with blocks that
// node-resized took offline.
type ReleasedDevice struct {
	// ID is the ACPI device (for example "PNP0C80:01"), or
	// "virtio_mem:" and the virtio device (virtio_mem:virtio0) for
	// virtio-mem memory, which its driver gives back to the host itself
	// once its requested size is lowered.
	ID string `json:"id"`
	// Start and End are the physical address range, End exclusive.
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	// Size is End-Start in bytes.
	Size int64 `json:"size"`
	// Offline and Blocks count its memory blocks offline, and in all.
	Offline int `json:"offline"`
	Blocks  int `json:"blocks"`
	// SafeToUnplug is true when every block of the device is offline:
	// only then does an eject (QEMU device_del) find nothing to migrate.
	SafeToUnplug bool `json:"safeToUnplug"`
}

// Empty reports whether nothing is held released.
func (r Released) Empty() bool { return len(r.CPUs) == 0 && len(r.Blocks) == 0 }

// Summary says in a line what is held released and what of it is safe to
// unplug, for the condition's message and the event: "cpus 2-3; memory
// PNP0C80:01 [0x240000000-0x280000000) 1Gi, 8/8 blocks offline, safe to
// unplug". Empty when nothing is held.
func (r Released) Summary() string {
	var parts []string
	if len(r.CPUs) > 0 {
		parts = append(parts, "cpus "+cpuRanges(r.CPUs))
	}
	for _, d := range r.Devices {
		s := fmt.Sprintf("memory %s [%#x-%#x) %s, %d/%d blocks offline", d.ID, d.Start, d.End, resources.Format(resources.Memory, d.Size), d.Offline, d.Blocks)
		if d.SafeToUnplug {
			s += ", safe to unplug"
		}
		parts = append(parts, s)
	}
	if n := len(r.Blocks) - devicesBlocks(r.Devices); n > 0 {
		parts = append(parts, fmt.Sprintf("%d memory blocks of no memory device", n))
	}
	return strings.Join(parts, "; ")
}

// devicesBlocks counts the released blocks the devices account for.
func devicesBlocks(ds []ReleasedDevice) int {
	n := 0
	for _, d := range ds {
		n += d.Offline
	}
	return n
}

// cpuRanges writes sorted CPU ids as the kernel's lists do: "2-3,6".
func cpuRanges(ids []int) string {
	s := slices.Sorted(slices.Values(ids))
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		} else {
			fmt.Fprintf(&b, "%d", s[i])
		}
		i = j + 1
	}
	return b.String()
}
