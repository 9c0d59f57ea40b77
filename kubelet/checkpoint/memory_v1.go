package checkpoint

import (
	"encoding/json"
	"fmt"
	"strings"
)

// MemoryManagerV1 is the memory manager's v1 layout: policyName,
// machineState, entries, checksum. It is the oldest the kubelet loads.
const MemoryManagerV1 = "v1"

// memoryV1File is the kubelet's MemoryManagerCheckpointV1.
type memoryV1File struct {
	PolicyName   string                              `json:"policyName"`
	MachineState map[int]*NUMANodeState              `json:"machineState"`
	Entries      map[string]map[string][]MemoryBlock `json:"entries,omitempty"`
	Checksum     uint64                              `json:"checksum"`
}

// decodeMemoryV1 takes a v1 checkpoint whose checksum matches or is 0.
// The oldest layout, it refuses what is left.
func decodeMemoryV1(b []byte) (MemoryManagerState, bool, error) {
	v1 := memoryV1File{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}}
	if err := json.Unmarshal(b, &v1); err != nil {
		return MemoryManagerState{}, true, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if sum := v1.hash(); v1.Checksum != 0 && sum != v1.Checksum {
		return MemoryManagerState{}, true, fmt.Errorf("%w: checksum %d matches neither the v2 nor the v1 content (v1 hashes to %d)",
			ErrCorrupt, v1.Checksum, sum)
	}
	return MemoryManagerState{Format: MemoryManagerV1, PolicyName: v1.PolicyName, MachineState: v1.MachineState,
		Containers: v1.Entries}, true, nil
}

func (v1 *memoryV1File) hash() uint64 {
	var b strings.Builder
	dumpMemoryHead(&b, v1.PolicyName, v1.MachineState, v1.Entries)
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return uint64(fnv32a(b.String()))
}
