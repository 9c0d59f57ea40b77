package release

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// cpuMachine is what the CPU choice knows of each online CPU.
type cpuMachine struct {
	online   topology.CPUSet
	core     map[int]topology.CPUSet // online CPU → its online siblings, itself included
	canGo    map[int]bool            // has an online file, not reserved, not skipped
	reserved topology.CPUSet         // online and reserved
	noFile   topology.CPUSet         // online, no online file (or no hotplug facts)
	skipped  topology.CPUSet         // online, failed before
}

func newCPUMachine(in Input) cpuMachine {
	m := cpuMachine{online: in.Machine.CPUs.Online, core: map[int]topology.CPUSet{}, canGo: map[int]bool{}}
	facts := map[int]topology.HotplugCPU{}
	if in.Hotplug != nil {
		for _, c := range in.Hotplug.CPUs {
			facts[c.ID] = c
		}
	}
	var reserved, noFile, skipped []int
	for _, id := range m.online {
		f, known := facts[id]
		switch {
		case in.ReservedCPUs.Contains(id):
			reserved = append(reserved, id)
		case !known || !f.OnlineFile:
			noFile = append(noFile, id)
		case in.Skip.CPUs.Contains(id):
			skipped = append(skipped, id)
		default:
			m.canGo[id] = true
		}
		var sib []int
		for _, s := range f.Siblings {
			if m.online.Contains(s) {
				sib = append(sib, s)
			}
		}
		if !slices.Contains(sib, id) {
			sib = append(sib, id) // no topology read: a core of its own
		}
		m.core[id] = topology.NewCPUSet(sib...)
	}
	m.reserved, m.noFile, m.skipped = topology.NewCPUSet(reserved...), topology.NewCPUSet(noFile...), topology.NewCPUSet(skipped...)
	return m
}

// chooseCPUs fills the plan's CPU steps, EvictFirst, OnlineCPUs and a CPU
// shortfall.
func chooseCPUs(in Input, p *Plan) {
	m := newCPUMachine(in)
	p.OnlineCPUs = len(m.online)
	if in.TargetCPUs <= 0 || len(m.online) <= in.TargetCPUs {
		return
	}
	need := len(m.online) - in.TargetCPUs
	taken := map[int]bool{}

	// CPUs without an exclusive assignment first.
	var free []int
	for _, id := range m.online {
		if m.canGo[id] && in.Exclusive[id] == "" {
			free = append(free, id)
		}
	}
	for _, id := range pickCPUs(m, free, taken, need) {
		taken[id] = true
		p.CPUs = append(p.CPUs, CPUStep{ID: id})
	}
	need -= len(p.CPUs)

	// Then whole pods' exclusive CPUs, the pods evicted first.
	if need > 0 {
		pods := exclusivePods(m, in.Exclusive)
		var freed []int
		owner := map[int]string{}
		for got := 0; got < need && len(pods) > 0; {
			i := pickPod(pods, need-got)
			pod := pods[i]
			pods = slices.Delete(pods, i, i+1)
			p.EvictFirst = append(p.EvictFirst, pod.uid)
			for _, id := range pod.cpus {
				owner[id] = pod.uid
			}
			freed = append(freed, pod.cpus...)
			got += len(pod.cpus)
		}
		slices.Sort(p.EvictFirst)
		slices.Sort(freed)
		for _, id := range pickCPUs(m, freed, taken, need) {
			taken[id] = true
			p.CPUs = append(p.CPUs, CPUStep{ID: id, AfterEvicting: owner[id]})
			need--
		}
	}
	p.OnlineCPUs = len(m.online) - len(p.CPUs)
	if need > 0 {
		p.Shortfalls = append(p.Shortfalls, Shortfall{Resource: resources.CPU, Missing: int64(need), Reason: cpuReason(m, taken)})
	}
}

