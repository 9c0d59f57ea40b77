package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// DefaultMemoryManagerPath is where the kubelet keeps its memory
// manager's state (<root-dir>/memory_manager_state).
const DefaultMemoryManagerPath = "/var/lib/kubelet/memory_manager_state"

// Memory manager checkpoint layouts, as the kubelet names its
// MemoryManagerCheckpoint versions.
const (
	// MemoryManagerV1: policyName, machineState, entries, checksum.
	MemoryManagerV1 = "v1"
	// MemoryManagerV2: v1 with podEntries.
	MemoryManagerV2 = "v2"
	// MemoryManagerV3: v1 for older kubelets, plus data (the whole state
	// as a JSON string) and dataChecksum, which is authoritative.
	MemoryManagerV3 = "v3"
)

// MemoryTable is one memory type of one NUMA node in the memory manager's
// machine state (the kubelet's state.MemoryTable), in bytes.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is one NUMA node of the machine state (state.NUMANodeState).
type NUMANodeState struct {
	NumberOfAssignments int                     `json:"numberOfAssignments"`
	MemoryMap           map[string]*MemoryTable `json:"memoryMap"`
	// Cells is the group of NUMA nodes the node's assignments span.
	Cells []int `json:"cells"`
}

// MemoryBlock is memory of one type assigned on a set of NUMA nodes
// (state.Block).
type MemoryBlock struct {
	NUMAAffinity []int  `json:"numaAffinity"`
	Type         string `json:"type"`
	Size         uint64 `json:"size"`
}

// MemoryManagerState is the memory manager's checkpoint as the kubelet
// reads it. It is a plain value, safe for concurrent reads.
type MemoryManagerState struct {
	// Format is the layout the kubelet would load: MemoryManagerV1, V2
	// or V3.
	Format     string `json:"format"`
	PolicyName string `json:"policyName"`
	// MachineState maps NUMA node id → its memory as the kubelet accounts
	// for it.
	MachineState map[int]*NUMANodeState `json:"machineState"`
	// Containers maps pod UID → container name → its memory blocks (the
	// checkpoint's entries).
	Containers map[string]map[string][]MemoryBlock `json:"containers,omitempty"`
	// Pods maps pod UID → the pod-level memory blocks (podEntries).
	Pods map[string][]MemoryBlock `json:"pods,omitempty"`
}

// The layouts as the kubelet's structs decode them: nil and empty are told
// apart because the checksums tell them apart.
type (
	mmV1 struct {
		PolicyName   string                              `json:"policyName"`
		MachineState map[int]*NUMANodeState              `json:"machineState"`
		Entries      map[string]map[string][]MemoryBlock `json:"entries,omitempty"`
		Checksum     uint64                              `json:"checksum"`
	}
	mmV2 struct {
		PolicyName   string                              `json:"policyName"`
		MachineState map[int]*NUMANodeState              `json:"machineState"`
		Entries      map[string]map[string][]MemoryBlock `json:"entries,omitempty"`
		PodEntries   map[string]mmPodEntry               `json:"podEntries,omitempty"`
		Checksum     uint64                              `json:"checksum"`
	}
	mmV3 struct {
		mmV1
		Data         string `json:"data"`
		DataChecksum uint64 `json:"dataChecksum"`
	}
	mmData struct {
		PolicyName   string                              `json:"policyName"`
		MachineState map[int]*NUMANodeState              `json:"machineState"`
		Entries      map[string]map[string][]MemoryBlock `json:"entries,omitempty"`
		PodEntries   map[string]mmPodEntry               `json:"podEntries,omitempty"`
	}
	mmPodEntry struct {
		MemoryBlocks []MemoryBlock `json:"memoryBlocks,omitempty"`
	}
)

