package topologytest

import (
	"os"
	"runtime"
	"slices"
	"testing"
)

// Block states as the kernel writes them in memoryN/state.
const (
	BlockOnline       = "online"
	BlockOffline      = "offline"
	BlockGoingOffline = "going-offline"
)

// Machine describes a synthetic machine. [Machine.Write] lays it out as a
// sysfs and a procfs tree the way the kernel does: cpuN directories with
// topology only while online, nodeN directories with cpuM and memoryK
// symlinks, memoryK directories with a nodeN symlink, hugepage pools,
// meminfo files.
//
// A Machine is a plain description. Write only reads it, so one Machine
// may be written by several goroutines at once.
type Machine struct {
	CPUs     []CPU
	Possible []int  // nil: the CPUs above
	Nodes    []Node // nil: no devices/system/node (a kernel without NUMA)

	BlockSize uint64 // 0: no devices/system/memory
	Blocks    []Block

	// DIMMs are ACPI memory devices bound to some of the Blocks.
	DIMMs []DIMM
	// VirtioMem are virtio-mem devices whose plugged Blocks /proc/iomem
	// shows. /proc/iomem is written for every machine: boot memory as
	// "System RAM" runs of the Blocks outside any virtio-mem device.
	// Each device is bound to the virtio_mem driver, in
	// bus/virtio/drivers/virtio_mem.
	VirtioMem []VirtioMem
	// Memmap is /sys/firmware/memmap; nil: no such directory (a kernel
	// without CONFIG_FIRMWARE_MEMMAP, which only x86 has by default).
	// PCMemmap returns what x86 shows. A Tree adds an entry for each
	// DIMM it hot-adds and for blocks AddBlocks adds, as add_memory
	// does, and none for virtio-mem's blocks, as for any memory
	// added by add_memory_driver_managed.
	Memmap []MemmapEntry
	// HideIomem writes /proc/iomem as a reader without CAP_SYS_ADMIN
	// sees it: every range 00000000-00000000.
	HideIomem bool

	MemKB, SwapKB uint64       // /proc/meminfo MemTotal and SwapTotal
	Pools         []Pool       // nil: no /sys/kernel/mm/hugepages
	Caches        bool         // write cpuN/cache/indexK as on x86
	Lean          bool         // only the files cAdvisor or topology read
	Extra         func(string) // optional: edit the sys tree after writing

	// Arch is the architecture whose kernel the tree imitates, in Go's
	// names; "": the one the test runs on, so that the code under test
	// reads what its architecture's kernel writes. An s390x tree has
	// each online CPU's book and drawer ids and siblings (CPU.Book,
	// CPU.Drawer) and the CPU files of s390's topology support.
	Arch string
	// NoBooks leaves book_id and drawer_id (and their siblings) out of
	// an s390x tree, as an s390 kernel built without
	// CONFIG_SCHED_TOPOLOGY does.
	NoBooks bool
}

// CPU is one logical CPU, present in the machine. Its threads are the
// CPUs with the same Core, Socket, Book and Drawer.
type CPU struct {
	ID, Core, Socket int
	Online           bool
	NoTopology       bool // online, yet no topology directory
	// NoOnlineFile leaves out cpuN/online, as the kernel does for a CPU
	// it cannot take offline. cpu0 never has one (x86's boot CPU).
	NoOnlineFile bool
	// Book and Drawer are s390's levels above the socket, written only
	// in an s390x tree.
	Book, Drawer int
}

// DIMM is an ACPI memory device (QEMU's pc-dimm, HID PNP0C80) bound to
// memory blocks, written as the kernel lays it out: the device directory
// under devices/LNXSYSTM:00/LNXSYBUS:00/PNP0A06:00 (QEMU's memory hotplug
// container), its link in bus/acpi/devices, its physical_node,
// physical_node1, ... links to the blocks in ascending order (the order
// acpi_memhotplug binds them in, drivers/acpi/glue.c names them in), and
// each block's firmware_node link back.
type DIMM struct {
	Instance int   // NN of PNP0C80:NN
	Blocks   []int // the bound blocks; each must be one of Machine.Blocks
}

// VirtioMem is a virtio-mem device: its region in /proc/iomem, named
// virtioN, and its plugged blocks as "System RAM (virtio_mem)" ranges
// under it, adjacent blocks merged into one range as the kernel merges
// them.
type VirtioMem struct {
	Index       int    // N of virtioN
	Start, Size uint64 // the region, in bytes
	Blocks      []int  // the plugged blocks; each must be one of Machine.Blocks
}

// Node is one NUMA node.
type Node struct {
	ID        int
	CPUs      []int // cpuM links: the node's present CPUs
	MemKB     uint64
	NoMeminfo bool
	Pools     []Pool // nil: no nodeN/hugepages
	Distances []int  // nil: no distance file
}

// Block is one memory block, devices/system/memory/memoryN.
type Block struct {
	ID    int
	State string // BlockOnline, BlockOffline or BlockGoingOffline
	// Zones is memoryN/valid_zones: the zone of an online block
	// ("Normal"), or the zones an offline block could be onlined to,
	// the default first ("Movable Normal"); "": no such file.
	Zones string
	Node  int // -1: no link
}

// Pool is a hugepage pool: Nr pages of KB kibibytes.
type Pool struct{ KB, Nr uint64 }

