package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DeviceKind is the kind of kernel object a uevent names.
type DeviceKind uint8

const (
	DeviceOther  DeviceKind = iota // anything but the three below
	DeviceCPU                      // /devices/system/cpu/cpuN
	DeviceMemory                   // /devices/system/memory/memoryN
	DeviceNode                     // /devices/system/node/nodeN
)

// Device names one CPU, memory block or NUMA node, as a uevent's DEVPATH
// does. It only says where to look: [FS.Update] reads the object itself.
type Device struct {
	Kind DeviceKind
	ID   int
}

// String returns "cpu17", "memory4711", "node3", or "other device".
func (d Device) String() string {
	switch d.Kind {
	case DeviceCPU:
		return "cpu" + strconv.Itoa(d.ID)
	case DeviceMemory:
		return "memory" + strconv.Itoa(d.ID)
	case DeviceNode:
		return "node" + strconv.Itoa(d.ID)
	}
	return "other device"
}

// ParseDevPath returns the device a uevent's DEVPATH (relative to /sys)
// names: "/devices/system/cpu/cpu17" is {DeviceCPU, 17}. Any other path,
// one below such a device included, is a DeviceOther.
func ParseDevPath(devpath string) Device {
	for _, k := range [...]struct {
		dir, prefix string
		kind        DeviceKind
	}{
		{"/devices/system/cpu/", "cpu", DeviceCPU},
		{"/devices/system/memory/", "memory", DeviceMemory},
		{"/devices/system/node/", "node", DeviceNode},
	} {
		if name, ok := strings.CutPrefix(devpath, k.dir); ok {
			if id, ok := numberedName([]byte(name), k.prefix); ok {
				return Device{Kind: k.kind, ID: id}
			}
			break
		}
	}
	return Device{Kind: DeviceOther}
}

// Update returns the model after a batch of uevents that named devs,
// given the model before them. Instead of reading the whole machine it
// re-reads, always from the filesystem and never from the events:
//
//   - the four CPU lists and /proc/meminfo, the node-wide hugepage pools,
//     pid_max and the kubelet root filesystem's size (the totals capacity
//     is made of), the list of node directories, and every node's
//     MemTotal (a kernel that accounts memory to its nodes lazily moves
//     them with no uevent and no move of /proc/meminfo);
//   - for each named CPU: whether its cpuN directory exists, and in which
//     node directory it appears with its topology ids;
//   - for each named memory block: its state, zone and node link; for the
//     nodes such blocks belong to: their meminfo, their hugepage pools and
//     the zones of their offline blocks (the kernel's default zone for an
//     offline block follows its node's zones, and changes without a uevent
//     of its own).
//
// The result equals what [FS.Snapshot] would return at that moment, as
// long as only the named devices changed (and, with a non-default
// memory_hotplug.online_policy such as auto-movable, offline blocks of
// other nodes kept their default zone). Where a re-read shows that
// something else changed, Update reads the whole model instead: a CPU list
// that moved for a CPU no event named, a node directory that appeared or
// went away, MemTotal moving by another amount than the nodes of the
// named memory blocks did,
// a node-wide hugepage pool that changed. So do an event for a node
// directory, an event for any other device, a nil prev and a read that
// fails. A forged or stale event therefore changes nothing: the objects it
// names are read and found as they were.
//
// full is "" when the update was incremental; otherwise it says why the
// whole model was read ("no previous model", "node3 event", "cpu/online
// changed for cpu5, which no event named"). A full rebuild remains the
// answer to lost events and to periodic resyncs.
//
// The new snapshot shares with prev every slice the update did not change
// (the CPU device list, each untouched node's CPUs, pools and distances,
// the memory blocks when none changed). That is safe because a Snapshot
// is never modified once returned; the slices that change are copied.
func (fs FS) Update(prev *Snapshot, devs []Device) (s *Snapshot, full string, err error) {
	if err := fs.ready(); err != nil {
		return nil, "", err
	}
	if prev == nil {
		full = "no previous model"
	} else if s, full, err = fs.update(prev, devs, false); err != nil {
		full = "incremental read failed: " + err.Error()
	}
	if full == "" {
		return s, "", nil
	}
	s, err = fs.Snapshot()
	return s, full, err
}