// ReadMemoryManager reads the memory manager's checkpoint at
// path ("" means DefaultMemoryManagerPath) as kubelet v1.37 loads
// it: v3 when the file has data or a dataChecksum (then its dataChecksum
// must match), otherwise v2 and then v1, each with the kubelet's checksum
// (a v1 checksum of 0 is accepted, as the kubelet accepts it). A missing
// file gives an error wrapping fs.ErrNotExist; one the kubelet would refuse
// an error wrapping ErrCorrupt.
func ReadMemoryManager(path string) (MemoryManagerState, error) {
	if path == "" {
		path = DefaultMemoryManagerPath
	}
	b, err := readCheckpointFile(path)
	if err != nil {
		return MemoryManagerState{}, fmt.Errorf("memory manager checkpoint: %w", err)
	}
	st, err := ParseMemoryManager(b)
	if err != nil {
		return MemoryManagerState{}, fmt.Errorf("memory manager checkpoint %s: %w", path, err)
	}
	return st, nil
}

// ParseMemoryManager parses the contents of a memory manager
// checkpoint; see ReadMemoryManager.
func ParseMemoryManager(b []byte) (MemoryManagerState, error) {
	v3 := mmV3{mmV1: mmV1{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}}}
	err3 := json.Unmarshal(b, &v3)
	var d mmData
	if err3 == nil {
		d, err3 = parseV3(&v3)
	}
	if err3 == nil {
		return MemoryManagerState{Format: MemoryManagerV3, PolicyName: d.PolicyName, MachineState: d.MachineState,
			Containers: d.Entries, Pods: podBlocks(d.PodEntries)}, nil
	}
	if v3.Data != "" || v3.DataChecksum != 0 {
		return MemoryManagerState{}, fmt.Errorf("%w: v3: %w", ErrCorrupt, err3)
	}
	v2 := mmV2{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}, PodEntries: map[string]mmPodEntry{}}
	err2 := json.Unmarshal(b, &v2)
	if err2 == nil && v2.hash() == v2.Checksum {
		return v2.state(), nil
	}
	v1 := mmV1{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}}
	if err := json.Unmarshal(b, &v1); err != nil {
		return MemoryManagerState{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if sum := v1.hash(); v1.Checksum != 0 && sum != v1.Checksum {
		return MemoryManagerState{}, fmt.Errorf("%w: checksum %d matches neither the v2 nor the v1 content (v1 hashes to %d)",
			ErrCorrupt, v1.Checksum, sum)
	}
	return MemoryManagerState{Format: MemoryManagerV1, PolicyName: v1.PolicyName, MachineState: v1.MachineState,
		Containers: v1.Entries}, nil
}

// parseV3 decodes and verifies the v3 data, as the kubelet's
// UnmarshalCheckpoint and VerifyChecksum do.
func parseV3(v3 *mmV3) (mmData, error) {
	d := mmData{MachineState: map[int]*NUMANodeState{}, Entries: map[string]map[string][]MemoryBlock{}, PodEntries: map[string]mmPodEntry{}}
	if err := json.Unmarshal([]byte(v3.Data), &d); err != nil {
		return mmData{}, fmt.Errorf("data: %w", err)
	}
	if sum := uint64(fnv32a("(string)" + v3.Data)); sum != v3.DataChecksum {
		return mmData{}, fmt.Errorf("dataChecksum %d does not match the data (%d)", v3.DataChecksum, sum)
	}
	return d, nil
}

func (v2 *mmV2) state() MemoryManagerState {
	return MemoryManagerState{Format: MemoryManagerV2, PolicyName: v2.PolicyName, MachineState: v2.MachineState,
		Containers: v2.Entries, Pods: podBlocks(v2.PodEntries)}
}

func podBlocks(m map[string]mmPodEntry) map[string][]MemoryBlock {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]MemoryBlock, len(m))
	for uid, e := range m {
		out[uid] = e.MemoryBlocks
	}
	return out
}

// The memory manager's checksums are fnv32a over the go-spew dump
// (dump.ForHash) of the checkpoint struct, its name written as
// "MemoryManagerCheckpoint" whatever the version. The dumps are reproduced
// here; test/kubeletparity holds them against the kubelet's.