// s390 reports a tree of an s390x kernel.
func (m *Machine) s390() bool {
	return m.Arch == "s390x" || (m.Arch == "" && runtime.GOARCH == "s390x")
}

// books reports a tree with book_id and drawer_id.
func (m *Machine) books() bool { return m.s390() && !m.NoBooks }

// Dir returns a fresh directory for a tree, removed when the test ends. It
// prefers a tmpfs (/dev/shm), which is in memory like sysfs and an order of
// magnitude faster to fill and remove than a disk.
func Dir(tb testing.TB) string {
	tb.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "topologytest-"); err == nil {
			tb.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return tb.TempDir()
}

// SMTCPUs returns online CPUs first..first+n-1 as SMT pairs on socket,
// numbering cores from core0; offline lists the ids to leave offline.
func SMTCPUs(first, n, socket, core0 int, offline ...int) []CPU {
	cpus := make([]CPU, n)
	for i := range cpus {
		id := first + i
		cpus[i] = CPU{ID: id, Core: core0 + i/2, Socket: socket, Online: !slices.Contains(offline, id)}
	}
	return cpus
}

// ThreadedCPUs returns online CPUs first..first+cores*threads-1, threads
// to a core, on socket; the k-th core (from 0) has core id coreID(k). The
// kernel gives a POWER core the hardware id of its first thread, first +
// 8k with SMT8; s390 its machine-wide core address.
func ThreadedCPUs(first, cores, threads, socket int, coreID func(k int) int) []CPU {
	cpus := make([]CPU, cores*threads)
	for i := range cpus {
		cpus[i] = CPU{ID: first + i, Core: coreID(i / threads), Socket: socket, Online: true}
	}
	return cpus
}

// Blocks returns count blocks from first, all in state with zones on node.
func Blocks(first, count int, state, zones string, node int) []Block {
	bs := make([]Block, count)
	for i := range bs {
		bs[i] = Block{ID: first + i, State: state, Zones: zones, Node: node}
	}
	return bs
}

// Ints returns from, from+1, ..., to.
func Ints(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// Machine1024 is a large machine for benchmarks: 2 sockets of 8 NUMA
// nodes, 64 CPUs (32 SMT cores) per node, one CPU per node offline; 4096
// memory blocks of 128 MiB, 256 per node, the last 32 of each node movable
// and 8 of those offline; 512 × 2 MiB and 4 × 1 GiB hugepages per node. It
// is Lean: only the files cAdvisor or topology read are written.
func Machine1024() Machine {
	const nodes, perNode, blocksPerNode = 16, 64, 256
	m := Machine{BlockSize: 128 << 20, Caches: true, Lean: true}
	var memKB uint64
	for n := range nodes {
		socket := n / 8
		first := n * perNode
		m.CPUs = append(m.CPUs, SMTCPUs(first, perNode, socket, (n%8)*perNode/2, first+perNode-1)...)
		b0 := n * blocksPerNode
		m.Blocks = append(m.Blocks, Blocks(b0, blocksPerNode-32, BlockOnline, "Normal", n)...)
		m.Blocks = append(m.Blocks, Blocks(b0+blocksPerNode-32, 24, BlockOnline, "Movable", n)...)
		m.Blocks = append(m.Blocks, Blocks(b0+blocksPerNode-8, 8, BlockOffline, "Movable Normal", n)...)
		nodeKB := uint64(blocksPerNode-8) * 128 * 1024
		memKB += nodeKB
		dist := make([]int, nodes)
		for o := range dist {
			switch {
			case o == n:
				dist[o] = 10
			case o/8 == socket:
				dist[o] = 12
			default:
				dist[o] = 32
			}
		}
		m.Nodes = append(m.Nodes, Node{
			ID: n, CPUs: Ints(first, first+perNode-1), MemKB: nodeKB,
			Pools:     []Pool{{2048, 512}, {1048576, 4}},
			Distances: dist,
		})
	}
	m.MemKB = memKB
	m.Pools = []Pool{{2048, 512 * nodes}, {1048576, 4 * nodes}}
	return m
}

// clone returns a deep copy of m's slices, so that a Tree can change its
// description without touching the caller's.
func (m Machine) clone() Machine {
	c := m
	c.CPUs = slices.Clone(m.CPUs)
	c.Possible = slices.Clone(m.Possible)
	c.Blocks = slices.Clone(m.Blocks)
	c.Pools = slices.Clone(m.Pools)
	c.DIMMs = slices.Clone(m.DIMMs)
	for i := range c.DIMMs {
		c.DIMMs[i].Blocks = slices.Clone(m.DIMMs[i].Blocks)
	}
	c.Memmap = slices.Clone(m.Memmap)
	c.VirtioMem = slices.Clone(m.VirtioMem)
	for i := range c.VirtioMem {
		c.VirtioMem[i].Blocks = slices.Clone(m.VirtioMem[i].Blocks)
	}
	if m.Nodes != nil {
		c.Nodes = make([]Node, len(m.Nodes))
		for i, n := range m.Nodes {
			n.CPUs = slices.Clone(n.CPUs)
			n.Pools = slices.Clone(n.Pools)
			n.Distances = slices.Clone(n.Distances)
			c.Nodes[i] = n
		}
	}
	return c
}
