package decide

import (
	"fmt"
	"slices"

	"github.com/node-resized/node-resized/topology"
)

// Reserved CPUs. The kubelet's reservedSystemCPUs names CPU ids; a kubelet
// whose reserved CPUs are not all online refuses to start (its CPU manager
// cannot reserve what is not there). So a machine that lost one is never
// one the kubelet is restarted into: the loss is clamped and evicted as any
// other (Path B), and the condition is EmergencyReduced, naming the CPU,
// until it is back online.

// missingReserved returns the reserved CPUs that are not online, sorted;
// nil when the online CPUs are unknown (nil) or none is missing.
func missingReserved(reserved, online []int) []int {
	if online == nil {
		return nil
	}
	var out []int
	for _, c := range reserved {
		if !slices.Contains(online, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// cpuList renders CPU ids, in any order, as the kernel lists them:
// "0-2,5".
func cpuList(ids []int) string { return topology.NewCPUSet(ids...).String() }

// reservedTaken returns the reserved CPUs that a configured cpu of milli
// millicores takes away, sorted. A configured count keeps whole CPUs, and
// the kubelet's reserved CPUs first, lowest-numbered first: a count below
// the number of reserved CPUs takes away the highest-numbered of them.
func reservedTaken(reserved []int, milli int64) []int {
	r := slices.Compact(slices.Sorted(slices.Values(reserved)))
	if keep := milli / 1000; keep < int64(len(r)) {
		return r[keep:]
	}
	return nil
}

// plural is "s" for n != 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// reservedGone is the condition's word on reserved CPUs that are offline.
func reservedGone(missing []int) string {
	s := ""
	if len(missing) > 1 {
		s = "s"
	}
	return fmt.Sprintf("reserved CPU%s %s (the kubelet's reservedSystemCPUs) offline: the kubelet would refuse to start without %s, so it is not restarted; "+
		"bring CPU%s %s back online, or change reservedSystemCPUs and restart the kubelet",
		s, cpuList(missing), map[bool]string{true: "them", false: "it"}[len(missing) > 1], s, cpuList(missing))
}
