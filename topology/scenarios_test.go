package topology

import "github.com/node-resized/node-resized/topology/topologytest"

// scenario is a synthetic machine and the capacity the kubelet would
// report for it, worked out by hand from the kernel's files.
type scenario struct {
	name string
	fix  topologytest.Machine
	want testCapacity
}

func scenarios() []scenario {
	return []scenario{
		{
			// Two sockets, one node each, SMT pairs; cpu3 and cpu6 offline.
			// Only online CPUs count; empty 2 MiB pools are still reported.
			name: "offline-cpus",
			fix: topologytest.Machine{
				CPUs: append(topologytest.SMTCPUs(0, 4, 0, 0, 3), topologytest.SMTCPUs(4, 4, 1, 0, 6)...),
				Nodes: []topologytest.Node{
					{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 4000000, Pools: []topologytest.Pool{{KB: 2048, Nr: 0}}, Distances: []int{10, 20}},
					{ID: 1, CPUs: topologytest.Ints(4, 7), MemKB: 4100000, Pools: []topologytest.Pool{{KB: 2048, Nr: 0}}, Distances: []int{20, 10}},
				},
				BlockSize: 128 * miB,
				Blocks: concat(
					topologytest.Blocks(0, 1, BlockOnline, "DMA32", 0),
					topologytest.Blocks(1, 31, BlockOnline, "Normal", 0),
					topologytest.Blocks(32, 28, BlockOnline, "Normal", 1),
					topologytest.Blocks(60, 4, BlockOffline, "Normal Movable", 1),
				),
				MemKB: 8100000,
				Pools: []topologytest.Pool{{KB: 2048, Nr: 0}},
			},
			want: testCapacity{
				CPU:       6, // 0,1,2 and 4,5,7
				Memory:    8100000 * 1024,
				Hugepages: map[string]uint64{"hugepages-2Mi": 0},
				Nodes: []testNodeCapacity{
					{ID: 0, CPU: 3, Memory: 4000000 * 1024, Hugepages: map[string]uint64{"hugepages-2Mi": 0}},
					{ID: 1, CPU: 3, Memory: 4100000 * 1024, Hugepages: map[string]uint64{"hugepages-2Mi": 0}},
				},
			},
		},
		{
			// node1 has CPUs but no memory, node2 memory but no CPUs (a
			// CXL expander); no hugepage support at all.
			name: "memoryless-node",
			fix: topologytest.Machine{
				CPUs: append(topologytest.SMTCPUs(0, 2, 0, 0), topologytest.SMTCPUs(2, 2, 0, 1)...),
				Nodes: []topologytest.Node{
					{ID: 0, CPUs: topologytest.Ints(0, 1), MemKB: 2 * miB, Distances: []int{10, 11, 20}},
					{ID: 1, CPUs: topologytest.Ints(2, 3), MemKB: 0, Distances: []int{11, 10, 20}},
					{ID: 2, MemKB: 8 * miB, Distances: []int{20, 20, 10}},
				},
				BlockSize: 128 * miB,
				Blocks: concat(
					topologytest.Blocks(0, 16, BlockOnline, "Normal", 0),
					topologytest.Blocks(16, 64, BlockOnline, "Movable", 2),
				),
				MemKB: 10 * miB,
			},
			want: testCapacity{
				CPU:    4,
				Memory: 10 * giB,
				Nodes: []testNodeCapacity{
					{ID: 0, CPU: 2, Memory: 2 * giB},
					{ID: 1, CPU: 2, Memory: 0},
					{ID: 2, CPU: 0, Memory: 8 * giB},
				},
			},
		},
		{
			// 2 MiB and 1 GiB pools on two nodes of one socket.
			name: "hugepages-2Mi-1Gi-two-nodes",
			fix: topologytest.Machine{
				CPUs: append(topologytest.SMTCPUs(0, 4, 0, 0), topologytest.SMTCPUs(4, 4, 0, 2)...),
				Nodes: []topologytest.Node{
					{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 8 * miB, Pools: []topologytest.Pool{{KB: 2048, Nr: 512}, {KB: 1048576, Nr: 2}}, Distances: []int{10, 12}},
					{ID: 1, CPUs: topologytest.Ints(4, 7), MemKB: 8 * miB, Pools: []topologytest.Pool{{KB: 2048, Nr: 256}, {KB: 1048576, Nr: 0}}, Distances: []int{12, 10}},
				},
				BlockSize: 128 * miB,
				Blocks: concat(
					topologytest.Blocks(0, 64, BlockOnline, "Normal", 0),
					topologytest.Blocks(64, 64, BlockOnline, "Normal", 1),
				),
				MemKB: 16700000,
				Pools: []topologytest.Pool{{KB: 2048, Nr: 768}, {KB: 1048576, Nr: 2}},
			},
			want: testCapacity{
				CPU:    8,
				Memory: 16700000 * 1024,
				Hugepages: map[string]uint64{
					"hugepages-2Mi": 768 * 2 * miB, // 1610612736
					"hugepages-1Gi": 2 * giB,
				},
				Nodes: []testNodeCapacity{
					{ID: 0, CPU: 4, Memory: 8 * giB, Hugepages: map[string]uint64{"hugepages-2Mi": 1 * giB, "hugepages-1Gi": 2 * giB}},
					{ID: 1, CPU: 4, Memory: 8 * giB, Hugepages: map[string]uint64{"hugepages-2Mi": 512 * miB, "hugepages-1Gi": 0}},
				},
			},
		},
		{
			// A kernel without NUMA: cAdvisor counts the cpuN directories,
			// so the offline cpu3 counts too; cpu4-7 are possible but not
			// present, so they have no directory.
			name: "no-node-dirs",
			fix: topologytest.Machine{
				CPUs:      topologytest.SMTCPUs(0, 4, 0, 0, 3),
				Possible:  topologytest.Ints(0, 7),
				BlockSize: 128 * miB,
				Blocks:    topologytest.Blocks(0, 32, BlockOnline, "Normal", -1),
				MemKB:     4000000,
				Pools:     []topologytest.Pool{{KB: 2048, Nr: 16}},
			},
			want: testCapacity{
				CPU:       4,
				Memory:    4000000 * 1024,
				Hugepages: map[string]uint64{"hugepages-2Mi": 32 * miB},
			},
		},
		{
			// Swap does not change capacity. No memory directory, no
			// distance, no nodeN/meminfo: all optional.
			name: "swap-no-memory-dir",
			fix: topologytest.Machine{
				CPUs:   topologytest.SMTCPUs(0, 2, 0, 0),
				Nodes:  []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 1), NoMeminfo: true}},
				MemKB:  3000000,
				SwapKB: 2 * miB,
				Pools:  []topologytest.Pool{{KB: 2048, Nr: 0}, {KB: 1048576, Nr: 0}},
			},
			want: testCapacity{
				CPU:       2,
				Memory:    3000000 * 1024,
				Hugepages: map[string]uint64{"hugepages-2Mi": 0, "hugepages-1Gi": 0},
				Nodes:     []testNodeCapacity{{ID: 0, CPU: 2, Memory: 0}},
			},
		},
		{
			// cpu2 is online but has no topology ids: cAdvisor skips it.
			name: "online-cpu-without-topology",
			fix: topologytest.Machine{
				CPUs: []topologytest.CPU{
					{ID: 0, Core: 0, Online: true},
					{ID: 1, Core: 1, Online: true},
					{ID: 2, Core: 2, Online: true, NoTopology: true},
					{ID: 3, Core: 3, Online: true},
				},
				Nodes: []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 1 * miB, Distances: []int{10}}},
				MemKB: 1 * miB,
			},
			want: testCapacity{
				CPU:    3,
				Memory: 1 * giB,
				Nodes:  []testNodeCapacity{{ID: 0, CPU: 3, Memory: 1 * giB}},
			},
		},
		{
			// arm64 with 64 KiB pages: four hugepage sizes, named as the
			// kubelet names them.
			name: "arm64-hugepage-sizes",
			fix: topologytest.Machine{
				CPUs:     topologytest.SMTCPUs(0, 4, 0, 0),
				Possible: topologytest.Ints(0, 15),
				Nodes: []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 4 * miB, Distances: []int{10},
					Pools: []topologytest.Pool{{KB: 64, Nr: 10}, {KB: 2048, Nr: 5}, {KB: 32768, Nr: 1}, {KB: 1048576, Nr: 1}}}},
				BlockSize: 1 * giB,
				Blocks:    topologytest.Blocks(0, 4, BlockOnline, "Normal", 0),
				MemKB:     4 * miB,
				Pools:     []topologytest.Pool{{KB: 64, Nr: 10}, {KB: 2048, Nr: 5}, {KB: 32768, Nr: 1}, {KB: 1048576, Nr: 1}},
			},
			want: testCapacity{
				CPU:    4,
				Memory: 4 * giB,
				Hugepages: map[string]uint64{
					"hugepages-64Ki": 640 * kiB,
					"hugepages-2Mi":  10 * miB,
					"hugepages-32Mi": 32 * miB,
					"hugepages-1Gi":  1 * giB,
				},
				Nodes: []testNodeCapacity{{ID: 0, CPU: 4, Memory: 4 * giB, Hugepages: map[string]uint64{
					"hugepages-64Ki": 640 * kiB,
					"hugepages-2Mi":  10 * miB,
					"hugepages-32Mi": 32 * miB,
					"hugepages-1Gi":  1 * giB,
				}}},
			},
		},
		{
			// A POWER LPAR in SMT8 (powerMachine): 32 threads in 4
			// cores, 4 threads offline, 256 MiB memory blocks.
			name: "power-smt8-lpar",
			fix:  powerMachine(),
			want: testCapacity{
				CPU:    28,
				Memory: 16 * giB,
				Nodes: []testNodeCapacity{
					{ID: 0, CPU: 16, Memory: 8 * giB},
					{ID: 1, CPU: 12, Memory: 8 * giB},
				},
			},
		},
		{
			// An s390x LPAR with NUMA (s390xMachine): books and drawers
			// above the sockets, SMT2, 256 MiB blocks, 1 MiB pages.
			name: "s390x-books-drawers",
			fix:  s390xMachine(true),
			want: testCapacity{
				CPU:       15,
				Memory:    4 * giB,
				Hugepages: map[string]uint64{"hugepages-1Mi": 64 * miB},
				Nodes:     []testNodeCapacity{{ID: 0, CPU: 15, Memory: 4 * giB, Hugepages: map[string]uint64{"hugepages-1Mi": 64 * miB}}},
			},
		},
		{
			// The same machine on a kernel without NUMA: cAdvisor
			// counts the cpuN directories, the offline cpu15 too.
			name: "s390x-no-node-dirs",
			fix:  s390xMachine(false),
			want: testCapacity{
				CPU:       16,
				Memory:    4 * giB,
				Hugepages: map[string]uint64{"hugepages-1Mi": 64 * miB},
			},
		},
	}
}

