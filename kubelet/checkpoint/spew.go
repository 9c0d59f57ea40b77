package checkpoint

import (
	"cmp"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
)

// The kubelet's checkpoint checksums are fnv32a over the go-spew dump
// (k8s.io/utils/dump.ForHash: %#v, sorted keys, no pointer addresses) of
// the checkpoint struct with its checksum zeroed. Each layout reproduces
// the dump of its struct with the helpers here; the tests, and
// test/kubeletparity, hold them against files the kubelet wrote.

func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// dataChecksum is the kubelet's checksum.New of a layout's data string:
// fnv32a over the dump of a string.
func dataChecksum(data string) uint64 { return uint64(fnv32a("(string)" + data)) }

// dumpMap writes m as the dump does: "<nil>" for a nil map, otherwise
// "map[k1:v1 k2:v2]" in key order, each entry written by entry.
func dumpMap[K cmp.Ordered, V any](b *strings.Builder, m map[K]V, entry func(k K, v V)) {
	if m == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		entry(k, m[k])
	}
	b.WriteString("]")
}

// dumpSlice writes s as the dump does: "<nil>" for a nil slice, otherwise
// "[e1 e2]", each element written by elem.
func dumpSlice[E any](b *strings.Builder, s []E, elem func(e E)) {
	if s == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("[")
	for i, e := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		elem(e)
	}
	b.WriteString("]")
}
