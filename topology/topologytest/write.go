package topologytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writer creates the files of a tree. A fresh tree is written with plain
// writes; a Tree's mutators write each file under a temporary name in
// stage and rename it into place, so that a reader never sees a file half
// written (sysfs attributes are read whole).
type writer struct {
	tb    testing.TB
	lean  bool            // skip the attributes nothing reads
	stage string          // "": plain writes
	made  map[string]bool // directories known to exist
}

func (w *writer) mkdir(path string) {
	w.tb.Helper()
	if w.made[path] {
		return
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		w.tb.Fatal(err)
	}
	w.made[path] = true
}

func (w *writer) file(path, content string) {
	w.tb.Helper()
	w.mkdir(filepath.Dir(path))
	if w.stage == "" {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			w.tb.Fatal(err)
		}
		return
	}
	f, err := os.CreateTemp(w.stage, "attr-")
	if err != nil {
		w.tb.Fatal(err)
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		w.tb.Fatalf("write %s: %v", path, err)
	}
}

// extra writes an attribute that only makes the tree look like the
// kernel's; a Lean machine skips it.
func (w *writer) extra(path, content string) {
	w.tb.Helper()
	if !w.lean {
		w.file(path, content)
	}
}

func (w *writer) extraDir(path string) {
	w.tb.Helper()
	if !w.lean {
		w.mkdir(path)
	}
}

func (w *writer) link(target, path string) {
	w.tb.Helper()
	if err := os.Symlink(target, path); err != nil {
		w.tb.Fatal(err)
	}
}

// Paths of the tree, relative to the sysfs root.
const (
	cpuPath  = "devices/system/cpu"
	nodePath = "devices/system/node"
	memPath  = "devices/system/memory"
)

// Write builds the tree under root and returns the sysfs and procfs roots,
// root/sys and root/proc. It stops the test on an error.
func (m Machine) Write(tb testing.TB, root string) (sys, proc string) {
	tb.Helper()
	sys, proc = filepath.Join(root, "sys"), filepath.Join(root, "proc")
	w := &writer{tb: tb, lean: m.Lean, made: map[string]bool{}}

	// CPUs.
	cpuDir := filepath.Join(sys, cpuPath)
	m.writeCPULists(w, cpuDir)
	w.file(cpuDir+"/kernel_max", "8191\n")
	w.file(cpuDir+"/isolated", "\n")
	w.file(cpuDir+"/modalias", "cpu:type:x86,ven0000fam0006mod0055:feature:,0000\n")
	w.file(cpuDir+"/uevent", "")
	w.file(cpuDir+"/smt/active", "1\n")
	if m.s390() {
		// arch/s390/kernel/topology.c: the dispatching mode,
		// horizontal (0) or vertical (1).
		w.extra(cpuDir+"/dispatching", "0\n")
	}
	w.mkdir(cpuDir + "/cpufreq")
	w.mkdir(cpuDir + "/cpuidle")
	w.mkdir(cpuDir + "/vulnerabilities")
	for _, c := range m.CPUs {
		m.writeCPU(w, fmt.Sprintf("%s/cpu%d", cpuDir, c.ID), c)
	}

	// NUMA nodes.
	nodeDir := filepath.Join(sys, nodePath)
	if m.Nodes != nil {
		m.writeNodeLists(w, nodeDir)
		w.file(nodeDir+"/uevent", "")
		w.mkdir(nodeDir + "/power")
		words := m.maskWords()
		for _, n := range m.Nodes {
			m.writeNode(w, fmt.Sprintf("%s/node%d", nodeDir, n.ID), n, words)
		}
	}

	// Memory blocks.
	if m.BlockSize > 0 {
		memDir := filepath.Join(sys, memPath)
		w.file(memDir+"/block_size_bytes", fmt.Sprintf("%x\n", m.BlockSize))
		w.file(memDir+"/auto_online_blocks", "offline\n")
		w.file(memDir+"/uevent", "")
		w.mkdir(memDir + "/power")
		for _, b := range m.Blocks {
			m.writeBlock(w, fmt.Sprintf("%s/memory%d", memDir, b.ID), b)
		}
	}

	// Node-wide hugepage pools.
	w.mkdir(filepath.Join(sys, "kernel/mm/transparent_hugepage"))
	if m.Pools != nil {
		hd := filepath.Join(sys, "kernel/mm/hugepages")
		w.mkdir(hd)
		for _, p := range m.Pools {
			pd := fmt.Sprintf("%s/hugepages-%dkB", hd, p.KB)
			for _, name := range []string{"nr_hugepages", "nr_hugepages_mempolicy", "free_hugepages"} {
				w.file(pd+"/"+name, fmt.Sprintf("%d\n", p.Nr))
			}
			for _, name := range []string{"resv_hugepages", "surplus_hugepages", "nr_overcommit_hugepages"} {
				w.file(pd+"/"+name, "0\n")
			}
		}
	}

	m.writeDIMMs(w, sys)
	m.writeVirtioMem(w, sys)
	m.writeMemmap(w, sys)

	w.file(filepath.Join(proc, "meminfo"), procMeminfo(m))
	w.file(filepath.Join(proc, "iomem"), procIomem(m))
	w.mkdir(filepath.Join(proc, "sys/kernel"))
	if m.Extra != nil {
		m.Extra(sys)
	}
	return sys, proc
}

