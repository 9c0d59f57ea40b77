package cases

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/node-resized/node-resized/topology"
)

const (
	// MiB and GiB are sizes in bytes.
	MiB = uint64(1 << 20)
	GiB = uint64(1 << 30)
)

// Node is one NUMA node of a machine: its online CPUs (one thread per
// core), its MemTotal and its huge pages (page size in bytes → count).
type Node struct {
	ID   int
	CPUs []int
	Mem  uint64
	Huge map[uint64]uint64
}

// Machine is a machine as the kubelet's cAdvisor and node-resized's
// topology package see it: one socket per NUMA node.
type Machine []Node

// CPUs returns the online CPUs, sorted.
func (m Machine) CPUs() []int {
	var all []int
	for _, n := range m {
		all = append(all, n.CPUs...)
	}
	slices.Sort(all)
	return all
}

// Online is CPUs as node-resized's topology package has it.
func (m Machine) Online() topology.CPUSet { return topology.CPUSet(m.CPUs()) }

// Model is m as node-resized's topology package describes its memory.
func (m Machine) Model() []topology.Node {
	var out []topology.Node
	for _, n := range m {
		tn := topology.Node{ID: n.ID, MemTotal: n.Mem}
		for _, size := range slices.Sorted(maps.Keys(n.Huge)) {
			tn.Hugepages = append(tn.Hugepages, topology.Hugepages{PageSize: size, Count: n.Huge[size]})
		}
		out = append(out, tn)
	}
	return out
}

// The parts of cAdvisor's MachineInfo the kubelet's CPU topology and
// memory manager read, with the JSON names of cAdvisor's API, which every
// kubelet version's cadvisorapi.MachineInfo decodes.
type (
	machineInfo struct {
		NumCores       int           `json:"num_cores"`
		NumSockets     int           `json:"num_sockets"`
		MemoryCapacity uint64        `json:"memory_capacity"`
		Topology       []machineNode `json:"topology"`
	}
	machineNode struct {
		ID        int         `json:"node_id"`
		Memory    uint64      `json:"memory"`
		HugePages []hugePages `json:"hugepages"`
		Cores     []core      `json:"cores"`
	}
	hugePages struct {
		PageSize uint64 `json:"page_size"` // KiB
		NumPages uint64 `json:"num_pages"`
	}
	core struct {
		ID       int   `json:"core_id"`
		Threads  []int `json:"thread_ids"`
		SocketID int   `json:"socket_id"`
	}
)

// MachineInfo returns the cAdvisor MachineInfo of m as JSON, for a version
// module to decode into its cadvisorapi.MachineInfo.
func (m Machine) MachineInfo() []byte {
	mi := machineInfo{NumSockets: len(m)}
	for _, n := range m {
		mn := machineNode{ID: n.ID, Memory: n.Mem}
		for _, c := range n.CPUs {
			mn.Cores = append(mn.Cores, core{ID: c, Threads: []int{c}, SocketID: n.ID})
		}
		for _, size := range slices.Sorted(maps.Keys(n.Huge)) {
			mn.HugePages = append(mn.HugePages, hugePages{PageSize: size / 1024, NumPages: n.Huge[size]})
		}
		mi.NumCores += len(n.CPUs)
		mi.MemoryCapacity += n.Mem
		mi.Topology = append(mi.Topology, mn)
	}
	b, err := json.Marshal(mi)
	if err != nil {
		panic(err)
	}
	return b
}

// seq returns from, from+1, …, to.
func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