// powerMachine is a POWER LPAR (pseries) in SMT8: node0 holds cores 0
// and 8 (cpu0-15), node1 cores 16 and 24 (cpu16-31), with cpu28-31 (the
// second half of core 24) taken offline. What the kernel writes there:
//
//   - core_id is the hardware id of the core's first thread
//     (topology_core_id is cpu_to_core_id, the "reg" property of the
//     CPU's device tree node: arch/powerpc/include/asm/topology.h,
//     arch/powerpc/kernel/smp.c), so a core's eight threads share it and
//     thread_siblings_list names all eight;
//   - physical_package_id is cpu_to_chip_id, the node's ibm,chip-id, and
//     -1 where the LPAR's device tree has none (as on the POWER machines
//     of llvm/llvm-project#111809, whose physical_package_id reads -1);
//   - a memory block is one logical memory block (LMB) of the hypervisor
//     (pseries_memory_block_size, arch/powerpc/platforms/pseries), and
//     256 MiB is the LMB size of 97% of POWER7 to POWER9 servers (IBM's
//     "Power10 LMB Sizes", 2024).
func powerMachine() topologytest.Machine {
	const lmb = 256 * miB
	first := func(k int) int { return 8 * k }
	cpus := topologytest.ThreadedCPUs(0, 4, 8, -1, first)
	for i := 28; i < 32; i++ {
		cpus[i].Online = false
	}
	return topologytest.Machine{
		CPUs:     cpus,
		Possible: topologytest.Ints(0, 63),
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: topologytest.Ints(0, 15), MemKB: 8 * miB, Distances: []int{10, 40}},
			{ID: 1, CPUs: topologytest.Ints(16, 31), MemKB: 8 * miB, Distances: []int{40, 10}},
		},
		BlockSize: lmb,
		Blocks: concat(
			topologytest.Blocks(0, 32, BlockOnline, "Normal", 0),
			topologytest.Blocks(32, 32, BlockOnline, "Normal", 1),
			topologytest.Blocks(64, 8, BlockOffline, "Normal Movable", 1),
		),
		MemKB: 16 * miB,
	}
}

