package topologytest

import (
	"slices"
	"strconv"
)

// formatList renders ids in the kernel's list format ("0-3,8"), sorted and
// without duplicates; "" for none. The argument is not modified.
func formatList(ids []int) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	var b []byte
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(s[i]), 10)
		if j > i {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(s[j]), 10)
		}
		i = j + 1
	}
	return string(b)
}

// without returns the ids of a that are not in b, in a's order.
func without(a, b []int) []int {
	drop := make(map[int]bool, len(b))
	for _, id := range b {
		drop[id] = true
	}
	var out []int
	for _, id := range a {
		if !drop[id] {
			out = append(out, id)
		}
	}
	return out
}
