package checkpoint

import (
	"regexp"
	"strconv"

	"github.com/node-resized/node-resized/internal/fault"
)

// faultCorrupt is the fault point checkpoint-corrupt of the test builds
// (package internal/fault): the first memory manager checkpoint applied
// once it is set, changed or not, is written with checksums that do not
// match, a file the kubelet refuses ("checkpoint is corrupted"). It
// returns those bytes, nil when the fault does not act. Only the memory
// manager's is corrupted: the kubelet loads the CPU manager's first, so
// a rewrite that it accepts and a refused one come in one start, and the
// refused file's backup is one a stock kubelet accepts on the changed
// machine (it is unchanged by a CPU change).
func faultCorrupt[S any](p *Plan[S]) []byte {
	if !fault.Enabled {
		return nil
	}
	if _, ok := any(p).(*MemoryManagerPlan); !ok || p.old == nil || !fault.Active("checkpoint-corrupt") {
		return nil
	}
	b := p.data
	if b == nil {
		b = p.old
	}
	return corruptChecksums(b)
}

var checksumField = regexp.MustCompile(`"(checksum|dataChecksum)":\s*([0-9]+)`)

// corruptChecksums adds one to every checksum field of a checkpoint.
func corruptChecksums(b []byte) []byte {
	return checksumField.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := checksumField.FindSubmatch(m)
		n, err := strconv.ParseUint(string(sub[2]), 10, 64)
		if err != nil {
			return m
		}
		return []byte(`"` + string(sub[1]) + `":` + strconv.FormatUint(n+1, 10))
	})
}
