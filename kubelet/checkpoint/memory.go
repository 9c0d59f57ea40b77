package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultMemoryManagerPath is where the kubelet keeps its memory manager's
// state (<root-dir>/memory_manager_state).
const DefaultMemoryManagerPath = "/var/lib/kubelet/memory_manager_state"

// memoryLayouts are the layouts of the memory manager's checkpoint that
// the kubelet loads, in the order it tries them: newest first, and the
// oldest, which takes or refuses whatever the others leave, last. A layout
// a new kubelet writes is one file, memory_vN.go, and one line here.
var memoryLayouts = []layout[[]byte, MemoryManagerState]{decodeMemoryV3, decodeMemoryV2, decodeMemoryV1}

var memoryManager = codec[MemoryManagerState]{name: "memory manager checkpoint", defaultPath: DefaultMemoryManagerPath, parse: ParseMemoryManager}

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
	// Format is the layout the kubelet would load: MemoryManagerV1, V2 or
	// V3.
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

// ReadMemoryManager reads the memory manager's checkpoint at path (""
// means DefaultMemoryManagerPath) as kubelet v1.37 loads it: v3 when the
// file has data or a dataChecksum (then its dataChecksum must match),
// otherwise v2 and then v1, each with the kubelet's checksum (a v1
// checksum of 0 is accepted, as the kubelet accepts it). A missing file
// gives an error wrapping fs.ErrNotExist; one the kubelet would refuse an
// error wrapping ErrCorrupt.
func ReadMemoryManager(path string) (MemoryManagerState, error) {
	_, _, st, err := memoryManager.read(path)
	return st, err
}

// ParseMemoryManager parses the contents of a memory manager checkpoint;
// see ReadMemoryManager.
func ParseMemoryManager(b []byte) (MemoryManagerState, error) {
	if err := knownFields(b, &memoryKnownFile{}, &memoryV3Data{}); err != nil {
		return MemoryManagerState{}, err
	}
	return decode(b, memoryLayouts)
}

// The layouts as the kubelet's structs decode them: nil and empty are told
// apart because the checksums tell them apart. Each starts with defaults
// as the kubelet's constructors make them.

type memoryPodEntry struct {
	MemoryBlocks []MemoryBlock `json:"memoryBlocks,omitempty"`
}

func podBlocks(m map[string]memoryPodEntry) map[string][]MemoryBlock {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]MemoryBlock, len(m))
	for uid, e := range m {
		out[uid] = e.MemoryBlocks
	}
	return out
}

// The memory manager's checksums dump the checkpoint struct with its name
// written as "MemoryManagerCheckpoint" whatever the version.

// dumpMemoryHead writes the dump of the fields every layout's struct
// starts with (v1's), up to its entries.
func dumpMemoryHead(b *strings.Builder, policy string, ms map[int]*NUMANodeState, entries map[string]map[string][]MemoryBlock) {
	b.WriteString("(*state.MemoryManagerCheckpoint){PolicyName:(string)" + policy + " MachineState:(state.NUMANodeMap)")
	dumpMap(b, ms, func(id int, n *NUMANodeState) {
		b.WriteString(strconv.Itoa(id) + ":")
		if n == nil {
			b.WriteString("<nil>")
			return
		}
		b.WriteString("<*>{NumberOfAssignments:(int)" + strconv.Itoa(n.NumberOfAssignments) +
			" MemoryMap:(map[v1.ResourceName]*state.MemoryTable)")
		dumpMap(b, n.MemoryMap, func(name string, t *MemoryTable) {
			b.WriteString(name + ":")
			if t == nil {
				b.WriteString("<nil>")
				return
			}
			fmt.Fprintf(b, "<*>{TotalMemSize:(uint64)%d SystemReserved:(uint64)%d Allocatable:(uint64)%d Reserved:(uint64)%d Free:(uint64)%d}",
				t.TotalMemSize, t.SystemReserved, t.Allocatable, t.Reserved, t.Free)
		})
		b.WriteString(" Cells:([]int)")
		dumpInts(b, n.Cells)
		b.WriteString("}")
	})
	b.WriteString(" Entries:(state.ContainerMemoryAssignments)")
	dumpMap(b, entries, func(uid string, containers map[string][]MemoryBlock) {
		b.WriteString(uid + ":")
		dumpMap(b, containers, func(name string, blocks []MemoryBlock) {
			b.WriteString(name + ":")
			dumpBlocks(b, blocks)
		})
	})
}

func dumpBlocks(b *strings.Builder, blocks []MemoryBlock) {
	dumpSlice(b, blocks, func(blk MemoryBlock) {
		b.WriteString("{NUMAAffinity:([]int)")
		dumpInts(b, blk.NUMAAffinity)
		b.WriteString(" Type:(v1.ResourceName)" + blk.Type + " Size:(uint64)" + strconv.FormatUint(blk.Size, 10) + "}")
	})
}

func dumpInts(b *strings.Builder, s []int) {
	dumpSlice(b, s, func(v int) { b.WriteString(strconv.Itoa(v)) })
}
