// Package cpulist reads and writes CPU lists in the kubelet's own format
// ("0-3,8,10-11": reservedSystemCPUs, the CPU manager's checkpoint) with
// the code the kubelet itself uses, k8s.io/utils/cpuset, so that a list is
// accepted or refused as the kubelet accepts or refuses it.
package cpulist

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// maxCPUID bounds the CPU ids a list may name, so that a typo such as
// "0-4000000000" is an error rather than a giant allocation.
const maxCPUID = 1 << 16

// Parse parses a CPU list with the function the kubelet calls,
// cpuset.Parse, and returns the distinct ids in increasing order (nil for
// an empty list). Ids above 65536 are refused before anything is allocated
// for them.
func Parse(s string) ([]int, error) {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '-' }) {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > maxCPUID {
			return nil, fmt.Errorf("cpu id %d out of range", n)
		}
	}
	set, err := cpuset.Parse(s)
	if err != nil {
		return nil, err
	}
	if set.Size() == 0 {
		return nil, nil
	}
	return set.List(), nil
}

// Format formats ids as the kubelet does (cpuset.CPUSet.String): ranges
// of consecutive ids, "" for none.
func Format(ids []int) string { return cpuset.New(ids...).String() }
