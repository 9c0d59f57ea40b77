package checkpoint

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/node-resized/node-resized/topology"
)

// CPUTarget is the machine the kubelet will find at its next start, as its
// static CPU policy sees it.
type CPUTarget struct {
	// Online are the CPUs that will be online.
	Online topology.CPUSet
	// Reserved are the CPUs the static policy reserves: reservedSystemCPUs
	// when set, otherwise the CPUs it takes for kube-/system-reserved.
	Reserved topology.CPUSet
	// StrictReservation is the static policy's strict-cpu-reservation
	// option: the reserved CPUs are then kept out of the shared pool too.
	StrictReservation bool
}

// CPUManagerPlan is a rewrite of the CPU manager's checkpoint for a new set
// of CPUs; its Dropped are the pods whose exclusive CPUs are no longer all
// online.
type CPUManagerPlan = Plan[CPUManagerState]

// PlanCPUManager reads the CPU manager's checkpoint at path ("" means
// DefaultCPUManagerPath), verifies it as the kubelet does (see
// ReadCPUManager; a corrupt one is an error, never rewritten), and plans
// the checkpoint the kubelet's static policy accepts on target (its
// validateState): every pod whose exclusive CPUs are all still online
// keeps them, container and pod level alike; the others are dropped; the
// shared pool (defaultCpuSet) becomes the online CPUs minus the kept
// assignments (minus the reserved CPUs with strict reservation). CPUs
// added join the shared pool. The plan is written in v1.37's layout (v4),
// whatever layout it was read in, with the legacy fields and checksum
// older kubelets read: v2's, or v3's when a pod holds pod-level CPUs.
//
// The none policy's checkpoint, and a static one not yet initialised, need
// no rewrite. A missing checkpoint gives an error wrapping fs.ErrNotExist.
func PlanCPUManager(path string, target CPUTarget) (*CPUManagerPlan, error) {
	return cpuManager.plan(path, func(b []byte, st CPUManagerState) (CPUManagerState, []string, []byte, error) {
		baselines, err := cpuBaselines(b, st.Format)
		if err != nil {
			return st, nil, nil, fmt.Errorf("%w: baselines: %w", ErrCorrupt, err)
		}
		if st.PolicyName != "static" || (len(st.DefaultCPUSet) == 0 && len(st.Exclusive) == 0) {
			return st, nil, nil, nil
		}
		next, dropped, err := rewriteCPUs(st, target)
		if err != nil || sameCPUState(st, next) {
			return next, dropped, nil, err
		}
		for _, uid := range dropped {
			delete(baselines, uid)
		}
		data, err := marshalCPUV4(next, baselines)
		return next, dropped, data, err
	})
}

// rewriteCPUs keeps the assignments that lie on online CPUs and rebuilds
// the shared pool around them.
func rewriteCPUs(st CPUManagerState, t CPUTarget) (CPUManagerState, []string, error) {
	online := cpuset.New(t.Online...)
	reserved := cpuset.New(t.Reserved...)
	out := CPUManagerState{Format: CPUManagerV4, PolicyName: st.PolicyName}
	var dropped []string
	var assigned cpuset.CPUSet
	holders := map[int]string{}
	for _, uid := range slices.Sorted(maps.Keys(st.Exclusive)) {
		cpus := cpuset.New(st.Exclusive[uid]...)
		if !cpus.IsSubsetOf(online) {
			dropped = append(dropped, uid)
			continue
		}
		copyPod(&out, st, uid)
		assigned = assigned.Union(cpus)
		for _, c := range cpus.List() {
			holders[c] = uid
		}
	}
	if !reserved.IsSubsetOf(online) {
		return CPUManagerState{}, nil, fmt.Errorf("%w: reserved CPUs %s are not all online (online: %s); "+
			"bring them online or change reservedSystemCPUs before the kubelet restarts", ErrInfeasible, reserved, online)
	}
	if held := reserved.Intersection(assigned); !held.IsEmpty() {
		return CPUManagerState{}, nil, fmt.Errorf("%w: reserved CPUs %s are held exclusively by pod %s; "+
			"evict it before the kubelet restarts", ErrInfeasible, held, holders[held.List()[0]])
	}
	shared := online.Difference(assigned)
	if t.StrictReservation {
		shared = shared.Difference(reserved)
	}
	if shared.IsEmpty() && len(out.Exclusive) > 0 {
		return CPUManagerState{}, nil, fmt.Errorf("%w: pods hold every online CPU (%s) exclusively and the shared pool would be empty; "+
			"evict a Guaranteed pod before the kubelet restarts", ErrInfeasible, online)
	}
	out.DefaultCPUSet = topology.CPUSet(shared.List())
	return out, dropped, nil
}

// copyPod copies a pod's assignments from st to out.
func copyPod(out *CPUManagerState, st CPUManagerState, uid string) {
	if c, ok := st.Containers[uid]; ok {
		if out.Containers == nil {
			out.Containers = map[string]map[string]topology.CPUSet{}
		}
		out.Containers[uid] = maps.Clone(c)
	}
	if set, ok := st.Pods[uid]; ok {
		if out.Pods == nil {
			out.Pods = map[string]topology.CPUSet{}
		}
		out.Pods[uid] = set
	}
	if out.Exclusive == nil {
		out.Exclusive = map[string]topology.CPUSet{}
	}
	out.Exclusive[uid] = st.Exclusive[uid]
}

func sameCPUState(a, b CPUManagerState) bool {
	if !slices.Equal(a.DefaultCPUSet, b.DefaultCPUSet) || len(a.Exclusive) != len(b.Exclusive) {
		return false
	}
	for uid := range a.Exclusive {
		if _, ok := b.Exclusive[uid]; !ok {
			return false
		}
	}
	return true
}