// UpdateCPUs is the part of Update that a batch of CPU events needs
// first: the model with the named CPUs re-read, from what any model of an
// online or offline CPU must read (the four CPU lists, each named CPU's
// directory, the node directories, the node that links each online one
// and its topology ids), and everything else (the memory, hugepages,
// pid_max, the kubelet root filesystem) taken from prev unread. So a CPU
// event's capacity can be published at the kernel's floor, before the
// rest is read.
//
// It never reads the whole machine: why is non-empty, with no snapshot,
// when the batch named anything but CPUs, prev is nil, or what it read
// does not add up the way Update would find (a CPU list moved for a CPU
// no event named, the node directories changed). Update with the same
// arguments then reads the rest; the two agree unless something other
// than the named CPUs changed, which Update's model then shows.
func (fs FS) UpdateCPUs(prev *Snapshot, devs []Device) (s *Snapshot, why string, err error) {
	if err := fs.ready(); err != nil {
		return nil, "", err
	}
	if prev == nil {
		return nil, "no previous model", nil
	}
	return fs.update(prev, devs, true)
}

// update does the incremental part of Update: a snapshot, or the reason
// it must be read whole. With cpusOnly (UpdateCPUs) it takes only CPU
// events and reads nothing but what they need.
func (fs FS) update(prev *Snapshot, devs []Device, cpusOnly bool) (*Snapshot, string, error) {
	var cpus, blocks []int
	for _, d := range devs {
		switch {
		case d.Kind == DeviceCPU:
			cpus = append(cpus, d.ID)
		case cpusOnly:
			return nil, "an event named " + d.String() + ", not a CPU", nil
		case d.Kind == DeviceMemory:
			blocks = append(blocks, d.ID)
		case d.Kind == DeviceNode:
			return nil, d.String() + " event", nil
		default:
			return nil, "an event named no cpu, memory block or node", nil
		}
	}
	slices.Sort(cpus)
	cpus = slices.Compact(cpus)
	slices.Sort(blocks)
	blocks = slices.Compact(blocks)
	if len(blocks) > 0 && prev.MemoryBlocks == nil {
		return nil, "memory block event, and the model has no memory blocks", nil
	}

	r := getReader()
	defer putReader(r)
	defer r.useFiles(fs.cache)()
	s := &Snapshot{MemoryBlockSize: prev.MemoryBlockSize}

	// CPU lists: every CPU that moved must have been named.
	var err error
	if s.CPUs, err = fs.readCPULists(r); err != nil {
		return nil, "", err
	}
	if why := unnamedCPU(prev.CPUs, s.CPUs, cpus); why != "" {
		return nil, why, nil
	}
	if s.CPUs.Devices, err = fs.updateDevices(r, prev.CPUs.Devices, cpus); err != nil {
		return nil, "", err
	}

	// Node directories: the same ones as before, or read everything.
	nodes, err := openDir(fs.nodeDir)
	if err != nil && !isNotExist(err) {
		return nil, "", err
	}
	if err == nil {
		defer nodes.close()
		if why, err := sameNodes(r, nodes, prev.Nodes); why != "" || err != nil {
			return nil, why, err
		}
	} else if prev.Nodes != nil {
		return nil, "the node directories went away", nil
	}
	u := nodeUpdate{prev: prev.Nodes, nodes: prev.Nodes, books: fs.books}
	for _, c := range cpus {
		if err := u.cpu(r, nodes, c, s.CPUs.Online.Contains(c)); err != nil {
			return nil, "", err
		}
	}
	if cpusOnly {
		s.Nodes = u.nodes
		s.MemoryBlocks = prev.MemoryBlocks
		s.MemTotal, s.SwapTotal, s.Hugepages = prev.MemTotal, prev.SwapTotal, prev.Hugepages
		s.EphemeralStorage, s.EphemeralStorageError, s.PIDMax = prev.EphemeralStorage, prev.EphemeralStorageError, prev.PIDMax
		return s, "", nil
	}

	// Memory blocks, and the nodes they belong to.
	s.MemoryBlocks = prev.MemoryBlocks
	if len(blocks) > 0 {
		if s.MemoryBlocks, err = fs.updateBlocks(r, nodes, &u, prev.MemoryBlocks, blocks); err != nil {
			return nil, "", err
		}
	}
	touched := make([]bool, len(u.nodes))
	for i := range u.nodes {
		if touched[i] = u.touched(i); !touched[i] {
			continue
		}
		n := u.node(i)
		if err := readNodeMemory(r, nodes, n); err != nil {
			return nil, "", err
		}
	}
	// Every other node's MemTotal too: a kernel that accounts memory to
	// its nodes lazily moves nodeN/meminfo with no uevent and no move of
	// /proc/meminfo (node0 growing from 9 to 19.8 GiB in the minutes
	// after boot).
	for i := range u.nodes {
		if touched[i] {
			continue
		}
		mt, err := readNodeMemTotal(r, nodes, u.nodes[i].ID)
		if err != nil {
			return nil, "", err
		}
		if mt != u.nodes[i].MemTotal {
			u.node(i).MemTotal = mt
		}
	}
	s.Nodes = u.nodes

	if err := fs.readTotals(r, s); err != nil {
		return nil, "", err
	}
	if !slices.Equal(s.Hugepages, prev.Hugepages) {
		return nil, "a node-wide hugepage pool changed", nil
	}
	if len(s.Nodes) > 0 {
		// A memory block that came or went moves /proc/meminfo's
		// MemTotal by what it moves its node's: a move the nodes the
		// events named do not account for is a block on another node
		// that no event named. The other nodes' own moves (lazy
		// accounting) leave /proc/meminfo as it was.
		var moved int64
		for i := range s.Nodes {
			if touched[i] {
				moved += int64(s.Nodes[i].MemTotal) - int64(prev.Nodes[i].MemTotal)
			}
		}
		if d := int64(s.MemTotal) - int64(prev.MemTotal); d != moved {
			return nil, fmt.Sprintf("MemTotal moved by %d bytes, the nodes of the named devices by %d", d, moved), nil
		}
	}
	return s, "", nil
}

