package checkpoint

import (
	"encoding/json"
	"fmt"
)

// MemoryManagerV3 is the memory manager's v3 layout, which kubelet v1.37
// writes: v1's fields for older kubelets, plus data (the whole state as a
// JSON string) and dataChecksum, which is authoritative. node-resized
// writes the legacy fields as v2 instead when a pod holds pod-level memory
// (see marshalMemoryV3).
const MemoryManagerV3 = "v3"

// memoryV3File is the kubelet's MemoryManagerCheckpoint (v3).
type memoryV3File struct {
	memoryV1File
	Data         string `json:"data"`
	DataChecksum uint64 `json:"dataChecksum"`
}

// memoryV3FileV2 is a v3 checkpoint whose legacy fields are v2's, with
// podEntries.
type memoryV3FileV2 struct {
	memoryV2File
	Data         string `json:"data"`
	DataChecksum uint64 `json:"dataChecksum"`
}

// memoryV3Data is the v3 data payload.
type memoryV3Data struct {
	PolicyName   string                              `json:"policyName"`
	MachineState map[int]*NUMANodeState              `json:"machineState"`
	Entries      map[string]map[string][]MemoryBlock `json:"entries,omitempty"`
	PodEntries   map[string]memoryPodEntry           `json:"podEntries,omitempty"`
}

// decodeMemoryV3 takes a v3 checkpoint whose data decodes and matches its
// dataChecksum, as the kubelet's UnmarshalCheckpoint and VerifyChecksum
// do. One with data or a dataChecksum that does not is refused: the
// kubelet does not fall back to an older layout then.
func decodeMemoryV3(b []byte) (MemoryManagerState, bool, error) {
	v3 := memoryV3File{memoryV1File: memoryV1File{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}}}
	err := json.Unmarshal(b, &v3)
	var d memoryV3Data
	if err == nil {
		d, err = v3.data()
	}
	if err == nil {
		return MemoryManagerState{Format: MemoryManagerV3, PolicyName: d.PolicyName, MachineState: d.MachineState,
			Containers: d.Entries, Pods: podBlocks(d.PodEntries)}, true, nil
	}
	if v3.Data != "" || v3.DataChecksum != 0 {
		return MemoryManagerState{}, true, fmt.Errorf("%w: v3: %w", ErrCorrupt, err)
	}
	return MemoryManagerState{}, false, nil
}

// data decodes and verifies the v3 data.
func (v3 *memoryV3File) data() (memoryV3Data, error) {
	d := memoryV3Data{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}, PodEntries: map[string]memoryPodEntry{}}
	if err := json.Unmarshal([]byte(v3.Data), &d); err != nil {
		return memoryV3Data{}, fmt.Errorf("data: %w", err)
	}
	if sum := dataChecksum(v3.Data); sum != v3.DataChecksum {
		return memoryV3Data{}, fmt.Errorf("dataChecksum %d does not match the data (%d)", v3.DataChecksum, sum)
	}
	return d, nil
}

// marshalMemoryV3 writes st as the kubelet's MarshalCheckpoint does for
// v3: the data with its checksum, and the legacy fields with theirs. The
// legacy fields are v1's, as v1.37 writes them, which every kubelet before
// v1.37 reads, unless a pod holds pod-level memory: v1 cannot hold it, and
// kubelet v1.36 with PodLevelResourceManagers, which reads the legacy
// fields as v2 and ignores data, would account the pod's containers
// instead of the pod and refuse to start (the machine state would not be
// the one it expects). They are then v2's, podEntries and the v2
// checksum, as v1.36 writes them.
func marshalMemoryV3(st MemoryManagerState) ([]byte, error) {
	d := memoryV3Data{PolicyName: st.PolicyName, MachineState: st.MachineState, Entries: st.Containers}
	if d.Entries == nil {
		d.Entries = map[string]map[string][]MemoryBlock{}
	}
	if st.Pods != nil {
		d.PodEntries = make(map[string]memoryPodEntry, len(st.Pods))
		for uid, blocks := range st.Pods {
			d.PodEntries[uid] = memoryPodEntry{MemoryBlocks: blocks}
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("marshal memory manager checkpoint data: %w", err)
	}
	v1 := memoryV1File{PolicyName: d.PolicyName, MachineState: d.MachineState, Entries: d.Entries}
	if len(d.PodEntries) == 0 {
		v1.Checksum = v1.hash()
		return json.Marshal(memoryV3File{memoryV1File: v1, Data: string(data), DataChecksum: dataChecksum(string(data))})
	}
	v2 := memoryV2File{memoryV1File: v1, PodEntries: d.PodEntries}
	v2.Checksum = v2.hash()
	return json.Marshal(memoryV3FileV2{memoryV2File: v2, Data: string(data), DataChecksum: dataChecksum(string(data))})
}
