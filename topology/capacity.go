package topology

import (
	"strconv"
)

// Capacity is the node's physical capacity exactly as the kubelet computes
// it from cAdvisor's MachineInfo (CapacityFromMachineInfo and
// EphemeralStorageCapacityFromFsInfo in pkg/kubelet/cadvisor).
type Capacity struct {
	// CPU is cAdvisor's MachineInfo.NumCores, the kubelet's cpu capacity:
	// the online CPUs found under the node directories (see Node.CPUs) or,
	// on a machine without node directories, the number of cpuN
	// directories, online or not (CPUs.Devices).
	CPU int64 `json:"cpu"`
	// Memory is /proc/meminfo MemTotal in bytes. Hugepages are part of it.
	Memory uint64 `json:"memory"`
	// Hugepages maps the kubelet's resource name ("hugepages-2Mi",
	// "hugepages-1Gi") to nr_hugepages × page size, in bytes, for every
	// node-wide pool, including empty ones (the kubelet reports those
	// as 0).
	Hugepages map[string]uint64 `json:"hugepages,omitempty"`
	// EphemeralStorage is the size of the filesystem that holds the
	// kubelet root dir, in bytes; 0 when not measured.
	EphemeralStorage uint64 `json:"ephemeralStorage,omitempty"`
	// Nodes is the per-NUMA-node split, as cAdvisor's MachineInfo.Topology
	// gives it to the kubelet's memory and topology managers; nil without
	// node directories.
	Nodes []NodeCapacity `json:"nodes,omitempty"`
}

// NodeCapacity is one NUMA node's share of the capacity.
type NodeCapacity struct {
	ID        int               `json:"id"`
	CPU       int64             `json:"cpu"`    // online CPUs of the node
	Memory    uint64            `json:"memory"` // nodeN/meminfo MemTotal, bytes
	Hugepages map[string]uint64 `json:"hugepages"`
}

// Capacity computes the physical capacity from the snapshot. It reads
// nothing; a nil snapshot has zero capacity.
func (s *Snapshot) Capacity() Capacity {
	if s == nil {
		return Capacity{}
	}
	c := Capacity{
		Memory:           s.MemTotal,
		Hugepages:        hugepageCapacity(s.Hugepages),
		EphemeralStorage: s.EphemeralStorage,
	}
	if len(s.Nodes) == 0 {
		// cAdvisor's getCPUTopology: len(glob("cpu*[0-9]")).
		c.CPU = int64(len(s.CPUs.Devices))
		return c
	}
	c.Nodes = make([]NodeCapacity, len(s.Nodes))
	for i, n := range s.Nodes {
		c.CPU += int64(len(n.CPUs))
		c.Nodes[i] = NodeCapacity{
			ID:        n.ID,
			CPU:       int64(len(n.CPUs)),
			Memory:    n.MemTotal,
			Hugepages: hugepageCapacity(n.Hugepages),
		}
	}
	return c
}

// hugepageCapacity maps pools to the kubelet's resources; nil for none.
func hugepageCapacity(pools []Hugepages) map[string]uint64 {
	if len(pools) == 0 {
		return nil
	}
	m := make(map[string]uint64, len(pools))
	for _, p := range pools {
		m[hugepageResourceName(p.PageSize)] = p.PageSize * p.Count
	}
	return m
}

// hugepageResourceName is the kubelet's name for a hugepage size:
// v1helper.HugePageResourceName(*resource.NewQuantity(size, BinarySI)),
// i.e. "hugepages-" and the quantity in canonical binary SI form: 2 MiB is
// "2Mi", 1 GiB "1Gi", 64 KiB "64Ki", 32 MiB "32Mi".
func hugepageResourceName(size uint64) string {
	return "hugepages-" + binarySI(size)
}

// binarySI formats an integer byte count as resource.Quantity does for
// BinarySI: the largest power-of-1024 suffix that keeps the number whole;
// below 1024 the quantity falls back to decimal SI, where only 1000 has a
// suffix ("1k").
func binarySI(v uint64) string {
	if v < 1024 {
		if v == 1000 {
			return "1k"
		}
		return strconv.FormatUint(v, 10)
	}
	suffixes := [...]string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	exp := 0
	for v%1024 == 0 && exp < len(suffixes)-1 {
		v /= 1024
		exp++
	}
	return strconv.FormatUint(v, 10) + suffixes[exp]
}