// possible returns the possible CPUs: Possible, or else the present ones.
func (m *Machine) possible() []int {
	if m.Possible != nil {
		return m.Possible
	}
	return m.present()
}

func (m *Machine) present() []int {
	ids := make([]int, len(m.CPUs))
	for i, c := range m.CPUs {
		ids[i] = c.ID
	}
	return ids
}

func (m *Machine) online() []int {
	var ids []int
	for _, c := range m.CPUs {
		if c.Online {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// maskWords is the number of 32-bit words of a cpumask: enough for the
// highest possible CPU.
func (m *Machine) maskWords() int {
	return slices.Max(m.possible())/32 + 1
}

// writeCPULists writes cpu/online, offline, present and possible.
func (m *Machine) writeCPULists(w *writer, cpuDir string) {
	w.tb.Helper()
	possible, online := m.possible(), m.online()
	w.file(cpuDir+"/online", formatList(online)+"\n")
	w.file(cpuDir+"/offline", formatList(without(possible, online))+"\n")
	w.file(cpuDir+"/present", formatList(m.present())+"\n")
	w.file(cpuDir+"/possible", formatList(possible)+"\n")
}

// Levels of the CPU topology, for siblings.
const (
	levelDrawer = iota
	levelBook
	levelSocket
	levelCore
)

// siblings returns the online CPUs that share c's ids down to level: its
// drawer's, its book's, its socket's or its core's. Outside an s390x tree
// every CPU is in one book and drawer.
func (m *Machine) siblings(c CPU, level int) []int {
	var s []int
	for _, o := range m.CPUs {
		if !o.Online || (m.s390() && o.Drawer != c.Drawer) ||
			(level >= levelBook && m.s390() && o.Book != c.Book) ||
			(level >= levelSocket && o.Socket != c.Socket) ||
			(level >= levelCore && o.Core != c.Core) {
			continue
		}
		s = append(s, o.ID)
	}
	slices.Sort(s)
	return s
}

// writeCPUTopology writes c's topology and, with Caches, cache directories
// under dir (cpuN, or a staging copy of it). An offline CPU, or one
// marked NoTopology, has neither.
func (m *Machine) writeCPUTopology(w *writer, dir string, c CPU) {
	w.tb.Helper()
	if !c.Online || c.NoTopology {
		return
	}
	threads, pkg := m.siblings(c, levelCore), m.siblings(c, levelSocket)
	words := m.maskWords()
	w.file(dir+"/topology/core_id", fmt.Sprintf("%d\n", c.Core))
	w.file(dir+"/topology/physical_package_id", fmt.Sprintf("%d\n", c.Socket))
	w.extra(dir+"/topology/die_id", "0\n")
	w.extra(dir+"/topology/thread_siblings_list", formatList(threads)+"\n")
	w.extra(dir+"/topology/core_cpus_list", formatList(threads)+"\n")
	w.extra(dir+"/topology/core_siblings_list", formatList(pkg)+"\n")
	w.extra(dir+"/topology/package_cpus_list", formatList(pkg)+"\n")
	if m.books() {
		// drivers/base/topology.c: book_id, book_siblings(_list),
		// drawer_id, drawer_siblings(_list), written where the
		// architecture defines topology_book_id and
		// topology_drawer_id (s390, arch/s390/include/asm/topology.h).
		// book_id and drawer_id are what cAdvisor reads on s390x.
		w.file(dir+"/topology/book_id", fmt.Sprintf("%d\n", c.Book))
		w.file(dir+"/topology/drawer_id", fmt.Sprintf("%d\n", c.Drawer))
		book, drawer := m.siblings(c, levelBook), m.siblings(c, levelDrawer)
		w.extra(dir+"/topology/book_siblings", cpuMask(book, words)+"\n")
		w.extra(dir+"/topology/book_siblings_list", formatList(book)+"\n")
		w.extra(dir+"/topology/drawer_siblings", cpuMask(drawer, words)+"\n")
		w.extra(dir+"/topology/drawer_siblings_list", formatList(drawer)+"\n")
	}
	if !m.Caches {
		return
	}
	for i, cache := range []struct {
		level     int
		typ, size string
		id        int
		shared    []int
	}{
		{1, "Data", "48K", c.Core, threads},
		{1, "Instruction", "32K", c.Core, threads},
		{2, "Unified", "2048K", c.Core, threads},
		{3, "Unified", "107520K", c.Socket, pkg},
	} {
		idx := fmt.Sprintf("%s/cache/index%d", dir, i)
		w.file(idx+"/id", fmt.Sprintf("%d\n", cache.id))
		w.file(idx+"/level", fmt.Sprintf("%d\n", cache.level))
		w.file(idx+"/type", cache.typ+"\n")
		w.file(idx+"/size", cache.size+"\n")
		w.file(idx+"/shared_cpu_map", cpuMask(cache.shared, words)+"\n")
		w.extra(idx+"/shared_cpu_list", formatList(cache.shared)+"\n")
		w.extra(idx+"/coherency_line_size", "64\n")
	}
	w.extra(dir+"/cache/uevent", "")
}

// writeNodeLists writes node/online, possible, has_cpu, has_memory and
// has_normal_memory.
func (m *Machine) writeNodeLists(w *writer, nodeDir string) {
	w.tb.Helper()
	var ids, withCPU, withMem []int
	for _, n := range m.Nodes {
		ids = append(ids, n.ID)
		if len(n.CPUs) > 0 {
			withCPU = append(withCPU, n.ID)
		}
		if n.MemKB > 0 {
			withMem = append(withMem, n.ID)
		}
	}
	w.file(nodeDir+"/online", formatList(ids)+"\n")
	w.file(nodeDir+"/possible", formatList(ids)+"\n")
	w.file(nodeDir+"/has_cpu", formatList(withCPU)+"\n")
	w.file(nodeDir+"/has_memory", formatList(withMem)+"\n")
	w.file(nodeDir+"/has_normal_memory", formatList(withMem)+"\n")
}

// writeBlock writes block b into dir (memoryN, or a staging copy of it),
// with its nodeN link when the machine has node directories.
func (m *Machine) writeBlock(w *writer, dir string, b Block) {
	w.tb.Helper()
	w.file(dir+"/state", b.State+"\n")
	w.file(dir+"/removable", "1\n") // constant since Linux 5.8; not read
	w.extra(dir+"/online", onlineFlag(b.State == BlockOnline))
	w.extra(dir+"/phys_index", fmt.Sprintf("%08x\n", b.ID))
	w.extra(dir+"/phys_device", "0\n")
	w.extra(dir+"/uevent", "")
	w.extraDir(dir + "/power")
	if b.Zones != "" {
		w.file(dir+"/valid_zones", b.Zones+"\n")
	}
	if b.Node >= 0 && m.Nodes != nil {
		w.link(fmt.Sprintf("../../node/node%d", b.Node), fmt.Sprintf("%s/node%d", dir, b.Node))
	}
}

// blockFromNode is the target of the nodeN/memoryM link.
func blockFromNode(id int) string { return fmt.Sprintf("../../memory/memory%d", id) }

func onlineFlag(online bool) string {
	if online {
		return "1\n"
	}
	return "0\n"
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

// nodeMemTotalLine and procMemTotalLine are the MemTotal lines of a
// nodeN/meminfo and of /proc/meminfo, without the newline.
func nodeMemTotalLine(node int, kb uint64) string {
	return fmt.Sprintf("Node %d %-15s %8d kB", node, "MemTotal:", kb)
}

func procMemTotalLine(kb uint64) string {
	return fmt.Sprintf("%-15s %8d kB", "MemTotal:", kb)
}

func nodeMeminfo(n Node) string {
	var b strings.Builder
	line := func(key string, kb uint64) {
		fmt.Fprintf(&b, "Node %d %-15s %8d kB\n", n.ID, key+":", kb)
	}
	b.WriteString(nodeMemTotalLine(n.ID, n.MemKB) + "\n")
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

func procMeminfo(m Machine) string {
	var b strings.Builder
	line := func(key string, kb uint64) {
		fmt.Fprintf(&b, "%-15s %8d kB\n", key+":", kb)
	}
	b.WriteString(procMemTotalLine(m.MemKB) + "\n")
	line("MemFree", m.MemKB/2)
	line("MemAvailable", m.MemKB/2+m.MemKB/8)
	line("Buffers", 5908)
	line("Cached", m.MemKB/8)
	line("SwapCached", 0)
	line("Active", m.MemKB/16)
	line("Inactive", m.MemKB/16)
	line("Unevictable", 13048)
	line("Mlocked", 12012)
	line("SwapTotal", m.SwapKB)
	line("SwapFree", m.SwapKB)
	line("Zswap", 0)
	line("Dirty", 160)
	line("AnonPages", 9000)
	line("Shmem", 1000)
	line("Slab", 50000)
	line("CommitLimit", m.MemKB/2+m.SwapKB)
	line("VmallocTotal", 34359738367)
	var total, hugetlb uint64
	for _, p := range m.Pools {
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

// writeCPU writes the cpuN directory of c into dir.
func (m *Machine) writeCPU(w *writer, dir string, c CPU) {
	w.tb.Helper()
	w.mkdir(dir)
	w.extraDir(dir + "/power")
	w.extra(dir+"/uevent", "DRIVER=processor\n")
	if m.s390() {
		// arch/s390/kernel/topology.c: each CPU's polarization and
		// whether it is dedicated, whether online or not.
		w.extra(dir+"/polarization", "horizontal\n")
		w.extra(dir+"/dedicated", "0\n")
	}
	if c.ID != 0 && !c.NoOnlineFile {
		w.file(dir+"/online", onlineFlag(c.Online))
	}
	m.writeCPUTopology(w, dir, c)
}

// writeNode writes the nodeN directory of n into dir, with its cpuM and
// memoryK links; words is the cpumask width.
func (m *Machine) writeNode(w *writer, dir string, n Node, words int) {
	w.tb.Helper()
	w.mkdir(dir + "/power")
	w.file(dir+"/uevent", "")
	m.writeNodeCPUs(w, dir, n, words)
	w.file(dir+"/compact", "")
	w.file(dir+"/numastat", "numa_hit 0\n")
	for _, c := range n.CPUs {
		w.link(fmt.Sprintf("../../cpu/cpu%d", c), fmt.Sprintf("%s/cpu%d", dir, c))
	}
	for _, b := range m.Blocks {
		if b.Node == n.ID {
			w.link(blockFromNode(b.ID), fmt.Sprintf("%s/memory%d", dir, b.ID))
		}
	}
	if !n.NoMeminfo {
		w.file(dir+"/meminfo", nodeMeminfo(n))
	}
	writeDistances(w, dir, n)
	if n.Pools != nil {
		w.mkdir(dir + "/hugepages")
		for _, p := range n.Pools {
			pd := fmt.Sprintf("%s/hugepages/hugepages-%dkB", dir, p.KB)
			w.file(pd+"/nr_hugepages", fmt.Sprintf("%d\n", p.Nr))
			w.file(pd+"/free_hugepages", fmt.Sprintf("%d\n", p.Nr))
			w.file(pd+"/surplus_hugepages", "0\n")
		}
	}
}

// writeNodeCPUs writes nodeN/cpulist and cpumap.
func (m *Machine) writeNodeCPUs(w *writer, dir string, n Node, words int) {
	w.tb.Helper()
	w.file(dir+"/cpulist", formatList(n.CPUs)+"\n")
	w.file(dir+"/cpumap", cpuMask(n.CPUs, words)+"\n")
}

// writeDistances writes nodeN/distance, if n has distances.
func writeDistances(w *writer, dir string, n Node) {
	w.tb.Helper()
	if n.Distances == nil {
		return
	}
	d := make([]string, len(n.Distances))
	for i, v := range n.Distances {
		d[i] = fmt.Sprint(v)
	}
	w.file(dir+"/distance", strings.Join(d, " ")+"\n")
}
