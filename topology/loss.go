package topology

import (
	"cmp"
	"slices"
)

// IsLoss says whether an event that takes dev away (an offline or a
// remove uevent of it) takes capacity from the model snap: dev is a CPU
// that snap has online, or a memory block that snap has online or going
// offline. A device that snap has offline already (a block removed after
// it went offline, a stale or forged message), one it does not know, a
// NUMA node or any other device is no loss; nor is anything without a
// model.
//
// It is a pure function of its arguments, so the detection loop can ask it
// of every uevent without reading sysfs.
func IsLoss(snap *Snapshot, dev Device) bool {
	if snap == nil {
		return false
	}
	switch dev.Kind {
	case DeviceCPU:
		return snap.CPUs.Online.Contains(dev.ID)
	case DeviceMemory:
		blocks := snap.MemoryBlocks
		i, ok := slices.BinarySearchFunc(blocks, dev.ID, func(b MemoryBlock, id int) int { return cmp.Compare(b.ID, id) })
		return ok && blocks[i].State != BlockOffline
	}
	return false
}
