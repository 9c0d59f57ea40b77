package topology

import "testing"

func TestIsLoss(t *testing.T) {
	snap := &Snapshot{
		CPUs: CPUs{Online: CPUSet{0, 1, 2, 5}, Offline: CPUSet{3, 4}},
		MemoryBlocks: []MemoryBlock{
			{ID: 0, State: BlockOnline},
			{ID: 7, State: BlockGoingOffline},
			{ID: 8, State: BlockOffline},
			{ID: 40, State: BlockOnline},
		},
	}
	for _, tc := range []struct {
		name string
		snap *Snapshot
		dev  Device
		want bool
	}{
		{"online CPU", snap, Device{DeviceCPU, 1}, true},
		{"last online CPU", snap, Device{DeviceCPU, 5}, true},
		{"CPU already offline", snap, Device{DeviceCPU, 3}, false},
		{"CPU the model does not know", snap, Device{DeviceCPU, 64}, false},
		{"online block", snap, Device{DeviceMemory, 0}, true},
		{"block going offline", snap, Device{DeviceMemory, 7}, true},
		{"block already offline", snap, Device{DeviceMemory, 8}, false},
		{"last block", snap, Device{DeviceMemory, 40}, true},
		{"block between known ones", snap, Device{DeviceMemory, 9}, false},
		{"block past the last", snap, Device{DeviceMemory, 41}, false},
		{"block id of an online CPU", snap, Device{DeviceMemory, 1}, false},
		{"CPU id of an online block", snap, Device{DeviceCPU, 40}, false},
		{"node", snap, Device{DeviceNode, 0}, false},
		{"other device", snap, Device{DeviceOther, 0}, false},
		{"no model", nil, Device{DeviceCPU, 0}, false},
		{"model without blocks", &Snapshot{CPUs: CPUs{Online: CPUSet{0}}}, Device{DeviceMemory, 0}, false},
		{"model without online CPUs", &Snapshot{}, Device{DeviceCPU, 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsLoss(tc.snap, tc.dev); got != tc.want {
				t.Errorf("IsLoss(%s) = %v, want %v", tc.dev, got, tc.want)
			}
		})
	}
}
