package topologytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Tree is a tree written by [Machine.WriteTree] that a test changes the way
// the kernel changes sysfs and procfs on a hotplug. After each change the
// tree is what [Machine.Write] would write for [Tree.Machine], except that
// the meminfo lines other than MemTotal keep their old values, and edits
// made by Machine.Extra are not known to the Tree.
//
// Every file a method writes is renamed into place, and every directory it
// adds or removes is moved in or out whole, so code reading the tree at
// the same time sees each file either before or after the change, as
// sysfs attributes are read whole. A Tree itself is not safe for
// concurrent use: call its methods from the test's goroutine; they stop
// the test on an error.
type Tree struct {
	Sys, Proc string // the sysfs and procfs roots

	tb    testing.TB
	m     Machine // what the tree holds now
	stage string  // beside sys and proc: files and directories before they move in
	// memmapNext is the number of the next firmware memmap entry.
	memmapNext int
}

// WriteTree writes the tree under root as Write does and returns it for
// changes; it also makes root/.stage, where changes are prepared.
func (m Machine) WriteTree(tb testing.TB, root string) *Tree {
	tb.Helper()
	sys, proc := m.Write(tb, root)
	stage := filepath.Join(root, ".stage")
	if err := os.Mkdir(stage, 0o755); err != nil {
		tb.Fatal(err)
	}
	return &Tree{Sys: sys, Proc: proc, tb: tb, m: m.clone(), stage: stage, memmapNext: nextMemmapIndex(m.Memmap)}
}

// Machine returns a copy of the description of what the tree holds now.
func (t *Tree) Machine() Machine { return t.m.clone() }

// BlockSize returns the memory block size in bytes.
func (t *Tree) BlockSize() uint64 { return t.m.BlockSize }

// MemTotalKB returns the MemTotal of /proc/meminfo, in kB.
func (t *Tree) MemTotalKB() uint64 { return t.m.MemKB }

// NodeMemTotalKB returns the MemTotal of nodeN/meminfo, in kB.
func (t *Tree) NodeMemTotalKB(node int) uint64 {
	t.tb.Helper()
	return t.m.Nodes[t.node(node)].MemKB
}

// SetCPUOnline takes CPU id offline or brings it online, as writing
// cpuN/online does: cpuN/online, cpu/online and cpu/offline change; the
// CPU's topology (and cache) directory goes away while it is offline and
// comes back when it is online; the sibling lists and shared cache maps of
// the other CPUs of its socket (and, on s390x, its book and drawer) follow. The node's cpulist and its cpuN
// link stay: they name the present CPUs. Setting the state the CPU is
// already in does nothing. cpu0, and a CPU marked NoOnlineFile, have no online file.
func (t *Tree) SetCPUOnline(id int, online bool) {
	t.tb.Helper()
	i := t.cpu(id)
	if id == 0 || t.m.CPUs[i].NoOnlineFile {
		t.tb.Fatalf("topologytest: cpu%d has no online file", id)
	}
	if t.m.CPUs[i].Online == online {
		return
	}
	t.m.CPUs[i].Online = online
	c := t.m.CPUs[i]
	cpuDir := filepath.Join(t.Sys, cpuPath)
	dir := fmt.Sprintf("%s/cpu%d", cpuDir, id)
	w := t.writer()
	if online {
		// The kernel adds the topology and cache directories whole.
		staged := t.stageDir()
		t.m.writeCPUTopology(t.plain(), staged, c)
		for _, sub := range []string{"topology", "cache"} {
			t.moveIn(filepath.Join(staged, sub), filepath.Join(dir, sub))
		}
		t.removeAll(staged)
	} else {
		t.moveOut(filepath.Join(dir, "topology"))
		t.moveOut(filepath.Join(dir, "cache"))
	}
	w.file(dir+"/online", onlineFlag(online))
	t.m.writeCPULists(w, cpuDir)
	for _, o := range t.m.CPUs {
		if o.ID != id && (o.Socket == c.Socket || t.m.s390() && o.Drawer == c.Drawer) {
			t.m.writeCPUTopology(w, fmt.Sprintf("%s/cpu%d", cpuDir, o.ID), o)
		}
	}
}