func (v1 *mmV1) hash() uint64 {
	var b strings.Builder
	b.WriteString("(*state.MemoryManagerCheckpoint){PolicyName:(string)" + v1.PolicyName + " MachineState:(state.NUMANodeMap)")
	dumpMachineState(&b, v1.MachineState)
	b.WriteString(" Entries:(state.ContainerMemoryAssignments)")
	dumpContainerBlocks(&b, v1.Entries)
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return uint64(fnv32a(b.String()))
}

func (v2 *mmV2) hash() uint64 {
	var b strings.Builder
	b.WriteString("(*state.MemoryManagerCheckpoint){PolicyName:(string)" + v2.PolicyName + " MachineState:(state.NUMANodeMap)")
	dumpMachineState(&b, v2.MachineState)
	b.WriteString(" Entries:(state.ContainerMemoryAssignments)")
	dumpContainerBlocks(&b, v2.Entries)
	b.WriteString(" PodEntries:(state.PodMemoryAssignments)")
	if v2.PodEntries == nil {
		b.WriteString("<nil>")
	} else {
		b.WriteString("map[")
		for i, uid := range slices.Sorted(maps.Keys(v2.PodEntries)) {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(uid + ":{MemoryBlocks:([]state.Block)")
			dumpBlocks(&b, v2.PodEntries[uid].MemoryBlocks)
			b.WriteString("}")
		}
		b.WriteString("]")
	}
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return uint64(fnv32a(b.String()))
}

func dumpMachineState(b *strings.Builder, ms map[int]*NUMANodeState) {
	if ms == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, id := range slices.Sorted(maps.Keys(ms)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(id) + ":")
		n := ms[id]
		if n == nil {
			b.WriteString("<nil>")
			continue
		}
		b.WriteString("<*>{NumberOfAssignments:(int)" + strconv.Itoa(n.NumberOfAssignments) +
			" MemoryMap:(map[v1.ResourceName]*state.MemoryTable)")
		dumpMemoryMap(b, n.MemoryMap)
		b.WriteString(" Cells:([]int)")
		dumpInts(b, n.Cells)
		b.WriteString("}")
	}
	b.WriteString("]")
}

func dumpMemoryMap(b *strings.Builder, m map[string]*MemoryTable) {
	if m == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, name := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(name + ":")
		t := m[name]
		if t == nil {
			b.WriteString("<nil>")
			continue
		}
		fmt.Fprintf(b, "<*>{TotalMemSize:(uint64)%d SystemReserved:(uint64)%d Allocatable:(uint64)%d Reserved:(uint64)%d Free:(uint64)%d}",
			t.TotalMemSize, t.SystemReserved, t.Allocatable, t.Reserved, t.Free)
	}
	b.WriteString("]")
}

func dumpContainerBlocks(b *strings.Builder, m map[string]map[string][]MemoryBlock) {
	if m == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, uid := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(uid + ":")
		if m[uid] == nil {
			b.WriteString("<nil>")
			continue
		}
		b.WriteString("map[")
		for j, name := range slices.Sorted(maps.Keys(m[uid])) {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(name + ":")
			dumpBlocks(b, m[uid][name])
		}
		b.WriteString("]")
	}
	b.WriteString("]")
}

func dumpBlocks(b *strings.Builder, blocks []MemoryBlock) {
	if blocks == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("[")
	for i, blk := range blocks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("{NUMAAffinity:([]int)")
		dumpInts(b, blk.NUMAAffinity)
		b.WriteString(" Type:(v1.ResourceName)" + blk.Type + " Size:(uint64)" + strconv.FormatUint(blk.Size, 10) + "}")
	}
	b.WriteString("]")
}

func dumpInts(b *strings.Builder, s []int) {
	if s == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("[")
	for i, v := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteString("]")
}
