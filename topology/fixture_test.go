package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture describes a synthetic machine. write lays it out as a sysfs and
// a procfs tree the way the kernel does: cpuN directories with topology
// only while online, nodeN directories with cpuM and memoryK symlinks,
// memoryK directories with a nodeN symlink, hugepage pools, meminfo files.
type fixture struct {
	CPUs     []fixCPU
	Possible CPUSet    // nil: the CPUs above
	Nodes    []fixNode // nil: no devices/system/node (a kernel without NUMA)

	BlockSize uint64 // 0: no devices/system/memory
	Blocks    []fixBlock

	MemKB, SwapKB uint64       // /proc/meminfo MemTotal and SwapTotal
	Pools         []fixPool    // nil: no /sys/kernel/mm/hugepages
	Caches        bool         // write cpuN/cache/indexK as on x86
	Lean          bool         // only the files cAdvisor or we read
	Extra         func(string) // optional: edit the sys tree after writing
}

type fixCPU struct {
	ID, Core, Socket int
	Online           bool
	NoTopology       bool // online, yet no topology directory
}

type fixNode struct {
	ID        int
	CPUs      []int // cpuM links: the node's present CPUs
	MemKB     uint64
	NoMeminfo bool
	Pools     []fixPool // nil: no nodeN/hugepages
	Distances []int     // nil: no distance file
}

type fixBlock struct {
	ID    int
	State string
	Zones string // valid_zones; "": no such file
	Node  int    // -1: no link

}

type fixPool struct{ KB, Nr uint64 }

// fixtureDir returns a fresh directory for a fixture tree, removed when
// the test ends. It prefers a tmpfs (/dev/shm), which is in memory like
// sysfs and an order of magnitude faster to fill and remove than a disk.
func fixtureDir(tb testing.TB) string {
	tb.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "topology-test-"); err == nil {
			tb.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return tb.TempDir()
}

