package cgroup

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/topology"
)

// fileKind is the kind of limit an op sets.
type fileKind int

const (
	kindMemory fileKind = iota
	kindPids
	kindCPUWeight
	kindCpuset
)

// op is one cgroup file the Enforcer looked at, and what it means to do
// with it.
type op struct {
	g    Group
	file string
	kind fileKind
	// num is the limit (memory, pids, cpu.weight) and unit the granule
	// the kernel rounds it down to (0: exact).
	num, unit int64
	// cpus is the cpuset target.
	cpus topology.CPUSet
	// want is the value as written, before the value read first.
	want, before string
	// write is true when the file does not hold want.
	write bool
	// unread: before is read (and write decided) only just before the
	// write, so that the first limit is written without waiting for the
	// others to be read; required makes a missing file an error.
	unread, required bool
	note             string
}

func (o *op) path() string { return filepath.Join(o.g.Dir, o.file) }

// holds reports whether the value read from the file is the target, as
// the kernel would show it after writing the target.
func (o *op) holds(cur string) bool {
	switch o.kind {
	case kindCpuset:
		set, err := topology.ParseCPUSet(cur)
		return err == nil && slices.Equal(set, o.cpus)
	case kindCPUWeight:
		v, err := strconv.ParseInt(cur, 10, 64)
		return err == nil && v == o.num
	}
	v, err := parseMax(cur)
	if err != nil {
		return false
	}
	return v == o.num || (o.unit > 0 && v == o.num/o.unit*o.unit)
}

// Notes for files left alone.
const (
	noteAbsent    = "absent: its controller is not enabled for this cgroup"
	noteInherits  = "empty: inherits its parent's CPUs, which follow the online CPUs"
	noteNoOnline  = "none of its own CPUs is online: the kernel already runs it on its parent's; left as is"
	noteNoOnlineS = "no online CPU set known: cpusets left as they are"
)

// limitOps plans the kubepods limits of one request, in the order they are
// written: memory.max first (on a clamp it is what protects the node), then
// pids.max, cpu.weight. Each file is read only just before it is written
// (see readBefore), so that memory.max is written after two reads, not
// after every file's.
//
// The request's hugetlb limits are not written: kubepods is also the
// kubelet's Guaranteed QoS cgroup, and its QoS loop sets that cgroup's
// hugetlb limits unbounded (1<<62) when it starts and every minute after
// (pkg/kubelet/cm/qos_container_manager_linux.go, setHugePagesUnbounded),
// so the pool-sized limit it writes at start lasts a moment, and writing
// it again would start a fight the loop wins each minute. A huge page
// pool cannot be overcommitted, so the unbounded limit protects nothing
// less; the pods' own cgroups carry their huge page limits.
func (e *Enforcer) limitOps(lim decide.CgroupLimits) []*op {
	var ops []*op
	kp := e.paths.Kubepods
	add := func(o *op, required bool) {
		o.g, o.unread, o.required = kp, true, required
		ops = append(ops, o)
	}
	if lim.MemoryMax > 0 {
		add(&op{file: "memory.max", kind: kindMemory, num: lim.MemoryMax, unit: e.pageSize,
			want: strconv.FormatInt(lim.MemoryMax, 10)}, true)
	}
	if lim.PidsMax > 0 {
		add(&op{file: "pids.max", kind: kindPids, num: lim.PidsMax, want: strconv.FormatInt(lim.PidsMax, 10)}, false)
	}
	if lim.CPUWeight > 0 {
		w := int64(min(lim.CPUWeight, decide.MaxWeight))
		add(&op{file: "cpu.weight", kind: kindCPUWeight, num: w, want: strconv.FormatInt(w, 10)}, true)
	}
	return ops
}