// SetBlockState sets memory block id to state (BlockOnline, BlockOffline
// or BlockGoingOffline), as onlining or offlining it does: memoryN/state,
// memoryN/online, and memoryN/valid_zones as the kernel shows it. An online
// block shows the one zone it is in: the default (first) of the zones it
// could be onlined to. A block that is not online shows the zones it could
// be onlined to, the default first: the zone it was in, then the other of
// Normal and Movable. MemTotal is not changed: see SetMemTotalKB and
// SetNodeMemTotalKB. Setting the state the block is in does nothing.
func (t *Tree) SetBlockState(id int, state string) {
	t.tb.Helper()
	t.checkState(state)
	b := &t.m.Blocks[t.block(id)]
	if b.State == state {
		return
	}
	b.State = state
	b.Zones = validZones(b.Zones, state)
	dir := fmt.Sprintf("%s/memory%d", filepath.Join(t.Sys, memPath), id)
	w := t.writer()
	w.file(dir+"/state", state+"\n")
	w.extra(dir+"/online", onlineFlag(state == BlockOnline))
	if b.Zones != "" {
		w.file(dir+"/valid_zones", b.Zones+"\n")
	}
}

// validZones returns what valid_zones shows for a block that moved to
// state, given what it showed before; "" stays "" (no valid_zones).
func validZones(zones, state string) string {
	words := strings.Fields(zones)
	switch {
	case len(words) == 0:
		return ""
	case state == BlockOnline:
		return words[0]
	case len(words) > 1:
		return zones
	case words[0] == "Normal":
		return "Normal Movable"
	case words[0] == "Movable":
		return "Movable Normal"
	}
	return zones
}

// AddBlocks adds memory blocks first..first+n-1 in state with valid_zones
// zones ("" for none) on node (-1 for none), as a memory hot-add does:
// each memoryN directory appears whole, then its nodeN/memoryN link.
// With a firmware memmap, each block gets a System RAM entry there, as
// add_memory gives the memory added one block at a time through
// memory/probe. MemTotal is not changed.
func (t *Tree) AddBlocks(first, n, node int, state, zones string) {
	t.tb.Helper()
	t.addBlocks(first, n, node, state, zones)
	for id := first; id < first+n; id++ {
		t.addMemmapRAM(id, 1)
	}
}

// addBlocks adds the blocks, with no memmap entry.
func (t *Tree) addBlocks(first, n, node int, state, zones string) {
	t.tb.Helper()
	if t.m.BlockSize == 0 {
		t.tb.Fatalf("topologytest: the machine has no memory blocks (BlockSize 0)")
	}
	t.checkState(state)
	links := node >= 0 && t.m.Nodes != nil
	if links {
		t.node(node)
	}
	memDir := filepath.Join(t.Sys, memPath)
	for id := first; id < first+n; id++ {
		if t.findBlock(id) >= 0 {
			t.tb.Fatalf("topologytest: memory%d exists", id)
		}
		b := Block{ID: id, State: state, Zones: zones, Node: node}
		staged := t.stageDir()
		t.m.writeBlock(t.plain(), staged, b)
		t.moveIn(staged, fmt.Sprintf("%s/memory%d", memDir, id))
		if links {
			path := fmt.Sprintf("%s/node%d/memory%d", filepath.Join(t.Sys, nodePath), node, id)
			if err := os.Symlink(blockFromNode(id), path); err != nil {
				t.tb.Fatal(err)
			}
		}
		t.m.Blocks = append(t.m.Blocks, b)
	}
	t.writeIomem()
}

