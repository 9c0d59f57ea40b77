package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/resources"
)

// Change kinds, in the order Diff reports them.
const (
	ChangeCPUAdded           = "cpu_added"            // ids joined cpu/present
	ChangeCPUOnline          = "cpu_online"           // ids joined cpu/online
	ChangeCPUOffline         = "cpu_offline"          // ids left cpu/online
	ChangeCPURemoved         = "cpu_removed"          // ids left cpu/present
	ChangeNodeAdded          = "node_added"           // a nodeN directory appeared
	ChangeNodeRemoved        = "node_removed"         // a nodeN directory went away
	ChangeNodeCPUs           = "node_cpus"            // a node's online CPUs changed
	ChangeNodeMemTotal       = "node_memtotal"        // a node's MemTotal changed
	ChangeNodeHugepages      = "node_hugepages"       // a node's hugepage pool changed
	ChangeMemoryBlockAdded   = "memory_block_added"   // memoryN directories appeared
	ChangeMemoryBlockOnline  = "memory_block_online"  // blocks became online
	ChangeMemoryBlockOffline = "memory_block_offline" // blocks left the online state
	ChangeMemoryBlockZone    = "memory_block_zone"    // a block's zone changed, state unchanged
	ChangeMemoryBlockRemoved = "memory_block_removed" // memoryN directories went away
	ChangeMemTotal           = "memtotal"             // /proc/meminfo MemTotal changed
	ChangeSwap               = "swap"                 // /proc/meminfo SwapTotal changed
	ChangeHugepages          = "hugepages"            // a node-wide hugepage pool changed
	ChangeEphemeralStorage   = "ephemeral_storage"    // the kubelet root filesystem resized
)

// Change is one difference between two snapshots. Kind is one of the
// Change constants; Detail is a short human-readable phrase that names the
// objects by id and says what happened ("cpus 2-3 offline",
// "memory blocks 32-95 online (Movable)", "MemTotal 24.0GiB -> 23.9GiB
// (-128.0MiB)"). Objects of one kind that changed the same way share one
// Change, so unplugging a 16 GiB DIMM is one memory_block_offline entry,
// not 128.
type Change struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Changes is the result of Diff: empty when nothing changed.
type Changes []Change

// Diff names what changed from old to new: CPUs added to or removed from
// cpu/present and CPUs onlined or offlined (by id), nodes added or
// removed, per-node online CPUs, MemTotal and hugepage pools, memory
// blocks added, removed, onlined, offlined or moved to another zone,
// MemTotal, SwapTotal, the node-wide hugepage pools and the ephemeral
// storage size. The order is fixed: by kind in the order of the Change
// constants, then by id. Fields that do not affect capacity (possible
// CPUs, core and socket ids alone, distances, removable) are not compared.
//
// When old or new is nil the result is empty: the first snapshot is a
// starting point, not a change.
func Diff(old, new *Snapshot) Changes {
	if old == nil || new == nil {
		return nil
	}
	var c Changes
	c.cpus(old.CPUs, new.CPUs)
	c.nodes(old.Nodes, new.Nodes)
	c.blocks(old.MemoryBlocks, new.MemoryBlocks)
	if old.MemTotal != new.MemTotal {
		c.add(ChangeMemTotal, "MemTotal "+bytesChange(old.MemTotal, new.MemTotal))
	}
	if old.SwapTotal != new.SwapTotal {
		c.add(ChangeSwap, "SwapTotal "+bytesChange(old.SwapTotal, new.SwapTotal))
	}
	c.pools(ChangeHugepages, "", old.Hugepages, new.Hugepages)
	if old.EphemeralStorage != new.EphemeralStorage {
		c.add(ChangeEphemeralStorage, "ephemeral-storage "+bytesChange(old.EphemeralStorage, new.EphemeralStorage))
	}
	return c
}

// String summarises the changes on one line, "cpu1 offline; MemTotal
// 24.0GiB -> 23.9GiB (-128.0MiB)"; "no change" when empty.
func (c Changes) String() string {
	if len(c) == 0 {
		return "no change"
	}
	const most = 8
	var b strings.Builder
	for i, ch := range c {
		if i == most {
			fmt.Fprintf(&b, "; and %d more", len(c)-most)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(ch.Detail)
	}
	return b.String()
}

func (c *Changes) add(kind, detail string) {
	*c = append(*c, Change{Kind: kind, Detail: detail})
}

func (c *Changes) cpus(old, new CPUs) {
	for _, d := range [...]struct {
		kind     string
		set      CPUSet
		happened string
	}{
		{ChangeCPUAdded, new.Present.Difference(old.Present), "added"},
		{ChangeCPUOnline, new.Online.Difference(old.Online), "online"},
		{ChangeCPUOffline, old.Online.Difference(new.Online), "offline"},
		{ChangeCPURemoved, old.Present.Difference(new.Present), "removed"},
	} {
		if len(d.set) > 0 {
			c.add(d.kind, idsPhrase("cpu", "cpus", d.set)+" "+d.happened)
		}
	}
}

func (c *Changes) nodes(old, new []Node) {
	var added, removed, cpus, mem, hp Changes
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].ID < new[j].ID):
			removed.add(ChangeNodeRemoved, "node"+strconv.Itoa(old[i].ID)+" removed")
			i++
		case i == len(old) || new[j].ID < old[i].ID:
			added.add(ChangeNodeAdded, "node"+strconv.Itoa(new[j].ID)+" added")
			j++
		default:
			o, n := &old[i], &new[j]
			name := "node" + strconv.Itoa(n.ID)
			if !slices.Equal(o.CPUs, n.CPUs) {
				from, to := nodeCPUSet(o.CPUs), nodeCPUSet(n.CPUs)
				if from.equal(to) {
					cpus.add(ChangeNodeCPUs, name+" cpu topology ids changed")
				} else {
					cpus.add(ChangeNodeCPUs, name+" cpus "+listOrNone(from)+" -> "+listOrNone(to))
				}
			}
			if o.MemTotal != n.MemTotal {
				mem.add(ChangeNodeMemTotal, name+" MemTotal "+bytesChange(o.MemTotal, n.MemTotal))
			}
			hp.pools(ChangeNodeHugepages, name+" ", o.Hugepages, n.Hugepages)
			i++
			j++
		}
	}
	for _, part := range [...]Changes{added, removed, cpus, mem, hp} {
		*c = append(*c, part...)
	}
}

