package checkpoint

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// MemoryManagerPlan is a rewrite of the memory manager's checkpoint for a
// new NUMA topology; its Dropped are the pods whose memory lies on a NUMA
// node the machine no longer has.
type MemoryManagerPlan = Plan[MemoryManagerState]

// PlanMemoryManager reads the memory manager's checkpoint at path (""
// means DefaultMemoryManagerPath), verifies it as the kubelet does (a
// corrupt one is an error, never rewritten), and plans the checkpoint the
// kubelet's Static policy accepts on the NUMA nodes given (its
// validateState): the machine state the kubelet computes for them (each
// node's MemTotal and huge pages, less reserved), with every assignment on
// nodes that still exist accounted on it again. The plan is written in
// v1.37's layout (v3), whatever layout it was read in, with the legacy
// fields and checksum older kubelets read: v1's, or v2's when a pod holds
// pod-level memory.
//
// reserved is the kubelet's reservedMemory: NUMA node → resource name
// ("memory", "hugepages-2Mi") → bytes; nil takes the reservations the
// checkpoint was computed with.
//
// When an assignment no longer fits its nodes, or a node has less memory
// than is reserved on it, no plan is possible: the error wraps
// ErrInfeasible and says what an operator must do. The None policy's
// checkpoint, and a Static one not yet initialised, need no rewrite. A
// missing checkpoint gives an error wrapping fs.ErrNotExist.
func PlanMemoryManager(path string, nodes []topology.Node, reserved map[int]map[string]uint64) (*MemoryManagerPlan, error) {
	return memoryManager.plan(path, func(_ []byte, st MemoryManagerState) (MemoryManagerState, []string, []byte, error) {
		if st.PolicyName != "Static" || len(st.MachineState) == 0 {
			return st, nil, nil, nil
		}
		if reserved == nil {
			reserved = reservedFromState(st.MachineState)
		}
		ms, err := defaultMachineState(nodes, reserved)
		if err != nil {
			return st, nil, nil, err
		}
		next, dropped, err := replayMemory(st, ms)
		if err != nil || (len(dropped) == 0 && reflect.DeepEqual(st.MachineState, next.MachineState)) {
			return next, dropped, nil, err
		}
		data, err := marshalMemoryV3(next)
		return next, dropped, data, err
	})
}

// reservedFromState recovers the reservations from a machine state.
func reservedFromState(ms map[int]*NUMANodeState) map[int]map[string]uint64 {
	out := map[int]map[string]uint64{}
	for id, n := range ms {
		if n == nil {
			continue
		}
		for name, t := range n.MemoryMap {
			if t != nil && t.SystemReserved > 0 {
				if out[id] == nil {
					out[id] = map[string]uint64{}
				}
				out[id][name] = t.SystemReserved
			}
		}
	}
	return out
}

// defaultMachineState is the kubelet's getDefaultMachineState: per NUMA
// node, each huge page size and the regular memory less what is reserved
// and, for memory, less the huge pages.
func defaultMachineState(nodes []topology.Node, reserved map[int]map[string]uint64) (map[int]*NUMANodeState, error) {
	ms := make(map[int]*NUMANodeState, len(nodes))
	for _, n := range nodes {
		ms[n.ID] = &NUMANodeState{MemoryMap: map[string]*MemoryTable{}, Cells: []int{n.ID}}
	}
	for _, id := range slices.Sorted(maps.Keys(reserved)) {
		if _, ok := ms[id]; !ok && len(reserved[id]) > 0 {
			return nil, fmt.Errorf("%w: reservedMemory names NUMA node %d, which the machine no longer has; "+
				"remove it from the kubelet's reservedMemory (moving its reservation to a node that exists) before the kubelet restarts",
				ErrInfeasible, id)
		}
	}
	for _, n := range nodes {
		var huge uint64
		for _, hp := range n.Hugepages {
			name := resources.HugePagesName(int64(hp.PageSize))
			total := hp.Count * hp.PageSize
			t, err := memoryTable(n.ID, name, total, reserved[n.ID][name])
			if err != nil {
				return nil, err
			}
			ms[n.ID].MemoryMap[name] = t
			huge += total
		}
		t, err := memoryTable(n.ID, resources.Memory, n.MemTotal, reserved[n.ID][resources.Memory]+huge)
		if err != nil {
			return nil, err
		}
		t.SystemReserved = reserved[n.ID][resources.Memory]
		ms[n.ID].MemoryMap[resources.Memory] = t
	}
	return ms, nil
}