// RemoveBlocks removes memory blocks first..first+n-1, as a memory
// hot-remove does: the nodeN/memoryM link goes, then the memoryM
// directory, whole, then the firmware memmap entry of exactly that block
// if there is one (AddBlocks added it). The kernel removes only offline
// blocks; so does RemoveBlocks. MemTotal is not changed.
func (t *Tree) RemoveBlocks(first, n int) {
	t.tb.Helper()
	memDir := filepath.Join(t.Sys, memPath)
	for id := first; id < first+n; id++ {
		i := t.block(id)
		b := t.m.Blocks[i]
		if b.State != BlockOffline {
			t.tb.Fatalf("topologytest: memory%d is %s; only an offline block can be removed", id, b.State)
		}
		if d := t.dimmOf(id); d >= 0 {
			t.tb.Fatalf("topologytest: memory%d belongs to %s: remove it with RemoveDIMM", id, DIMMName(t.m.DIMMs[d].Instance))
		}
		for k := range t.m.VirtioMem {
			v := &t.m.VirtioMem[k]
			v.Blocks = slices.DeleteFunc(v.Blocks, func(b int) bool { return b == id })
		}
		if b.Node >= 0 && t.m.Nodes != nil {
			path := fmt.Sprintf("%s/node%d/memory%d", filepath.Join(t.Sys, nodePath), b.Node, id)
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.tb.Fatal(err)
			}
		}
		t.moveOut(fmt.Sprintf("%s/memory%d", memDir, id))
		t.m.Blocks = slices.Delete(t.m.Blocks, i, i+1)
		t.removeMemmapRAM(id, 1)
	}
	t.writeIomem()
}

// AddCPU hot-adds CPU c (its ID, Core and Socket; it arrives offline) to
// node (-1 for none), as an ACPI CPU hot-add does: the cpuN directory
// appears whole, then the nodeN/cpuN link; cpu/present and cpu/offline,
// and the node's cpulist, cpumap and node/has_cpu follow. The id must be
// possible and not present. Bring it online with SetCPUOnline.
func (t *Tree) AddCPU(c CPU, node int) {
	t.tb.Helper()
	for _, o := range t.m.CPUs {
		if o.ID == c.ID {
			t.tb.Fatalf("topologytest: cpu%d exists", c.ID)
		}
	}
	if t.m.Possible == nil {
		t.m.Possible = t.m.present()
	}
	if !slices.Contains(t.m.Possible, c.ID) {
		t.tb.Fatalf("topologytest: cpu%d is not possible", c.ID)
	}
	ni := -1
	if node >= 0 && t.m.Nodes != nil {
		ni = t.node(node)
	}
	c.Online, c.NoTopology = false, false
	cpuDir := filepath.Join(t.Sys, cpuPath)
	staged := t.stageDir()
	t.m.writeCPU(t.plain(), staged, c)
	t.moveIn(staged, fmt.Sprintf("%s/cpu%d", cpuDir, c.ID))
	t.m.CPUs = append(t.m.CPUs, c)
	w := t.writer()
	if ni >= 0 {
		n := &t.m.Nodes[ni]
		dir := fmt.Sprintf("%s/node%d", filepath.Join(t.Sys, nodePath), node)
		w.link(fmt.Sprintf("../../cpu/cpu%d", c.ID), fmt.Sprintf("%s/cpu%d", dir, c.ID))
		n.CPUs = append(n.CPUs, c.ID)
		t.m.writeNodeCPUs(w, dir, *n, t.m.maskWords())
		t.m.writeNodeLists(w, filepath.Join(t.Sys, nodePath))
	}
	t.m.writeCPULists(w, cpuDir)
}

// RemoveCPU hot-removes CPU id, as an ACPI CPU hot-remove does: the
// nodeN/cpuN link goes, then the cpuN directory, whole; the lists follow
// as for AddCPU. The kernel removes only an offline CPU; so does RemoveCPU.
func (t *Tree) RemoveCPU(id int) {
	t.tb.Helper()
	i := t.cpu(id)
	if t.m.CPUs[i].Online {
		t.tb.Fatalf("topologytest: cpu%d is online; only an offline CPU can be removed", id)
	}
	if t.m.Possible == nil {
		t.m.Possible = t.m.present()
	}
	w := t.writer()
	nodeDir := filepath.Join(t.Sys, nodePath)
	for ni := range t.m.Nodes {
		n := &t.m.Nodes[ni]
		if k := slices.Index(n.CPUs, id); k >= 0 {
			dir := fmt.Sprintf("%s/node%d", nodeDir, n.ID)
			if err := os.Remove(fmt.Sprintf("%s/cpu%d", dir, id)); err != nil {
				t.tb.Fatal(err)
			}
			n.CPUs = slices.Delete(n.CPUs, k, k+1)
			t.m.writeNodeCPUs(w, dir, *n, t.m.maskWords())
			t.m.writeNodeLists(w, nodeDir)
		}
	}
	t.moveOut(fmt.Sprintf("%s/cpu%d", filepath.Join(t.Sys, cpuPath), id))
	t.m.CPUs = slices.Delete(t.m.CPUs, i, i+1)
	t.m.writeCPULists(w, filepath.Join(t.Sys, cpuPath))
}