// pickCPUs returns up to n of the CPUs in pool (sorted) in the order to
// offline them: whole cores first, highest first; then CPUs of cores that
// cannot go whole; then single CPUs of whole cores, highest first. A core
// is whole when each of its online CPUs is in pool or taken.
func pickCPUs(m cpuMachine, pool []int, taken map[int]bool, n int) []int {
	in := map[int]bool{}
	for _, id := range pool {
		in[id] = true
	}
	type unit struct{ cpus []int } // a core's CPUs in pool
	var whole []unit
	var loose []int
	seen := map[int]bool{}
	for _, id := range slices.Backward(pool) {
		if seen[id] {
			continue
		}
		var u unit
		complete := true
		for _, s := range m.core[id] {
			switch {
			case in[s]:
				u.cpus = append(u.cpus, s)
				seen[s] = true
			case !taken[s]:
				complete = false
			}
		}
		if complete {
			whole = append(whole, u)
		} else {
			loose = append(loose, u.cpus...)
		}
	}
	// whole is in order of each core's highest CPU, descending.
	var out []int
	left := whole[:0:0]
	for _, u := range whole {
		if len(out)+len(u.cpus) <= n {
			out = append(out, descending(u.cpus)...)
		} else {
			left = append(left, u)
		}
	}
	slices.SortFunc(loose, func(a, b int) int { return cmp.Compare(b, a) })
	for _, id := range loose {
		if len(out) < n {
			out = append(out, id)
		}
	}
	for _, u := range left {
		for _, id := range descending(u.cpus) {
			if len(out) < n {
				out = append(out, id)
			}
		}
	}
	return out
}

// pod is a pod's exclusive CPUs that could go offline.
type pod struct {
	uid  string
	cpus []int // ascending
}

// exclusivePods groups the exclusive CPUs that could otherwise go by pod.
func exclusivePods(m cpuMachine, exclusive map[int]string) []pod {
	byUID := map[string][]int{}
	for _, id := range m.online {
		if uid := exclusive[id]; uid != "" && m.canGo[id] {
			byUID[uid] = append(byUID[uid], id)
		}
	}
	pods := make([]pod, 0, len(byUID))
	for uid, cpus := range byUID {
		pods = append(pods, pod{uid: uid, cpus: cpus})
	}
	slices.SortFunc(pods, func(a, b pod) int { return cmp.Compare(a.uid, b.uid) })
	return pods
}

// pickPod returns the index of the pod to evict for n more CPUs: the one
// that covers n with the fewest CPUs, else the one with the most; ties go
// to the pod with the highest CPU.
func pickPod(pods []pod, n int) int {
	best := -1
	better := func(a, b pod) bool { // a better than b
		ac, bc := len(a.cpus) >= n, len(b.cpus) >= n
		switch {
		case ac != bc:
			return ac
		case ac && len(a.cpus) != len(b.cpus):
			return len(a.cpus) < len(b.cpus)
		case !ac && len(a.cpus) != len(b.cpus):
			return len(a.cpus) > len(b.cpus)
		}
		return slices.Max(a.cpus) > slices.Max(b.cpus)
	}
	for i := range pods {
		if best < 0 || better(pods[i], pods[best]) {
			best = i
		}
	}
	return best
}

// cpuReason says why the online CPUs that stay could not go.
func cpuReason(m cpuMachine, taken map[int]bool) string {
	var clauses []string
	if len(m.reserved) > 0 {
		clauses = append(clauses, fmt.Sprintf("are reserved for the system (%s)", m.reserved))
	}
	if len(m.noFile) > 0 {
		clauses = append(clauses, fmt.Sprintf("have no online file, the kernel cannot take them offline (%s)", m.noFile))
	}
	if len(m.skipped) > 0 {
		clauses = append(clauses, fmt.Sprintf("failed to go offline before (%s)", m.skipped))
	}
	if len(clauses) == 0 {
		return "no other CPU is online"
	}
	return "the other online CPUs " + reasons(clauses)
}

// descending returns a copy of ids, highest first.
func descending(ids []int) []int {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b int) int { return cmp.Compare(b, a) })
	return out
}
