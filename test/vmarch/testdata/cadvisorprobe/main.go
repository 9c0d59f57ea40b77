// Command cadvisorprobe prints the machine as the kubelet sees it: the
// figures cAdvisor's own code (github.com/google/cadvisor/lib, the version
// the kubelet links) computes from this machine's /sys and /proc, as JSON.
// The test runs it in the guest beside the daemon and compares.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/google/cadvisor/lib/machine"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
)

// Machine is what the probe prints.
type Machine struct {
	// NumCores is MachineInfo.NumCores: the kubelet's cpu capacity.
	NumCores int `json:"numCores"`
	// MemoryCapacity is MachineInfo.MemoryCapacity: the kubelet's memory
	// capacity.
	MemoryCapacity uint64 `json:"memoryCapacity"`
	// Nodes is MachineInfo.Topology: each node's CPUs (thread ids) and
	// memory.
	Nodes []Node `json:"nodes"`
}

// Node is one NUMA node of MachineInfo.Topology.
type Node struct {
	ID     int    `json:"id"`
	CPUs   []int  `json:"cpus"`
	Memory uint64 `json:"memory"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cadvisorprobe:", err)
		os.Exit(1)
	}
}

func run() error {
	nodes, cores, err := sysinfo.GetNodesInfo(sysfs.NewRealSysFs())
	if err != nil {
		return fmt.Errorf("GetNodesInfo: %w", err)
	}
	mem, err := machine.GetMachineMemoryCapacity()
	if err != nil {
		return fmt.Errorf("GetMachineMemoryCapacity: %w", err)
	}
	m := Machine{NumCores: cores, MemoryCapacity: mem, Nodes: []Node{}}
	for _, n := range nodes {
		out := Node{ID: n.Id, CPUs: []int{}, Memory: n.Memory}
		for _, c := range n.Cores {
			out.CPUs = append(out.CPUs, c.Threads...)
		}
		slices.Sort(out.CPUs)
		m.Nodes = append(m.Nodes, out)
	}
	return json.NewEncoder(os.Stdout).Encode(m)
}