// pools compares hugepage pools, both sorted by page size.
func (c *Changes) pools(kind, prefix string, old, new []Hugepages) {
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].PageSize < new[j].PageSize):
			c.add(kind, prefix+resources.HugePagesName(int64(old[i].PageSize))+" pool removed ("+
				strconv.FormatUint(old[i].Count, 10)+" pages)")
			i++
		case i == len(old) || new[j].PageSize < old[i].PageSize:
			c.add(kind, prefix+resources.HugePagesName(int64(new[j].PageSize))+" pool added ("+
				strconv.FormatUint(new[j].Count, 10)+" pages)")
			j++
		default:
			if old[i].Count != new[j].Count {
				c.add(kind, prefix+resources.HugePagesName(int64(new[j].PageSize))+" "+
					strconv.FormatUint(old[i].Count, 10)+" -> "+strconv.FormatUint(new[j].Count, 10)+" pages")
			}
			i++
			j++
		}
	}
}

// blockGroup collects the ids of blocks that changed the same way.
type blockGroup struct {
	kind, tail string
	ids        []int
}

func (c *Changes) blocks(old, new []MemoryBlock) {
	var groups []blockGroup
	put := func(kind, tail string, id int) {
		for k := range groups {
			if groups[k].kind == kind && groups[k].tail == tail {
				groups[k].ids = append(groups[k].ids, id)
				return
			}
		}
		groups = append(groups, blockGroup{kind: kind, tail: tail, ids: []int{id}})
	}
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].ID < new[j].ID):
			put(ChangeMemoryBlockRemoved, "removed", old[i].ID)
			i++
		case i == len(old) || new[j].ID < old[i].ID:
			put(ChangeMemoryBlockAdded, "added ("+new[j].State+")", new[j].ID)
			j++
		default:
			o, n := &old[i], &new[j]
			switch {
			case o.State != n.State && n.State == BlockOnline:
				put(ChangeMemoryBlockOnline, "online"+zoneTail(n.Zone), n.ID)
			case o.State != n.State:
				put(ChangeMemoryBlockOffline, n.State, n.ID)
			case o.Zone != n.Zone:
				put(ChangeMemoryBlockZone, "zone "+orNone(o.Zone)+" -> "+orNone(n.Zone), n.ID)
			}
			i++
			j++
		}
	}
	for _, kind := range [...]string{
		ChangeMemoryBlockAdded, ChangeMemoryBlockOnline, ChangeMemoryBlockOffline,
		ChangeMemoryBlockZone, ChangeMemoryBlockRemoved,
	} {
		for _, g := range groups {
			if g.kind == kind {
				c.add(kind, idsPhrase("memory block ", "memory blocks ", g.ids)+" "+g.tail)
			}
		}
	}
}

func zoneTail(zone string) string {
	if zone == "" {
		return ""
	}
	return " (" + zone + ")"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// idsPhrase names one id ("cpu3") or a list ("cpus 2-3,8").
func idsPhrase(one, many string, ids []int) string {
	if len(ids) == 1 {
		return one + strconv.Itoa(ids[0])
	}
	if !strings.HasSuffix(many, " ") {
		many += " "
	}
	return many + CPUSet(ids).String()
}

func nodeCPUSet(cpus []CPU) CPUSet {
	set := make(CPUSet, len(cpus))
	for i, c := range cpus {
		set[i] = c.ID
	}
	return set
}

func listOrNone(s CPUSet) string {
	if len(s) == 0 {
		return "(none)"
	}
	return s.String()
}

// bytesChange renders "24.0GiB -> 23.9GiB (-128.0MiB)".
func bytesChange(from, to uint64) string {
	var delta string
	if to > from {
		delta = "+" + humanBytes(to-from)
	} else {
		delta = "-" + humanBytes(from-to)
	}
	return humanBytes(from) + " -> " + humanBytes(to) + " (" + delta + ")"
}

// humanBytes renders a byte count with one decimal in binary units.
func humanBytes(v uint64) string {
	const unit = 1024
	if v < unit {
		return strconv.FormatUint(v, 10) + "B"
	}
	units := [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f := float64(v) / unit
	u := 0
	for f >= unit && u < len(units)-1 {
		f /= unit
		u++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + units[u]
}
