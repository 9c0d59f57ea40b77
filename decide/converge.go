package decide

import (
	"github.com/node-resized/node-resized/resources"
)

// Converging at start. The machine may have shrunk while node-resized was
// not running, and with no state to resume from the first pass would take
// the hardware it finds as what is applied, and never clamp. The kubepods
// limits the kubelet (or a previous node-resized) wrote are the evidence of
// what is really enforced: where they stand for more than the hardware has
// now, the first pass takes that larger capacity as applied, so that the
// target falls below it and the loss is handled as Path B.

// maxConvergeCPUs bounds the search for the CPU count a cpu.weight stands
// for: far above any machine, and above 256 CPUs cpu.weight no longer
// grows (the kubelet clamps cpu.shares at 262144).
const maxConvergeCPUs = 1 << 14

// EnforcedCapacity returns, per resource, the capacity that the kubepods
// limits l stand for where it is larger than phys, the hardware as it is
// now: memory.max plus the reservations the kubelet subtracts, when that
// is at least jitter above phys's memory; and for cpu.weight, the least
// whole number of CPUs for which the kubelet would write a weight at least
// l.CPUWeight, when l.CPUWeight is above the weight it would write for
// phys. Resources whose limit is unknown (0), or not above what the
// kubelet would write for phys, are absent. A pure function.
func EnforcedCapacity(l CgroupLimits, phys resources.List, r Reservations, jitter int64) resources.List {
	out := resources.List{}
	want := KubepodsLimits(phys, r)
	if mem, ok := phys[resources.Memory]; ok && l.MemoryMax > 0 && l.MemoryMax > want.MemoryMax {
		// memory.max = capacity − reservations: put the reservations back.
		c := l.MemoryMax
		if !r.PodsNotEnforced {
			c = l.MemoryMax + r.static(resources.Memory).floor()
		}
		if c-mem >= jitter {
			out[resources.Memory] = c
		}
	}
	if cpu, ok := phys[resources.CPU]; ok && l.CPUWeight > 0 && l.CPUWeight <= MaxWeight && l.CPUWeight > want.CPUWeight {
		for n := cpu/1000 + 1; n <= maxConvergeCPUs; n++ {
			if KubepodsLimits(resources.List{resources.CPU: n * 1000}, r).CPUWeight >= l.CPUWeight {
				out[resources.CPU] = n * 1000
				break
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// firstBaseline is what the first pass takes as applied: what the running
// kubelet enforces where it is known, the hardware elsewhere, raised to
// what the kubepods limits written stand for where those are larger than
// the hardware (see EnforcedCapacity). converged names the resources so
// raised.
func firstBaseline(in Input, phys resources.List, jitter int64) (b resources.List, converged []string) {
	b = baseline(in.Kubelet, phys)
	enf := EnforcedCapacity(in.Enforced, phys, in.Reservations, jitter)
	for _, name := range enf.Names() {
		if v := enf[name]; v > b[name] {
			b[name] = v
			converged = append(converged, name)
		}
	}
	return b, converged
}

// satisfied reports whether applied held every configured value that is
// now over the hardware: the spec was met before the hardware fell below
// it.
func satisfied(ev evaluation, applied resources.List) bool {
	if len(ev.over) == 0 {
		return false
	}
	for _, name := range ev.over {
		if applied[name] < ev.values[name] {
			return false
		}
	}
	return true
}