// unnamedCPU returns why the CPU lists cannot be trusted to have moved
// only for the named CPUs (sorted), "" when they can.
func unnamedCPU(old, new CPUs, named []int) string {
	for _, l := range [...]struct {
		name     string
		old, new CPUSet
	}{
		{"online", old.Online, new.Online},
		{"offline", old.Offline, new.Offline},
		{"present", old.Present, new.Present},
		{"possible", old.Possible, new.Possible},
	} {
		if l.old.equal(l.new) {
			continue
		}
		for _, set := range [...]CPUSet{l.old.Difference(l.new), l.new.Difference(l.old)} {
			for _, id := range set {
				if _, ok := slices.BinarySearch(named, id); !ok {
					return "cpu/" + l.name + " changed for cpu" + strconv.Itoa(id) + ", which no event named"
				}
			}
		}
	}
	return ""
}

// updateDevices returns devices with each named CPU added or removed as
// its cpuN directory exists or not; devices itself when nothing moved.
func (fs FS) updateDevices(r *reader, devices CPUSet, named []int) (CPUSet, error) {
	out := devices
	for _, c := range named {
		if c > MaxCPUID {
			continue
		}
		p := r.at(fs.cpuDir, -1, "/cpu")
		p = strconv.AppendInt(p, int64(c), 10)
		r.path = p
		ok, err := r.exists(cwd, p)
		if err != nil {
			return nil, err
		}
		i, had := slices.BinarySearch(out, c)
		switch {
		case ok && !had:
			out = slices.Insert(slices.Clip(out), i, c)
		case !ok && had:
			out = slices.Delete(slices.Clone(out), i, i+1)
			if len(out) == 0 {
				out = nil
			}
		}
	}
	return out, nil
}

// sameNodes returns why the node directories are not the ones of prev, ""
// when they are.
func sameNodes(r *reader, nodes dir, prev []Node) (string, error) {
	var ids [64]int
	found := ids[:0]
	err := r.scanIn(nodes, r.at(".", -1, ""), func(name []byte) {
		if id, ok := numberedName(name, "node"); ok {
			found = append(found, id)
		}
	})
	if err != nil {
		return "", err
	}
	slices.Sort(found)
	if len(found) != len(prev) {
		return "the node directories changed", nil
	}
	for i, id := range found {
		if prev[i].ID != id {
			return "the node directories changed", nil
		}
	}
	return "", nil
}

// nodeUpdate copies the node list, and within it a node, on their first
// change; the rest stays shared with the previous snapshot.
type nodeUpdate struct {
	prev, nodes []Node
	books       bool // read book_id and drawer_id (see cpuIDs)
	copied      bool
	dirty       []bool // by index: the node was copied (its memory is re-read)
}

// node returns node i for changing, copying the list on first use.
func (u *nodeUpdate) node(i int) *Node {
	if !u.copied {
		u.nodes = slices.Clone(u.prev)
		u.dirty = make([]bool, len(u.nodes))
		u.copied = true
	}
	return &u.nodes[i]
}

