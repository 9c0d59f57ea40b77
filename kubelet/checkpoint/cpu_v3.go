package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// CPUManagerV3 is the CPU manager's v3 layout: v2 with podEntries (the
// pod-level resource managers).
const CPUManagerV3 = "v3"

// decodeCPUV3 takes a v3 checkpoint whose checksum matches, under the name
// CPUManagerCheckpointV3 or the legacy CPUManagerCheckpoint. A podEntries
// the kubelet cannot decode sends it to v2, which ignores them.
func decodeCPUV3(f *cpuFile) (CPUManagerState, bool, error) {
	pods, err := decodePodEntries(f.PodEntries)
	if err != nil {
		return CPUManagerState{}, false, nil
	}
	h := cpuV3Hash(f, pods)
	if uint64(h("CPUManagerCheckpointV3")) != f.Checksum && uint64(h("CPUManagerCheckpoint")) != f.Checksum {
		return CPUManagerState{}, false, nil
	}
	st, err := buildCPUState(CPUManagerV3, f.PolicyName, f.DefaultCPUSet, f.entries, pods)
	return st, true, err
}

type cpuPodEntry struct {
	CPUSet string `json:"cpuSet,omitempty"`
}

// decodePodEntries decodes podEntries into pod UID → CPU list (nil for a
// JSON null); an entry whose list does not parse is an error, as in the
// kubelet's PodEntry.
func decodePodEntries(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 {
		return map[string]string{}, nil
	}
	var pe map[string]*cpuPodEntry
	if err := json.Unmarshal(raw, &pe); err != nil {
		return nil, err
	}
	if pe == nil {
		return nil, nil
	}
	m := make(map[string]string, len(pe))
	for uid, e := range pe {
		s := ""
		if e != nil {
			s = e.CPUSet
		}
		if _, err := parseCPUSet(s); err != nil {
			return nil, fmt.Errorf("pod %s: %w", uid, err)
		}
		m[uid] = s
	}
	return m, nil
}

// cpuV3Hash returns the checksum of the v3 fields under a struct name.
func cpuV3Hash(f *cpuFile, pods map[string]string) func(name string) uint32 {
	return func(name string) uint32 {
		var b strings.Builder
		dumpCPUHead(&b, name, f)
		b.WriteString(" PodEntries:(state.PodCPUAssignments)")
		dumpMap(&b, pods, func(uid, list string) {
			set, _ := parseCPUSet(list)
			b.WriteString(uid + ":{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[")
			for j, c := range set {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(strconv.Itoa(c) + ":{}")
			}
			b.WriteString("]}}")
		})
		b.WriteString(" Checksum:(checksum.Checksum)0}")
		return fnv32a(b.String())
	}
}
