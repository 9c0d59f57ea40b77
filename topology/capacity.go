package topology

import (
	"github.com/node-resized/node-resized/resources"
)

// Capacity computes the node's physical capacity from the snapshot exactly
// as the kubelet computes it from cAdvisor's MachineInfo
// (CapacityFromMachineInfo and EphemeralStorageCapacityFromFsInfo in
// pkg/kubelet/cadvisor), in the one resource vocabulary:
//
//   - cpu is cAdvisor's MachineInfo.NumCores, in millicores: the online
//     CPUs found under the node directories (see Node.CPUs) or, on a
//     machine without node directories, the number of cpuN directories,
//     online or not (CPUs.Devices);
//   - memory is /proc/meminfo MemTotal in bytes (huge pages are part of it);
//   - hugepages-<size> is nr_hugepages × page size for every node-wide
//     pool, empty ones included (the kubelet reports those as 0);
//   - ephemeral-storage is the size of the filesystem that holds the
//     kubelet root dir, absent when not measured;
//   - pid is the kernel's pid_max, absent when not read (the kubelet's
//     capacity for the kubepods pids.max limit; never published).
//
// It reads nothing; a nil snapshot has no capacity.
func (s *Snapshot) Capacity() resources.List {
	if s == nil {
		return nil
	}
	c := resources.List{resources.Memory: int64(s.MemTotal)}
	addHugepages(c, s.Hugepages)
	if s.EphemeralStorage > 0 {
		c[resources.EphemeralStorage] = int64(s.EphemeralStorage)
	}
	if s.PIDMax > 0 {
		c[resources.PID] = s.PIDMax
	}
	cpus := int64(len(s.CPUs.Devices)) // cAdvisor's getCPUTopology: len(glob("cpu*[0-9]")).
	if len(s.Nodes) > 0 {
		cpus = 0
		for _, n := range s.Nodes {
			cpus += int64(len(n.CPUs))
		}
	}
	c[resources.CPU] = cpus * 1000
	return c
}

// Unmeasured returns the resources this snapshot could not measure, which
// Capacity then lacks though the machine has them: ephemeral-storage when
// the kubelet root dir's filesystem could not be measured. A reader of
// Capacity keeps its last amount of these rather than seeing them vanish.
func (s *Snapshot) Unmeasured() []string {
	if s == nil || s.EphemeralStorageError == "" {
		return nil
	}
	return []string{resources.EphemeralStorage}
}

// NodeCapacity is one NUMA node's share of the capacity, as cAdvisor's
// MachineInfo.Topology gives it to the kubelet's memory and topology
// managers.
type NodeCapacity struct {
	ID int `json:"id"`
	// Capacity holds the node's online CPUs (cpu, millicores), its
	// nodeN/meminfo MemTotal (memory) and its huge page pools.
	Capacity resources.List `json:"capacity"`
}

// NodeCapacities is the per-NUMA-node split of Capacity; nil without node
// directories.
func (s *Snapshot) NodeCapacities() []NodeCapacity {
	if s == nil || len(s.Nodes) == 0 {
		return nil
	}
	out := make([]NodeCapacity, len(s.Nodes))
	for i, n := range s.Nodes {
		c := resources.List{resources.CPU: int64(len(n.CPUs)) * 1000, resources.Memory: int64(n.MemTotal)}
		addHugepages(c, n.Hugepages)
		out[i] = NodeCapacity{ID: n.ID, Capacity: c}
	}
	return out
}

// addHugepages adds the pools' sizes to c under the kubelet's names.
func addHugepages(c resources.List, pools []Hugepages) {
	for _, p := range pools {
		c[resources.HugePagesName(int64(p.PageSize))] = int64(p.PageSize * p.Count)
	}
}
