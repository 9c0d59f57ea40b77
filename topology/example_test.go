package topology_test

import (
	"fmt"
	"log"

	"github.com/node-resized/node-resized/topology"
)

// Read the machine and compute the capacity the kubelet would report.
func Example() {
	fs, err := topology.NewFS("/sys", "/proc")
	if err != nil {
		log.Fatal(err)
	}
	fs = fs.WithKubeletRootDir("/var/lib/kubelet")

	snap, err := fs.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	c := snap.Capacity()
	fmt.Printf("online cpus %s, %d NUMA nodes, %d memory blocks\n",
		snap.CPUs.Online, len(snap.Nodes), len(snap.MemoryBlocks))
	fmt.Printf("capacity: %s\n", c) // cpu=8, ephemeral-storage=..., memory=...Ki, hugepages-2Mi=...
	for _, n := range snap.NodeCapacities() {
		fmt.Printf("node%d: %s\n", n.ID, n.Capacity)
	}
}

// Follow a batch of uevents: re-read only the objects they name.
func ExampleFS_Update() {
	fs, err := topology.NewFS("/sys", "/proc")
	if err != nil {
		log.Fatal(err)
	}
	prev, err := fs.Snapshot()
	if err != nil {
		log.Fatal(err)
	}
	// The DEVPATHs of the batch's uevents, e.g. after "echo 0 > cpu1/online".
	devs := []topology.Device{topology.ParseDevPath("/devices/system/cpu/cpu1")}
	next, full, err := fs.Update(prev, devs)
	if err != nil {
		log.Fatal(err)
	}
	if full != "" {
		fmt.Println("read the whole machine:", full)
	}
	fmt.Println(topology.Diff(prev, next)) // e.g. "cpu1 offline", or "no change"
}

// Compare two snapshots after a hotplug event.
func ExampleDiff() {
	before := &topology.Snapshot{
		CPUs:     topology.CPUs{Online: topology.CPUSet{0, 1, 2, 3}, Present: topology.CPUSet{0, 1, 2, 3}},
		MemTotal: 24 << 30,
	}
	after := &topology.Snapshot{
		CPUs:     topology.CPUs{Online: topology.CPUSet{0, 2, 3}, Present: topology.CPUSet{0, 1, 2, 3}},
		MemTotal: 24<<30 - 128<<20,
	}
	changes := topology.Diff(before, after)
	for _, c := range changes {
		fmt.Println(c.Kind)
	}
	fmt.Println(changes)
	// Output:
	// cpu_offline
	// memtotal
	// cpu1 offline; MemTotal 24.0GiB -> 23.9GiB (-128.0MiB)
}

func ExampleParseCPUSet() {
	set, err := topology.ParseCPUSet("0-3,8\n")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(set.Len(), set.Contains(8), set.Difference(topology.CPUSet{1, 2}))
	// Output: 5 true 0,3,8
}