// memoryTable is one resource of a node with nothing assigned; taken is
// what is not allocatable. The kubelet subtracts without a check and would
// wrap around; here that is an error.
func memoryTable(node int, name string, total, taken uint64) (*MemoryTable, error) {
	if taken > total {
		return nil, fmt.Errorf("%w: NUMA node %d has %d bytes of %s, less than the %d reserved on it (reservedMemory, and huge pages for memory); "+
			"lower the node's reservedMemory in the kubelet's configuration (with kubeReserved, systemReserved and evictionHard to match) "+
			"or give the node its memory back before the kubelet restarts", ErrInfeasible, node, total, name, taken)
	}
	return &MemoryTable{TotalMemSize: total, SystemReserved: taken, Allocatable: total - taken, Free: total - taken}, nil
}

// replayMemory accounts every assignment on the new machine state as the
// kubelet's validateState does, dropping those on NUMA nodes that are gone.
func replayMemory(st MemoryManagerState, ms map[int]*NUMANodeState) (MemoryManagerState, []string, error) {
	out := MemoryManagerState{Format: MemoryManagerV3, PolicyName: st.PolicyName, MachineState: ms,
		Containers: map[string]map[string][]MemoryBlock{}}
	if st.Pods != nil {
		out.Pods = map[string][]MemoryBlock{}
	}
	uids := slices.Sorted(maps.Keys(st.Containers))
	for uid := range st.Pods {
		if _, ok := st.Containers[uid]; !ok {
			uids = append(uids, uid)
		}
	}
	var dropped, misfit []string
	for _, uid := range uids {
		if !onNodes(ms, st.Pods[uid]) || !onNodes(ms, slices.Concat(slices.Collect(maps.Values(st.Containers[uid]))...)) {
			dropped = append(dropped, uid)
			continue
		}
		if c, ok := st.Containers[uid]; ok {
			out.Containers[uid] = c
		}
		if p, ok := st.Pods[uid]; ok {
			out.Pods[uid] = p
		}
		if !accountPod(ms, st, uid) {
			misfit = append(misfit, uid)
		}
	}
	if len(misfit) > 0 {
		return MemoryManagerState{}, nil, fmt.Errorf("%w: the memory assigned to pods %v no longer fits its NUMA nodes; "+
			"evict those pods (their memory is pinned there) or give the nodes their memory back before the kubelet restarts",
			ErrInfeasible, misfit)
	}
	return out, dropped, nil
}

func onNodes(ms map[int]*NUMANodeState, blocks []MemoryBlock) bool {
	for _, b := range blocks {
		for _, id := range b.NUMAAffinity {
			if _, ok := ms[id]; !ok {
				return false
			}
		}
	}
	return true
}

// accountPod reserves a pod's memory on ms as the kubelet's
// updateExpectedMachineState does: its pod-level blocks when it has them,
// else its containers'; pods without container entries are not counted
// (the kubelet iterates the container entries). It reports false when a
// block's memory type is missing or its size does not fit.
func accountPod(ms map[int]*NUMANodeState, st MemoryManagerState, uid string) bool {
	containers, ok := st.Containers[uid]
	if !ok {
		return true
	}
	blocks := st.Pods[uid]
	if len(blocks) == 0 {
		for _, name := range slices.Sorted(maps.Keys(containers)) {
			blocks = append(blocks, containers[name]...)
		}
	}
	fits := true
	for _, b := range blocks {
		left := b.Size
		for _, id := range b.NUMAAffinity {
			n := ms[id]
			n.NumberOfAssignments++
			n.Cells = b.NUMAAffinity
			t, ok := n.MemoryMap[b.Type]
			if !ok {
				fits = false
				continue
			}
			take := min(left, t.Free)
			t.Reserved += take
			t.Free -= take
			left -= take
		}
		fits = fits && left == 0
	}
	return fits
}
