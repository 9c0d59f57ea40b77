package topology

import (
	"fmt"
	"slices"
	"strconv"
)

// Hugepages is one pre-allocated hugepage pool: nr_hugepages pages of one
// size.
type Hugepages struct {
	PageSize uint64 `json:"pageSizeBytes"`
	Count    uint64 `json:"count"`
}

// readHugepages reads the pools under the directory a+id+b in d (id < 0
// left out): /sys/kernel/mm/hugepages for the node-wide pools, or
// nodeN/hugepages in the node directory for one node's. Each pool is a directory
// hugepages-<size>kB with an nr_hugepages attribute. A missing directory
// (no hugepage support, or a node without pools) is no pools, not an error.
// The pools are sorted by page size.
func (r *reader) readHugepages(d dir, a string, id int, b string) ([]Hugepages, error) {
	var sizes [8]uint64 // x86 has two sizes, arm64 four, power two
	kbs := sizes[:0]
	err := r.scanIn(d, r.at(a, id, b), func(name []byte) {
		if kb, ok := hugepageDirKB(name); ok {
			kbs = append(kbs, kb)
		}
	})
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	if len(kbs) == 0 {
		return nil, nil
	}
	slices.Sort(kbs)
	pools := make([]Hugepages, 0, len(kbs))
	for _, kb := range kbs {
		p := r.at(a, id, b)
		p = append(p, "/hugepages-"...)
		p = strconv.AppendUint(p, kb, 10)
		p = append(p, "kB/nr_hugepages"...)
		r.path = p
		data, ok, err := r.readFile(d, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // the pool went away under us
		}
		n, ok := parseUint(data, 10)
		if !ok {
			return nil, fmt.Errorf("parse %s: bad page count %q", d.join(p), trimSpace(data))
		}
		pools = append(pools, Hugepages{PageSize: kb * 1024, Count: n})
	}
	return pools, nil
}

// hugepageDirKB parses a pool directory name, "hugepages-2048kB".
func hugepageDirKB(name []byte) (uint64, bool) {
	const prefix, suffix = "hugepages-", "kB"
	if len(name) <= len(prefix)+len(suffix) ||
		string(name[:len(prefix)]) != prefix ||
		string(name[len(name)-len(suffix):]) != suffix {
		return 0, false
	}
	return parseUint(name[len(prefix):len(name)-len(suffix)], 10)
}