// readBefore reads a limit op's file and decides whether it needs a write:
// an unreadable file is written anyway (protection comes before
// idempotence), a missing one is left alone, and is an error if required.
func readBefore(o *op) error {
	o.unread = false
	cur, err := readValue(o.path())
	switch {
	case errNotExist(err) && o.required:
		o.before, o.note = "", noteAbsent
		return fmt.Errorf("%s: %w", o.path(), err)
	case errNotExist(err):
		o.note = noteAbsent
	case err != nil:
		o.write, o.note = true, "unreadable before the write: "+err.Error()
	default:
		o.before, o.write = cur, !o.holds(cur)
	}
	return nil
}

// cpusetOps plans the cpuset.cpus of kubepods, burstable and besteffort
// for the online CPUs (see planCPUs), in the order they are written.
func (e *Enforcer) cpusetOps(online topology.CPUSet) ([]*op, []error) {
	groups := [3]Group{e.paths.Kubepods, e.paths.Burstable, e.paths.BestEffort}
	var (
		cur     [3]topology.CPUSet
		present [3]bool
		ops     [3]*op
		errs    []error
	)
	for i, g := range groups {
		ops[i] = &op{g: g, file: "cpuset.cpus", kind: kindCpuset}
		v, err := readValue(ops[i].path())
		switch {
		case errNotExist(err):
			ops[i].note = noteAbsent
			continue
		case err != nil:
			errs = append(errs, err)
			ops[i].note = "unreadable: " + err.Error()
			continue
		}
		ops[i].before = v
		set, err := topology.ParseCPUSet(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ops[i].path(), err))
			ops[i].note = "unparsable"
			continue
		}
		cur[i], present[i] = set, true
	}
	if len(online) == 0 {
		for _, o := range ops {
			if o.note == "" {
				o.note = noteNoOnlineS
			}
		}
		return ops[:], errs
	}
	p := planCPUs(cur, present, online)
	for i, o := range ops {
		if o.note != "" {
			continue
		}
		o.note = p.note[i]
		if p.target[i] != nil {
			o.cpus, o.want = p.target[i], p.target[i].String()
			o.write = !slices.Equal(cur[i], p.target[i])
		}
	}
	if p.narrowing {
		return []*op{ops[1], ops[2], ops[0]}, errs
	}
	return ops[:], errs
}

// cpusetPlan is the cpuset.cpus target of kubepods, burstable and
// besteffort (in that order); a nil target leaves the file alone.
type cpusetPlan struct {
	target [3]topology.CPUSet
	note   [3]string
	// narrowing is true when some CPU leaves a list: children are then
	// written before the parent, otherwise the parent goes first.
	narrowing bool
}

// planCPUs decides the cpusets from the current lists (present false: no
// cpuset.cpus file) and the online CPUs:
//   - an empty list inherits the parent's effective CPUs, which follow the
//     online CPUs by themselves: it is left alone;
//   - kubepods' own list becomes exactly the online CPUs;
//   - a child whose list equals kubepods' old one (a copy of it) follows
//     kubepods;
//   - a child with a list of its own keeps it minus the CPUs that are not
//     online; if none is left it is left alone (the kernel already runs it
//     on its parent's CPUs) rather than widened.
func planCPUs(cur [3]topology.CPUSet, present [3]bool, online topology.CPUSet) cpusetPlan {
	var p cpusetPlan
	for i := range cur {
		switch {
		case !present[i]:
			p.note[i] = noteAbsent
		case len(cur[i]) == 0:
			p.note[i] = noteInherits
		case i == 0:
			p.target[0] = online
		case len(cur[0]) > 0 && slices.Equal(cur[i], cur[0]):
			p.target[i], p.note[i] = online, "follows kubepods (it held kubepods' list)"
		default:
			if t := intersect(cur[i], online); len(t) > 0 {
				p.target[i], p.note[i] = t, "keeps its own CPUs that are online"
			} else {
				p.note[i] = noteNoOnline
			}
		}
		if p.target[i] != nil && len(cur[i].Difference(p.target[i])) > 0 {
			p.narrowing = true
		}
	}
	return p
}

// intersect returns the CPUs in both sets.
func intersect(a, b topology.CPUSet) topology.CPUSet {
	var out topology.CPUSet
	for _, c := range a {
		if b.Contains(c) {
			out = append(out, c)
		}
	}
	return out
}
