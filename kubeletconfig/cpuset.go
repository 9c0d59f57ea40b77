package kubeletconfig

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxCPUID bounds the CPU ids a list may name, so that a typo such as
// "0-4000000000" is an error rather than a giant allocation.
const maxCPUID = 1 << 16

// parseCPUList parses a Linux CPU list ("0-3,8,10-11") the way the kubelet's
// cpuset.Parse does, and returns the distinct ids in increasing order.
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		start, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		end := start
		if isRange {
			if end, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		if start > end {
			return nil, fmt.Errorf("invalid range %q (%d > %d)", r, start, end)
		}
		if start < 0 || end > maxCPUID {
			return nil, fmt.Errorf("cpu id out of range in %q", r)
		}
		for c := start; c <= end; c++ {
			seen[c] = true
		}
	}
	ids := make([]int, 0, len(seen))
	for c := range seen {
		ids = append(ids, c)
	}
	sort.Ints(ids)
	return ids, nil
}