// s390xMachine is an s390x LPAR with 16 CPUs in SMT2 (8 cores) in two
// drawers, as arch/s390/kernel/topology.c lays them out from the
// machine's topology list (tl_to_masks, add_cpus_to_mask): a CPU's
// drawer, book and socket ids are the ids of its containers in that
// list, its core_id is the core's address, unique in the machine, and the
// threads of a core are consecutive CPUs. Drawer 1 holds book 1 with
// sockets 1 (cores 0-2) and 2 (cores 3-4); drawer 2 holds book 3 with a
// socket that is socket 1 again (nothing makes a container id unique
// beyond its parent) with cores 8-10; cpu15 is offline. drivers/base
// /topology.c writes book_id and drawer_id there, and the s390 code each
// CPU's polarization and dedicated flags and cpu/dispatching. A
// memory block is 256 MiB at least (memory_block_size_bytes in
// arch/s390/mm/init.c: the larger of the 2^28 byte section,
// arch/s390/include/asm/sparsemem.h, and the storage increment); the
// hugepages are 1 MiB (HPAGE_SHIFT 20, arch/s390/include/asm/page.h).
// withNodes gives it one NUMA node.
func s390xMachine(withNodes bool) topologytest.Machine {
	place := []struct{ drawer, book, socket, core int }{
		{1, 1, 1, 0}, {1, 1, 1, 1}, {1, 1, 1, 2},
		{1, 1, 2, 3}, {1, 1, 2, 4},
		{2, 3, 1, 8}, {2, 3, 1, 9}, {2, 3, 1, 10},
	}
	var cpus []topologytest.CPU
	for i, p := range place {
		for thread := range 2 {
			id := 2*i + thread
			cpus = append(cpus, topologytest.CPU{ID: id, Core: p.core, Socket: p.socket, Book: p.book, Drawer: p.drawer, Online: id != 15})
		}
	}
	m := topologytest.Machine{
		CPUs:      cpus,
		Arch:      "s390x",
		BlockSize: 256 * miB,
		Blocks:    topologytest.Blocks(0, 16, BlockOnline, "Normal", -1),
		MemKB:     4 * miB,
		Pools:     []topologytest.Pool{{KB: 1024, Nr: 64}},
	}
	if withNodes {
		m.Nodes = []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 15), MemKB: 4 * miB, Distances: []int{10},
			Pools: []topologytest.Pool{{KB: 1024, Nr: 64}}}}
		m.Blocks = topologytest.Blocks(0, 16, BlockOnline, "Normal", 0)
	}
	return m
}

func concat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