// write builds the tree under root and returns the sysfs and procfs roots.
func (f fixture) write(tb testing.TB, root string) (sys, proc string) {
	tb.Helper()
	sys, proc = filepath.Join(root, "sys"), filepath.Join(root, "proc")
	made := map[string]bool{}
	mkdir := func(path string) {
		if made[path] {
			return
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			tb.Fatal(err)
		}
		made[path] = true
	}
	w := func(path, content string) {
		mkdir(filepath.Dir(path))
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	// extra writes the attributes that only make the tree look like the
	// kernel's; a Lean fixture (the big benchmark machine) skips them.
	extra := func(path, content string) {
		if !f.Lean {
			w(path, content)
		}
	}
	extraDir := func(path string) {
		if !f.Lean {
			mkdir(path)
		}
	}
	link := func(target, path string) {
		if err := os.Symlink(target, path); err != nil {
			tb.Fatal(err)
		}
	}

	// CPUs.
	cpuDir := filepath.Join(sys, "devices/system/cpu")
	var present, online CPUSet
	for _, c := range f.CPUs {
		present = append(present, c.ID)
		if c.Online {
			online = append(online, c.ID)
		}
	}
	slices.Sort(present)
	slices.Sort(online)
	possible := f.Possible
	if possible == nil {
		possible = present
	}
	w(cpuDir+"/online", online.String()+"\n")
	w(cpuDir+"/offline", possible.Difference(online).String()+"\n")
	w(cpuDir+"/present", present.String()+"\n")
	w(cpuDir+"/possible", possible.String()+"\n")
	w(cpuDir+"/kernel_max", "8191\n")
	w(cpuDir+"/isolated", "\n")
	w(cpuDir+"/modalias", "cpu:type:x86,ven0000fam0006mod0055:feature:,0000\n")
	w(cpuDir+"/uevent", "")
	w(cpuDir+"/smt/active", "1\n")
	mkdir(cpuDir + "/cpufreq")
	mkdir(cpuDir + "/cpuidle")
	mkdir(cpuDir + "/vulnerabilities")
	maskWords := possible[len(possible)-1]/32 + 1
	siblings := func(c fixCPU, sameSocketOnly bool) CPUSet {
		var s CPUSet
		for _, o := range f.CPUs {
			if !o.Online || o.Socket != c.Socket || (!sameSocketOnly && o.Core != c.Core) {
				continue
			}
			s = append(s, o.ID)
		}
		slices.Sort(s)
		return s
	}
	for _, c := range f.CPUs {
		dir := fmt.Sprintf("%s/cpu%d", cpuDir, c.ID)
		mkdir(dir)
		extraDir(dir + "/power")
		extra(dir+"/uevent", "DRIVER=processor\n")
		if c.ID != 0 {
			w(dir+"/online", map[bool]string{true: "1\n", false: "0\n"}[c.Online])
		}
		if !c.Online || c.NoTopology {
			continue
		}
		threads, pkg := siblings(c, false), siblings(c, true)
		w(dir+"/topology/core_id", fmt.Sprintf("%d\n", c.Core))
		w(dir+"/topology/physical_package_id", fmt.Sprintf("%d\n", c.Socket))
		extra(dir+"/topology/die_id", "0\n")
		extra(dir+"/topology/thread_siblings_list", threads.String()+"\n")
		extra(dir+"/topology/core_cpus_list", threads.String()+"\n")
		extra(dir+"/topology/core_siblings_list", pkg.String()+"\n")
		extra(dir+"/topology/package_cpus_list", pkg.String()+"\n")
		if f.Caches {
			for i, cache := range []struct {
				level     int
				typ, size string
				id        int
				shared    CPUSet
			}{
				{1, "Data", "48K", c.Core, threads},
				{1, "Instruction", "32K", c.Core, threads},
				{2, "Unified", "2048K", c.Core, threads},
				{3, "Unified", "107520K", c.Socket, pkg},
			} {
				idx := fmt.Sprintf("%s/cache/index%d", dir, i)
				w(idx+"/id", fmt.Sprintf("%d\n", cache.id))
				w(idx+"/level", fmt.Sprintf("%d\n", cache.level))
				w(idx+"/type", cache.typ+"\n")
				w(idx+"/size", cache.size+"\n")
				w(idx+"/shared_cpu_map", cpuMask(cache.shared, maskWords)+"\n")
				extra(idx+"/shared_cpu_list", cache.shared.String()+"\n")
				extra(idx+"/coherency_line_size", "64\n")
			}
			extra(dir+"/cache/uevent", "")
		}
	}

	// NUMA nodes.
	nodeDir := filepath.Join(sys, "devices/system/node")
	if f.Nodes != nil {
		var ids, withCPU, withMem CPUSet
		for _, n := range f.Nodes {
			ids = append(ids, n.ID)
			if len(n.CPUs) > 0 {
				withCPU = append(withCPU, n.ID)
			}
			if n.MemKB > 0 {
				withMem = append(withMem, n.ID)
			}
		}
		w(nodeDir+"/online", ids.String()+"\n")
		w(nodeDir+"/possible", ids.String()+"\n")
		w(nodeDir+"/has_cpu", withCPU.String()+"\n")
		w(nodeDir+"/has_memory", withMem.String()+"\n")
		w(nodeDir+"/has_normal_memory", withMem.String()+"\n")
		w(nodeDir+"/uevent", "")
		mkdir(nodeDir + "/power")
		for _, n := range f.Nodes {
			dir := fmt.Sprintf("%s/node%d", nodeDir, n.ID)
			mkdir(dir + "/power")
			w(dir+"/uevent", "")
			w(dir+"/cpulist", CPUSet(n.CPUs).String()+"\n")
			w(dir+"/cpumap", cpuMask(n.CPUs, maskWords)+"\n")
			w(dir+"/compact", "")
			w(dir+"/numastat", "numa_hit 0\n")
			for _, c := range n.CPUs {
				link(fmt.Sprintf("../../cpu/cpu%d", c), fmt.Sprintf("%s/cpu%d", dir, c))
			}
			for _, b := range f.Blocks {
				if b.Node == n.ID {
					link(fmt.Sprintf("../../memory/memory%d", b.ID), fmt.Sprintf("%s/memory%d", dir, b.ID))
				}
			}
			if !n.NoMeminfo {
				w(dir+"/meminfo", nodeMeminfo(n))
			}
			if n.Distances != nil {
				d := make([]string, len(n.Distances))
				for i, v := range n.Distances {
					d[i] = fmt.Sprint(v)
				}
				w(dir+"/distance", strings.Join(d, " ")+"\n")
			}
			if n.Pools != nil {
				mkdir(dir + "/hugepages")
				for _, p := range n.Pools {
					pd := fmt.Sprintf("%s/hugepages/hugepages-%dkB", dir, p.KB)
					w(pd+"/nr_hugepages", fmt.Sprintf("%d\n", p.Nr))
					w(pd+"/free_hugepages", fmt.Sprintf("%d\n", p.Nr))
					w(pd+"/surplus_hugepages", "0\n")
				}
			}
		}
	}

	// Memory blocks.
	if f.BlockSize > 0 {
		memDir := filepath.Join(sys, "devices/system/memory")
		w(memDir+"/block_size_bytes", fmt.Sprintf("%x\n", f.BlockSize))
		w(memDir+"/auto_online_blocks", "offline\n")
		w(memDir+"/uevent", "")
		mkdir(memDir + "/power")
		for _, b := range f.Blocks {
			dir := fmt.Sprintf("%s/memory%d", memDir, b.ID)
			w(dir+"/state", b.State+"\n")
			w(dir+"/removable", "1\n") // constant since Linux 5.8; not read
			extra(dir+"/online", map[bool]string{true: "1\n", false: "0\n"}[b.State == BlockOnline])
			extra(dir+"/phys_index", fmt.Sprintf("%08x\n", b.ID))
			extra(dir+"/phys_device", "0\n")
			extra(dir+"/uevent", "")
			extraDir(dir + "/power")
			if b.Zones != "" {
				w(dir+"/valid_zones", b.Zones+"\n")
			}
			if b.Node >= 0 && f.Nodes != nil {
				link(fmt.Sprintf("../../node/node%d", b.Node), fmt.Sprintf("%s/node%d", dir, b.Node))
			}
		}
	}

	// Node-wide hugepage pools.
	mkdir(filepath.Join(sys, "kernel/mm/transparent_hugepage"))
	if f.Pools != nil {
		hd := filepath.Join(sys, "kernel/mm/hugepages")
		mkdir(hd)
		for _, p := range f.Pools {
			pd := fmt.Sprintf("%s/hugepages-%dkB", hd, p.KB)
			for _, name := range []string{"nr_hugepages", "nr_hugepages_mempolicy", "free_hugepages"} {
				w(pd+"/"+name, fmt.Sprintf("%d\n", p.Nr))
			}
			for _, name := range []string{"resv_hugepages", "surplus_hugepages", "nr_overcommit_hugepages"} {
				w(pd+"/"+name, "0\n")
			}
		}
	}

	w(filepath.Join(proc, "meminfo"), procMeminfo(f))
	mkdir(filepath.Join(proc, "sys/kernel"))
	if f.Extra != nil {
		f.Extra(sys)
	}
	return sys, proc
}

// cpuMask renders a cpumask as the kernel does: comma-separated 32-bit hex
// words, most significant first.
func cpuMask(cpus []int, words int) string {
	ws := make([]uint32, words)
	for _, c := range cpus {
		ws[c/32] |= 1 << (c % 32)
	}
	parts := make([]string, words)
	for i := range ws {
		parts[words-1-i] = fmt.Sprintf("%08x", ws[i])
	}
	return strings.Join(parts, ",")
}

func nodeMeminfo(n fixNode) string {
	var b strings.Builder
	line := func(key string, kb uint64) {
		fmt.Fprintf(&b, "Node %d %-15s %8d kB\n", n.ID, key+":", kb)
	}
	line("MemTotal", n.MemKB)
	line("MemFree", n.MemKB/2)
	line("MemUsed", n.MemKB-n.MemKB/2)
	line("SwapCached", 0)
	line("Active", n.MemKB/8)
	line("Inactive", n.MemKB/8)
	line("Unevictable", 0)
	line("Mlocked", 0)
	line("Dirty", 0)
	line("FilePages", n.MemKB/8)
	line("AnonPages", n.MemKB/16)
	line("Shmem", 0)
	line("KernelStack", 1024)
	line("PageTables", 2048)
	line("Slab", 4096)
	var total, free uint64
	for _, p := range n.Pools {
		if p.KB == 2048 {
			total, free = p.Nr, p.Nr
		}
	}
	fmt.Fprintf(&b, "Node %d HugePages_Total: %5d\n", n.ID, total)
	fmt.Fprintf(&b, "Node %d HugePages_Free:  %5d\n", n.ID, free)
	fmt.Fprintf(&b, "Node %d HugePages_Surp:  %5d\n", n.ID, 0)
	return b.String()
}

func procMeminfo(f fixture) string {
	var b strings.Builder
	line := func(key string, kb uint64) {
		fmt.Fprintf(&b, "%-15s %8d kB\n", key+":", kb)
	}
	line("MemTotal", f.MemKB)
	line("MemFree", f.MemKB/2)
	line("MemAvailable", f.MemKB/2+f.MemKB/8)
	line("Buffers", 5908)
	line("Cached", f.MemKB/8)
	line("SwapCached", 0)
	line("Active", f.MemKB/16)
	line("Inactive", f.MemKB/16)
	line("Unevictable", 13048)
	line("Mlocked", 12012)
	line("SwapTotal", f.SwapKB)
	line("SwapFree", f.SwapKB)
	line("Zswap", 0)
	line("Dirty", 160)
	line("AnonPages", 9000)
	line("Shmem", 1000)
	line("Slab", 50000)
	line("CommitLimit", f.MemKB/2+f.SwapKB)
	line("VmallocTotal", 34359738367)
	var total, hugetlb uint64
	for _, p := range f.Pools {
		if p.KB == 2048 {
			total = p.Nr
		}
		hugetlb += p.KB * p.Nr
	}
	fmt.Fprintf(&b, "HugePages_Total: %5d\n", total)
	fmt.Fprintf(&b, "HugePages_Free:  %5d\n", total)
	fmt.Fprintf(&b, "HugePages_Rsvd:  %5d\n", 0)
	fmt.Fprintf(&b, "HugePages_Surp:  %5d\n", 0)
	line("Hugepagesize", 2048)
	line("Hugetlb", hugetlb)
	line("DirectMap4k", 176000)
	line("DirectMap2M", 8000000)
	return b.String()
}

// smtCPUs returns CPUs first..first+n-1 as SMT pairs on socket, numbering
// cores from core0; offline lists the ids to leave offline.
func smtCPUs(first, n, socket, core0 int, offline ...int) []fixCPU {
	cpus := make([]fixCPU, n)
	for i := range cpus {
		id := first + i
		cpus[i] = fixCPU{ID: id, Core: core0 + i/2, Socket: socket, Online: !slices.Contains(offline, id)}
	}
	return cpus
}

// blocks returns count blocks from first, all in state/zones on node.
func blocks(first, count int, state, zones string, node int) []fixBlock {
	bs := make([]fixBlock, count)
	for i := range bs {
		bs[i] = fixBlock{ID: first + i, State: state, Zones: zones, Node: node}
	}
	return bs
}

func ints(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

const (
	kiB = 1024
	miB = 1024 * kiB
	giB = 1024 * miB
)

// machine1024 is the benchmark machine: 2 sockets of 8 NUMA nodes, 64 CPUs
// (32 SMT cores) per node, one CPU per node offline; 4096 memory blocks of
// 128 MiB, 256 per node, the last 32 of each node movable and 8 of those
// offline; 512 × 2 MiB and 4 × 1 GiB hugepages per node.
func machine1024() fixture {
	const nodes, perNode, blocksPerNode = 16, 64, 256
	f := fixture{BlockSize: 128 * miB, Caches: true, Lean: true}
	var memKB uint64
	for n := range nodes {
		socket := n / 8
		first := n * perNode
		f.CPUs = append(f.CPUs, smtCPUs(first, perNode, socket, (n%8)*perNode/2, first+perNode-1)...)
		b0 := n * blocksPerNode
		f.Blocks = append(f.Blocks, blocks(b0, blocksPerNode-32, BlockOnline, "Normal", n)...)
		f.Blocks = append(f.Blocks, blocks(b0+blocksPerNode-32, 24, BlockOnline, "Movable", n)...)
		f.Blocks = append(f.Blocks, blocks(b0+blocksPerNode-8, 8, BlockOffline, "Movable Normal", n)...)
		nodeKB := uint64(blocksPerNode-8) * 128 * 1024
		memKB += nodeKB
		dist := make([]int, nodes)
		for m := range dist {
			switch {
			case m == n:
				dist[m] = 10
			case m/8 == socket:
				dist[m] = 12
			default:
				dist[m] = 32
			}
		}
		f.Nodes = append(f.Nodes, fixNode{
			ID: n, CPUs: ints(first, first+perNode-1), MemKB: nodeKB,
			Pools:     []fixPool{{2048, 512}, {1048576, 4}},
			Distances: dist,
		})
	}
	f.MemKB = memKB
	f.Pools = []fixPool{{2048, 512 * nodes}, {1048576, 4 * nodes}}
	return f
}
