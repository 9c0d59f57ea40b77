package checkpoint

import (
	"encoding/json"
	"strings"
)

// MemoryManagerV2 is the memory manager's v2 layout: v1 with podEntries.
const MemoryManagerV2 = "v2"

// memoryV2File is the kubelet's MemoryManagerCheckpointV2: v1's fields
// and podEntries (only ever decoded, so their order does not matter).
type memoryV2File struct {
	memoryV1File
	PodEntries map[string]memoryPodEntry `json:"podEntries,omitempty"`
}

// decodeMemoryV2 takes a v2 checkpoint whose checksum matches; anything
// else the kubelet tries as v1.
func decodeMemoryV2(b []byte) (MemoryManagerState, bool, error) {
	v2 := memoryV2File{memoryV1File: memoryV1File{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}},
		PodEntries: map[string]memoryPodEntry{}}
	if err := json.Unmarshal(b, &v2); err != nil || v2.hash() != v2.Checksum {
		return MemoryManagerState{}, false, nil
	}
	return MemoryManagerState{Format: MemoryManagerV2, PolicyName: v2.PolicyName, MachineState: v2.MachineState,
		Containers: v2.Entries, Pods: podBlocks(v2.PodEntries)}, true, nil
}

func (v2 *memoryV2File) hash() uint64 {
	var b strings.Builder
	dumpMemoryHead(&b, v2.PolicyName, v2.MachineState, v2.Entries)
	b.WriteString(" PodEntries:(state.PodMemoryAssignments)")
	dumpMap(&b, v2.PodEntries, func(uid string, e memoryPodEntry) {
		b.WriteString(uid + ":{MemoryBlocks:([]state.Block)")
		dumpBlocks(&b, e.MemoryBlocks)
		b.WriteString("}")
	})
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return uint64(fnv32a(b.String()))
}
