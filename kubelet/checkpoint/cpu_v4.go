package checkpoint

import (
	"encoding/json"
	"fmt"
)

// CPUManagerV4 is the CPU manager's v4 layout, which kubelet v1.37 writes:
// v2's fields for older kubelets, plus data (the whole state as a JSON
// string) and dataChecksum, which is authoritative. node-resized writes
// the legacy fields as v3 instead when a pod holds pod-level CPUs (see
// marshalCPUV4).
const CPUManagerV4 = "v4"

// cpuV4Data is the v4 data payload, the kubelet's CPUManagerCheckpointData
// without its baselines, which only a plan reads (cpuBaselines).
type cpuV4Data struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	PodEntries    map[string]cpuPodEntry       `json:"podEntries,omitempty"`
}

// cpuV4DataOut is CPUManagerCheckpointData, field for field, as written.
type cpuV4DataOut struct {
	cpuV4Data
	Baselines map[string]map[string]cpuBaseline `json:"baselines,omitempty"`
}

// cpuBaseline is the CPUs a container was admitted with, kept for an
// in-place resize.
type cpuBaseline struct {
	Baseline string `json:"baseline"`
}

// cpuV4File is the kubelet's CPUManagerCheckpoint (v4) as it marshals it,
// with the v3 podEntries that node-resized adds to the legacy fields.
type cpuV4File struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	PodEntries    map[string]cpuPodEntry       `json:"podEntries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
	Data          string                       `json:"data"`
	DataChecksum  uint64                       `json:"dataChecksum"`
}

// decodeCPUV4 takes a checkpoint with data or a dataChecksum, and refuses
// it when either is wrong: the kubelet does not fall back to an older
// layout then.
func decodeCPUV4(f *cpuFile) (CPUManagerState, bool, error) {
	if f.Data == "" && f.DataChecksum == 0 {
		return CPUManagerState{}, false, nil
	}
	var d cpuV4Data
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return CPUManagerState{}, true, fmt.Errorf("%w: v4 data: %w", ErrCorrupt, err)
	}
	pods := make(map[string]string, len(d.PodEntries))
	for uid, pe := range d.PodEntries {
		pods[uid] = pe.CPUSet
	}
	st, err := buildCPUState(CPUManagerV4, d.PolicyName, d.DefaultCPUSet, d.Entries, pods)
	if err != nil {
		return CPUManagerState{}, true, err
	}
	if sum := dataChecksum(f.Data); sum != f.DataChecksum {
		return st, true, fmt.Errorf("%w: dataChecksum %d does not match the data (%d)", ErrCorrupt, f.DataChecksum, sum)
	}
	return st, true, nil
}

// cpuBaselines returns the v4 data's baselines, nil in older layouts.
func cpuBaselines(b []byte, format string) (map[string]map[string]cpuBaseline, error) {
	if format != CPUManagerV4 {
		return nil, nil
	}
	var f struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	var d struct {
		Baselines map[string]map[string]cpuBaseline `json:"baselines"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return nil, err
	}
	return d.Baselines, nil
}

// marshalCPUV4 writes st as the kubelet's MarshalCheckpoint does for v4:
// the data with its checksum, and the legacy fields with theirs. The
// legacy fields are v2's, as v1.37 writes them, which every kubelet before
// v1.37 reads, unless a pod holds pod-level CPUs: v2 cannot hold those, and
// kubelet v1.36 with PodLevelResourceManagers, which reads the legacy
// fields as v3 and ignores data, would load the state without them and
// refuse to start (its CPUs in the state would not be the machine's). They
// are then v3's, podEntries and the v3 checksum under the legacy name, as
// v1.36 writes them. (A kubelet without pod-level resource managers could
// not start on such a state in any layout.)
func marshalCPUV4(st CPUManagerState, baselines map[string]map[string]cpuBaseline) ([]byte, error) {
	d := cpuV4DataOut{cpuV4Data: cpuV4Data{PolicyName: st.PolicyName, DefaultCPUSet: cpuString(st.DefaultCPUSet),
		Entries: map[string]map[string]string{}}, Baselines: baselines}
	for uid, containers := range st.Containers {
		d.Entries[uid] = make(map[string]string, len(containers))
		for name, set := range containers {
			d.Entries[uid][name] = cpuString(set)
		}
	}
	if st.Pods != nil {
		d.PodEntries = make(map[string]cpuPodEntry, len(st.Pods))
		for uid, set := range st.Pods {
			d.PodEntries[uid] = cpuPodEntry{CPUSet: cpuString(set)}
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("marshal CPU manager checkpoint data: %w", err)
	}
	f := cpuV4File{PolicyName: d.PolicyName, DefaultCPUSet: d.DefaultCPUSet, Entries: d.Entries,
		Data: string(data), DataChecksum: dataChecksum(string(data))}
	legacy := &cpuFile{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, entries: d.Entries}
	if len(d.PodEntries) == 0 {
		f.Checksum = uint64(cpuV2Hash(legacy)("CPUManagerCheckpoint"))
		return json.Marshal(f)
	}
	f.PodEntries = d.PodEntries
	pods := make(map[string]string, len(d.PodEntries))
	for uid, e := range d.PodEntries {
		pods[uid] = e.CPUSet
	}
	f.Checksum = uint64(cpuV3Hash(legacy, pods)("CPUManagerCheckpoint"))
	return json.Marshal(f)
}