// AddNode adds NUMA node id without CPUs or memory blocks (a CXL memory
// expander coming up), with nodeN/meminfo showing kb: its directory
// appears whole, node/online and the other lists follow. The id must be
// above every node's. When the nodes have distances, every node's distance
// file gains the new node (at 20; 10 to itself).
func (t *Tree) AddNode(id int, kb uint64) {
	t.tb.Helper()
	if t.m.Nodes == nil {
		t.tb.Fatalf("topologytest: the machine has no node directories")
	}
	for _, n := range t.m.Nodes {
		if n.ID >= id {
			t.tb.Fatalf("topologytest: node%d: the new node's id must be above node%d's", id, n.ID)
		}
	}
	n := Node{ID: id, MemKB: kb}
	withDistances := len(t.m.Nodes) > 0 && t.m.Nodes[0].Distances != nil
	if withDistances {
		for range t.m.Nodes {
			n.Distances = append(n.Distances, 20)
		}
		n.Distances = append(n.Distances, 10)
	}
	nodeDir := filepath.Join(t.Sys, nodePath)
	staged := t.stageDir()
	t.m.writeNode(t.plain(), staged, n, t.m.maskWords())
	t.moveIn(staged, fmt.Sprintf("%s/node%d", nodeDir, id))
	w := t.writer()
	if withDistances {
		for i := range t.m.Nodes {
			o := &t.m.Nodes[i]
			o.Distances = append(o.Distances, 20)
			writeDistances(w, fmt.Sprintf("%s/node%d", nodeDir, o.ID), *o)
		}
	}
	t.m.Nodes = append(t.m.Nodes, n)
	t.m.writeNodeLists(w, nodeDir)
}

// RemoveNode removes NUMA node id, which must have no CPUs and no memory
// blocks left: its directory goes whole, the lists and the other nodes'
// distance files follow.
func (t *Tree) RemoveNode(id int) {
	t.tb.Helper()
	i := t.node(id)
	if len(t.m.Nodes[i].CPUs) > 0 {
		t.tb.Fatalf("topologytest: node%d has CPUs", id)
	}
	for _, b := range t.m.Blocks {
		if b.Node == id {
			t.tb.Fatalf("topologytest: node%d has memory%d", id, b.ID)
		}
	}
	nodeDir := filepath.Join(t.Sys, nodePath)
	t.moveOut(fmt.Sprintf("%s/node%d", nodeDir, id))
	t.m.Nodes = slices.Delete(t.m.Nodes, i, i+1)
	w := t.writer()
	for k := range t.m.Nodes {
		o := &t.m.Nodes[k]
		if o.Distances != nil && i < len(o.Distances) {
			o.Distances = slices.Delete(o.Distances, i, i+1)
			writeDistances(w, fmt.Sprintf("%s/node%d", nodeDir, o.ID), *o)
		}
	}
	t.m.writeNodeLists(w, nodeDir)
}

// SetMemTotalKB sets the MemTotal line of /proc/meminfo to kb; the other
// lines stay as they are.
func (t *Tree) SetMemTotalKB(kb uint64) {
	t.tb.Helper()
	t.replaceLine(filepath.Join(t.Proc, "meminfo"), "MemTotal:", procMemTotalLine(kb))
	t.m.MemKB = kb
}

