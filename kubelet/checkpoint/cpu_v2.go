package checkpoint

import (
	"fmt"
	"strings"
)

// CPUManagerV2 is the CPU manager's v2 layout: policyName, defaultCpuSet,
// entries, checksum. It is the oldest the kubelet loads.
const CPUManagerV2 = "v2"

// decodeCPUV2 takes a v2 checkpoint whose checksum matches, under the name
// CPUManagerCheckpointV2 or the legacy CPUManagerCheckpoint, or is 0 (the
// kubelet accepts that for the old file backend). The oldest layout, it
// refuses what is left; the state as written comes with the error.
func decodeCPUV2(f *cpuFile) (CPUManagerState, bool, error) {
	h := cpuV2Hash(f)
	if f.Checksum == 0 || uint64(h("CPUManagerCheckpointV2")) == f.Checksum || uint64(h("CPUManagerCheckpoint")) == f.Checksum {
		st, err := buildCPUState(CPUManagerV2, f.PolicyName, f.DefaultCPUSet, f.entries, nil)
		return st, true, err
	}
	pods, _ := decodePodEntries(f.PodEntries)
	st, err := buildCPUState(CPUManagerV2, f.PolicyName, f.DefaultCPUSet, f.entries, pods)
	if err != nil {
		return CPUManagerState{}, true, err
	}
	return st, true, fmt.Errorf("%w: checksum %d matches neither the v3 nor the v2 content (v2 hashes to %d)",
		ErrCorrupt, f.Checksum, h("CPUManagerCheckpoint"))
}

// cpuV2Hash returns the checksum of the v2 fields under a struct name.
func cpuV2Hash(f *cpuFile) func(name string) uint32 {
	return func(name string) uint32 {
		var b strings.Builder
		dumpCPUHead(&b, name, f)
		b.WriteString(" Checksum:(checksum.Checksum)0}")
		return fnv32a(b.String())
	}
}
