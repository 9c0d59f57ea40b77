package kubelet

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// maxCPUID bounds the CPU ids a list may name, so that a typo such as
// "0-4000000000" is an error rather than a giant allocation.
const maxCPUID = 1 << 16

// parseCPUList parses a CPU list in the kubelet's own format
// ("0-3,8,10-11") with the function the kubelet itself calls,
// cpuset.Parse, and returns the distinct ids in increasing order (nil for
// an empty list). Ids above 65536 are refused before anything is
// allocated for them.
func parseCPUList(s string) ([]int, error) {
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