// SetNodeMemTotalKB sets the MemTotal line of nodeN/meminfo to kb, the
// other lines staying as they are, and updates node/has_memory and
// has_normal_memory when the node gains its first or loses its last memory.
func (t *Tree) SetNodeMemTotalKB(node int, kb uint64) {
	t.tb.Helper()
	i := t.node(node)
	if t.m.Nodes[i].NoMeminfo {
		t.tb.Fatalf("topologytest: node%d has no meminfo", node)
	}
	nodeDir := filepath.Join(t.Sys, nodePath)
	t.replaceLine(fmt.Sprintf("%s/node%d/meminfo", nodeDir, node),
		fmt.Sprintf("Node %d MemTotal:", node), nodeMemTotalLine(node, kb))
	had := t.m.Nodes[i].MemKB > 0
	t.m.Nodes[i].MemKB = kb
	if had != (kb > 0) {
		t.m.writeNodeLists(t.writer(), nodeDir)
	}
}

// replaceLine replaces the line of path that starts with prefix.
func (t *Tree) replaceLine(path, prefix, line string) {
	t.tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.tb.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i], found = line, true
			break
		}
	}
	if !found {
		t.tb.Fatalf("topologytest: no %q line in %s", prefix, path)
	}
	t.writer().file(path, strings.Join(lines, "\n"))
}

func (t *Tree) checkState(state string) {
	t.tb.Helper()
	switch state {
	case BlockOnline, BlockOffline, BlockGoingOffline:
	default:
		t.tb.Fatalf("topologytest: memory block state %q: want online, offline or going-offline", state)
	}
}

func (t *Tree) cpu(id int) int {
	t.tb.Helper()
	for i, c := range t.m.CPUs {
		if c.ID == id {
			return i
		}
	}
	t.tb.Fatalf("topologytest: no cpu%d", id)
	return -1
}

func (t *Tree) node(id int) int {
	t.tb.Helper()
	for i, n := range t.m.Nodes {
		if n.ID == id {
			return i
		}
	}
	t.tb.Fatalf("topologytest: no node%d", id)
	return -1
}

func (t *Tree) findBlock(id int) int {
	for i, b := range t.m.Blocks {
		if b.ID == id {
			return i
		}
	}
	return -1
}

func (t *Tree) block(id int) int {
	t.tb.Helper()
	i := t.findBlock(id)
	if i < 0 {
		t.tb.Fatalf("topologytest: no memory%d", id)
	}
	return i
}

// writer writes files in place, each renamed in whole.
func (t *Tree) writer() *writer {
	return &writer{tb: t.tb, lean: t.m.Lean, stage: t.stage, made: map[string]bool{}}
}

// plain writes files into a staged directory that nothing reads yet.
func (t *Tree) plain() *writer {
	return &writer{tb: t.tb, lean: t.m.Lean, made: map[string]bool{}}
}

// stageDir returns a new empty directory in the stage, mode 0755 like the
// directories Write makes.
func (t *Tree) stageDir() string {
	t.tb.Helper()
	d, err := os.MkdirTemp(t.stage, "dir-")
	if err == nil {
		err = os.Chmod(d, 0o755)
	}
	if err != nil {
		t.tb.Fatal(err)
	}
	return d
}

// moveIn renames staged to path; a staged path that was not made is
// skipped.
func (t *Tree) moveIn(staged, path string) {
	t.tb.Helper()
	if _, err := os.Lstat(staged); errors.Is(err, os.ErrNotExist) {
		return
	}
	if err := os.Rename(staged, path); err != nil {
		t.tb.Fatal(err)
	}
}

// moveOut takes path out of the tree in one rename and deletes it; a path
// that does not exist is skipped.
func (t *Tree) moveOut(path string) {
	t.tb.Helper()
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return
	}
	gone := t.stageDir()
	if err := os.Rename(path, filepath.Join(gone, filepath.Base(path))); err != nil {
		t.tb.Fatal(err)
	}
	t.removeAll(gone)
}

func (t *Tree) removeAll(path string) {
	t.tb.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.tb.Fatal(err)
	}
}