// touch marks node i (by id) for a re-read of its memory.
func (u *nodeUpdate) touch(id int) {
	for i := range u.prev {
		if u.prev[i].ID == id {
			u.node(i)
			u.dirty[i] = true
		}
	}
}

func (u *nodeUpdate) touched(i int) bool { return u.copied && u.dirty[i] }

// cpu re-reads where CPU c belongs: in the node whose directory links it,
// with its topology ids, when it is online, as readNodes finds it.
func (u *nodeUpdate) cpu(r *reader, nodes dir, c int, online bool) error {
	for i := range u.prev {
		id := u.prev[i].ID
		var cpu CPU
		in := false
		if online {
			var err error
			if cpu, in, err = readNodeCPU(r, nodes, id, c, u.books); err != nil {
				return err
			}
		}
		cur := u.nodes[i].CPUs
		j, had := slices.BinarySearchFunc(cur, c, func(x CPU, id int) int { return x.ID - id })
		switch {
		case in && had && cur[j] == cpu:
		case in && had:
			n := u.node(i)
			n.CPUs = slices.Clone(cur)
			n.CPUs[j] = cpu
		case in:
			n := u.node(i)
			n.CPUs = slices.Insert(slices.Clip(cur), j, cpu)
		case had:
			n := u.node(i)
			n.CPUs = slices.Delete(slices.Clone(cur), j, j+1)
			if len(n.CPUs) == 0 {
				n.CPUs = nil
			}
		}
	}
	return nil
}

// updateBlocks re-reads the named memory blocks (sorted) and returns the
// new block list: prev itself when none changed. The nodes the blocks
// belonged to or now belong to are touched in u; the zones of their other
// offline blocks are re-read too.
func (fs FS) updateBlocks(r *reader, nodes dir, u *nodeUpdate, prev []MemoryBlock, named []int) ([]MemoryBlock, error) {
	mem, err := openDir(fs.memDir)
	if err != nil {
		return nil, err
	}
	defer mem.close()

	type update struct {
		blk     MemoryBlock
		present bool
	}
	ups := make([]update, 0, len(named))
	changed := false
	for _, id := range named {
		blk, ok, err := readBlock(r, mem, id)
		if err != nil {
			return nil, err
		}
		blk.ID = id
		if ok {
			if blk.Node, err = fs.blockNodeOf(r, nodes, mem, u.prev, id); err != nil {
				return nil, err
			}
			u.touch(blk.Node)
		}
		i, had := slices.BinarySearchFunc(prev, id, func(b MemoryBlock, id int) int { return b.ID - id })
		if had {
			u.touch(prev[i].Node)
		}
		if ok != had || (ok && prev[i] != blk) {
			changed = true
		}
		ups = append(ups, update{blk, ok})
	}

	out := prev
	if changed {
		out = make([]MemoryBlock, 0, len(prev)+len(ups))
		i := 0
		for _, up := range ups {
			for i < len(prev) && prev[i].ID < up.blk.ID {
				out = append(out, prev[i])
				i++
			}
			if i < len(prev) && prev[i].ID == up.blk.ID {
				i++
			}
			if up.present {
				out = append(out, up.blk)
			}
		}
		out = append(out, prev[i:]...)
	}

	// The default zone of an offline block follows its node's zones.
	cloned := changed
	for i := range out {
		b := &out[i]
		if b.State == BlockOnline || !nodeTouched(u, b.Node) {
			continue
		}
		if _, named := slices.BinarySearch(named, b.ID); named {
			continue
		}
		zone, err := readZone(r, mem, b.ID)
		if err != nil {
			return nil, err
		}
		if zone == b.Zone {
			continue
		}
		if !cloned {
			out = slices.Clone(out)
			b = &out[i]
			cloned = true
		}
		b.Zone = zone
	}
	return out, nil
}

// nodeTouched reports whether the node with this id is touched in u.
func nodeTouched(u *nodeUpdate, id int) bool {
	for i := range u.prev {
		if u.prev[i].ID == id {
			return u.touched(i)
		}
	}
	return false
}

// blockNodeOf finds the node of block id as readMemory does: the node
// directory that links it, else its own nodeN link; -1 without node
// directories.
func (fs FS) blockNodeOf(r *reader, nodes, mem dir, prev []Node, id int) (int, error) {
	if len(prev) == 0 {
		return -1, nil
	}
	for _, n := range prev {
		ok, err := r.exists(nodes, r.at2("node", n.ID, "/memory", id, ""))
		if err != nil {
			return -1, err
		}
		if ok {
			return n.ID, nil
		}
	}
	return blockNode(r, mem, id)
}
