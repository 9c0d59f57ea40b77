package topology

import (
	"fmt"
)

// Memory block states as the kernel writes them in memoryN/state.
const (
	BlockOnline       = "online"
	BlockOffline      = "offline"
	BlockGoingOffline = "going-offline"
)

// MemoryBlock is one hot-pluggable memory block,
// /sys/devices/system/memory/memoryN.
type MemoryBlock struct {
	ID int `json:"id"`
	// State is memoryN/state: "online", "offline" or, briefly,
	// "going-offline".
	State string `json:"state"`
	// Zone is the first word of memoryN/valid_zones. For an online block
	// the kernel writes the zone the block is in ("Normal", "Movable",
	// "DMA32", ...), or "none" when the block spans two zones (it then
	// cannot be offlined). For an offline block it lists the zones the
	// block could be onlined to, the default first: Zone is that default,
	// which "echo online" would pick (online_movable or online_kernel can
	// pick another listed zone). Empty when the kernel has no valid_zones
	// (no memory hot-remove support).
	Zone string `json:"zone,omitempty"`
	// Node is the NUMA node the block belongs to, from the nodeN/memoryM
	// link (or the memoryM/nodeN link); -1 when unknown.
	Node int `json:"node"`
}

// readMemory reads the memory block size and every memoryN block that
// scan (of the memory directory) finds. No memory directory (no memory
// hotplug support) is not an error: no blocks.
// links are the block-to-node links from the node directories, sorted by
// block; haveNodes says whether node directories exist (without them the
// kernel makes no links at all, so none are looked for).
func (fs FS) readMemory(r *reader, scan *idScan, links []blockLink, haveNodes bool) (uint64, []MemoryBlock, error) {
	d, err := openDir(fs.memDir)
	if err != nil {
		if isNotExist(err) {
			return 0, nil, nil
		}
		return 0, nil, err
	}
	defer d.close()

	var blockSize uint64
	p := r.at("block_size_bytes", -1, "")
	if b, ok, err := r.readFile(d, p); err != nil {
		return 0, nil, err
	} else if ok {
		v, valid := parseUint(b, 16)
		if !valid {
			return 0, nil, fmt.Errorf("parse %s: bad hex size %q", d.join(p), trimSpace(b))
		}
		blockSize = v
	}

	ids, err := scan.wait()
	if err != nil {
		return 0, nil, err
	}

	// The blocks' files are read in parallel on a large machine; what a
	// worker could not read is read again here, in order.
	blocks := make([]MemoryBlock, len(ids))
	done := make([]bool, len(ids))
	if len(ids) >= parallelism.minBlocks {
		r.parallel(len(ids), parallelism.blockChunk, func(w *reader, lo, hi int) {
			for i := lo; i < hi; i++ {
				blk, ok, err := readBlock(w, d, ids[i])
				blocks[i], done[i] = blk, ok && err == nil
			}
		})
	}
	n := 0
	li := 0
	for i, id := range ids {
		blk := blocks[i]
		if !done[i] {
			var ok bool
			if blk, ok, err = readBlock(r, d, id); err != nil {
				return 0, nil, err
			}
			if !ok {
				continue // the block was removed under us
			}
		}

		for li < len(links) && links[li].block < id {
			li++
		}
		if li < len(links) && links[li].block == id {
			blk.Node = links[li].node
		} else if haveNodes {
			// Not linked from any node directory: look for memoryM/nodeN.
			if blk.Node, err = blockNode(r, d, id); err != nil {
				return 0, nil, err
			}
		}
		blocks[n] = blk
		n++
	}
	return blockSize, blocks[:n], nil
}

// readBlock reads the state and zone of block id (mem is
// devices/system/memory); Node is left -1. ok is false when the block has
// no state file: it is gone.
func readBlock(r *reader, mem dir, id int) (blk MemoryBlock, ok bool, err error) {
	blk = MemoryBlock{ID: id, Node: -1}
	b, ok, err := r.readAttr(mem, id, attrState)
	if err != nil || !ok {
		return MemoryBlock{}, false, err
	}
	blk.State = internWord(trimSpace(b))
	if blk.Zone, err = readZone(r, mem, id); err != nil {
		return MemoryBlock{}, false, err
	}
	return blk, true, nil
}

// readZone reads the first word of block id's valid_zones, "" when the
// file is missing.
func readZone(r *reader, mem dir, id int) (string, error) {
	b, ok, err := r.readAttr(mem, id, attrZones)
	if err != nil || !ok {
		return "", err
	}
	return internWord(firstWord(b)), nil
}

// blockNode finds the nodeN link in memoryM, -1 if there is none.
func blockNode(r *reader, mem dir, id int) (int, error) {
	node := -1
	err := r.scanIn(mem, r.at("memory", id, ""), func(name []byte) {
		if n, ok := numberedName(name, "node"); ok && node < 0 {
			node = n
		}
	})
	if err != nil && !isNotExist(err) {
		return -1, err
	}
	return node, nil
}

// firstWord returns the first white-space separated word of b.
func firstWord(b []byte) []byte {
	b = trimSpace(b)
	for i, c := range b {
		if isSpace(c) {
			return b[:i]
		}
	}
	return b
}

// internWord returns the words the kernel writes in state and valid_zones
// as constants, so that thousands of blocks share them instead of each
// allocating its own copy.
func internWord(b []byte) string {
	switch string(b) {
	case BlockOnline:
		return BlockOnline
	case BlockOffline:
		return BlockOffline
	case BlockGoingOffline:
		return BlockGoingOffline
	case "Normal":
		return "Normal"
	case "Movable":
		return "Movable"
	case "DMA":
		return "DMA"
	case "DMA32":
		return "DMA32"
	case "HighMem":
		return "HighMem"
	case "Device":
		return "Device"
	case "none":
		return "none"
	}
	return string(b)
}
