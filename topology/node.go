package topology

import (
	"cmp"
	"fmt"
	"slices"
)

// Node is one NUMA node, from /sys/devices/system/node/nodeN.
type Node struct {
	ID int `json:"id"`
	// CPUs are the node's online CPUs: the nodeN/cpuM links whose CPU is
	// in cpu/online and has topology ids (on s390x its book and drawer
	// ids too), sorted by id. This is exactly the set cAdvisor counts for
	// the kubelet.
	CPUs []CPU `json:"cpus"`
	// MemTotal is "Node N MemTotal" from nodeN/meminfo, in bytes; 0 for a
	// memory-less node or when the file is missing.
	MemTotal uint64 `json:"memTotalBytes"`
	// Hugepages are the node's pools from nodeN/hugepages, by page size.
	Hugepages []Hugepages `json:"hugepages"`
	// Distances is nodeN/distance: the SLIT distance to every node, in
	// node order; nil when the file is missing.
	Distances []int `json:"distances"`
}

// blockLink ties a memory block to the node whose directory links it
// (nodeN/memoryM; the kernel makes memoryM/nodeN at the same time).
type blockLink struct{ block, node int }

// readNodes reads every nodeN directory. No node directory at all (a
// kernel without NUMA) is not an error: nodes is nil. It also returns the
// memory block links it saw, sorted by block.
func (fs FS) readNodes(r *reader, online CPUSet) ([]Node, []blockLink, error) {
	d, err := openDir(fs.nodeDir)
	if err != nil {
		if isNotExist(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	defer d.close()
	cpuDir, err := openDir(fs.cpuDir)
	if err != nil {
		return nil, nil, err
	}
	defer cpuDir.close()
	var ids []int
	err = r.scanIn(d, r.at(".", -1, ""), func(name []byte) {
		if id, ok := numberedName(name, "node"); ok {
			ids = append(ids, id)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	slices.Sort(ids)

	// The nodes are read in parallel on a large machine; what a worker
	// could not read is read again here, in order.
	type nodeRead struct {
		node  Node
		links []blockLink
		done  bool
	}
	reads := make([]nodeRead, len(ids))
	if online.Len() >= parallelism.minCPUs {
		r.parallel(len(ids), 1, func(w *reader, lo, hi int) {
			for i := lo; i < hi; i++ {
				n, links, _, err := readNode(w, d, cpuDir, ids[i], online, fs.books, nil)
				reads[i] = nodeRead{n, links, err == nil}
			}
		})
	}
	nodes := make([]Node, 0, len(ids))
	total := 0
	for _, nr := range reads {
		total += len(nr.links)
	}
	links := make([]blockLink, 0, total)
	var scratch []int // reused for every node
	for i, id := range ids {
		nr := reads[i]
		if !nr.done {
			var gone bool
			nr.node, nr.links, gone, err = readNode(r, d, cpuDir, id, online, fs.books, &scratch)
			if gone {
				continue // the node went away under us
			}
			if err != nil {
				return nil, nil, err
			}
		}
		nodes = append(nodes, nr.node)
		links = append(links, nr.links...)
	}
	// By block, then node: a block whose memory spans two nodes is linked
	// from both, and goes to the lower one, as Update's blockNodeOf finds
	// it (an unstable sort by block alone picked either).
	slices.SortFunc(links, func(a, b blockLink) int { return cmp.Or(a.block-b.block, a.node-b.node) })
	return nodes, links, nil
}

// readNode reads node id (nodes is devices/system/node): it scans nodeN
// for its CPU and memory block links, reads the topology ids of its online
// CPUs from cpuDir (devices/system/cpu), its memory and its distances. It
// returns the node, with its CPUs sorted by id (nil when none is online),
// and the links in the order of the scan; gone says that the node
// directory went away. books reads book_id and drawer_id too (see
// cpuIDs). scratch, when not nil, holds the CPU ids between calls.
func readNode(r *reader, nodes, cpuDir dir, id int, online CPUSet, books bool, scratch *[]int) (n Node, links []blockLink, gone bool, err error) {
	n.ID = id
	if n.CPUs, links, err = readNodeDir(r, nodes, cpuDir, id, online, books, scratch); err != nil {
		return Node{}, nil, isNotExist(err), err
	}
	if err := readNodeMemory(r, nodes, &n); err != nil {
		return Node{}, nil, false, err
	}
	p := r.at("node", id, "/distance")
	if b, ok, err := r.readFile(nodes, p); err != nil {
		return Node{}, nil, false, err
	} else if ok {
		if n.Distances, err = parseDistances(b); err != nil {
			return Node{}, nil, false, fmt.Errorf("parse %s: %w", nodes.join(p), err)
		}
	}
	return n, links, false, nil
}

// readNodeDir scans nodeN for its CPU and memory block links, and reads the
// topology ids of its online CPUs, for readNode.
func readNodeDir(r *reader, nodes, cpuDir dir, id int, online CPUSet, books bool, scratch *[]int) ([]CPU, []blockLink, error) {
	var ids []int
	if scratch != nil {
		ids = (*scratch)[:0]
	}
	var links []blockLink
	err := r.scanIn(nodes, r.at("node", id, ""), func(name []byte) {
		if c, ok := numberedName(name, "cpu"); ok {
			ids = append(ids, c)
		} else if b, ok := numberedName(name, "memory"); ok {
			links = append(links, blockLink{block: b, node: id})
		}
	})
	if scratch != nil {
		*scratch = ids
	}
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(ids)
	count := 0
	for _, c := range ids {
		if online.Contains(c) {
			count++
		}
	}
	var cpus []CPU
	if count > 0 {
		cpus = make([]CPU, 0, count)
	}
	for _, c := range ids {
		if !online.Contains(c) {
			continue
		}
		cpu, ok, err := readCPU(r, cpuDir, c, books)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, links, nil
}

// readNodeMemory reads n's MemTotal from nodeN/meminfo and its hugepage
// pools (nodes is devices/system/node).
func readNodeMemory(r *reader, nodes dir, n *Node) error {
	var err error
	if n.MemTotal, err = readNodeMemTotal(r, nodes, n.ID); err != nil {
		return err
	}
	n.Hugepages, err = r.readHugepages(nodes, "node", n.ID, "/hugepages")
	return err
}

// readNodeMemTotal reads node id's MemTotal from nodeN/meminfo; 0 when
// the file is missing.
func readNodeMemTotal(r *reader, nodes dir, id int) (uint64, error) {
	p := r.at("node", id, "/meminfo")
	b, ok, err := r.readFile(nodes, p)
	if err != nil || !ok {
		return 0, err
	}
	mt, err := parseNodeMemTotal(b)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", nodes.join(p), err)
	}
	return mt, nil
}

// parseDistances parses nodeN/distance, space-separated decimals.
func parseDistances(b []byte) ([]int, error) {
	b = trimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	n := 1
	for _, c := range b {
		if c == ' ' {
			n++
		}
	}
	out := make([]int, 0, n)
	for len(b) > 0 {
		end := indexByteFrom(b, ' ', 0)
		if end > 0 {
			v, ok := parseUint(b[:end], 10)
			if !ok || v > 1<<31 {
				return nil, fmt.Errorf("bad distance %q", b[:end])
			}
			out = append(out, int(v))
		}
		if end == len(b) {
			break
		}
		b = b[end+1:]
	}
	return out, nil
}
