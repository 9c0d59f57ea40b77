package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/node-resized/node-resized/topology"
)

// ErrInfeasible is wrapped by the errors the checkpoint plans
// return when no checkpoint the kubelet would accept keeps the pods that
// still run: an operator has to act first, and the message says what to do.
// The kubelet must not be restarted meanwhile.
var ErrInfeasible = errors.New("no checkpoint the kubelet accepts fits the new machine")

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
// of CPUs, made by PlanCPUManager and written by Apply. It is not
// safe for concurrent use.
type CPUManagerPlan struct {
	Path string
	// Old is the checkpoint as read, New as it will be written.
	Old, New CPUManagerState
	// Dropped are the pods whose exclusive CPUs are no longer all online:
	// their assignments are left out of New. They must have been evicted.
	Dropped []string
	// Changed reports whether New differs from Old; Apply writes nothing
	// otherwise.
	Changed bool

	old, data []byte
}

// PlanCPUManager reads the CPU manager's checkpoint at path (""
// means DefaultCPUManagerPath), verifies it as the kubelet does (see
// ReadCPUManager; a corrupt one is an error, never rewritten),
// and plans the checkpoint the kubelet's static policy accepts on target
// (its validateState): every pod whose exclusive CPUs are all still online
// keeps them, container and pod level alike; the others are dropped; the
// shared pool (defaultCpuSet) becomes the online CPUs minus the kept
// assignments (minus the reserved CPUs with strict reservation). CPUs
// added join the shared pool. The plan is written in v1.37's layout (v4,
// with the v2 fields and checksum older kubelets read).
//
// The none policy's checkpoint, and a static one not yet initialised, need
// no rewrite. A missing checkpoint gives an error wrapping fs.ErrNotExist.
func PlanCPUManager(path string, target CPUTarget) (*CPUManagerPlan, error) {
	if path == "" {
		path = DefaultCPUManagerPath
	}
	b, err := readCheckpointFile(path)
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint: %w", err)
	}
	st, err := ParseCPUManager(b)
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
	}
	baselines, err := cpuBaselines(b, st.Format)
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint %s: %w: baselines: %w", path, ErrCorrupt, err)
	}
	p := &CPUManagerPlan{Path: path, Old: st, New: st, old: b}
	if st.PolicyName != "static" || (len(st.DefaultCPUSet) == 0 && len(st.Exclusive) == 0) {
		return p, nil
	}
	if p.New, p.Dropped, err = rewriteCPUs(st, target); err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
	}
	p.Changed = !sameCPUState(p.Old, p.New)
	if p.Changed {
		for _, uid := range p.Dropped {
			delete(baselines, uid)
		}
		if p.data, err = marshalCPUv4(p.New, baselines); err != nil {
			return nil, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
		}
	}
	return p, nil
}

// Apply writes the planned checkpoint when it changed: atomically, with
// the previous file kept at Path+BackupSuffix. It fails, wrapping
// ErrChanged, when the file is no longer the one planned from.
func (p *CPUManagerPlan) Apply() error {
	if !p.Changed {
		return nil
	}
	return replaceCheckpoint(p.Path, p.old, p.data)
}

// Bytes returns the checkpoint Apply writes (nil when unchanged).
func (p *CPUManagerPlan) Bytes() []byte { return p.data }

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

// cpuBaselines returns the v4 data's baselines (the CPUs each container
// was admitted with, kept for in-place resize), nil in older layouts.
func cpuBaselines(b []byte, format string) (map[string]map[string]ckBaseline, error) {
	if format != CPUManagerV4 {
		return nil, nil
	}
	var f struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	var d struct {
		Baselines map[string]map[string]ckBaseline `json:"baselines"`
	}
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return nil, err
	}
	return d.Baselines, nil
}

type ckBaseline struct {
	Baseline string `json:"baseline"`
}

// ckDataOut is the kubelet's CPUManagerCheckpointData, field for field.
type ckDataOut struct {
	PolicyName    string                           `json:"policyName"`
	DefaultCPUSet string                           `json:"defaultCpuSet"`
	Entries       map[string]map[string]string     `json:"entries,omitempty"`
	PodEntries    map[string]ckPodEntryOut         `json:"podEntries,omitempty"`
	Baselines     map[string]map[string]ckBaseline `json:"baselines,omitempty"`
}

type ckPodEntryOut struct {
	CPUSet string `json:"cpuSet,omitempty"`
}

// ckFileOut is the kubelet's CPUManagerCheckpoint (v4) as it marshals it.
type ckFileOut struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
	Data          string                       `json:"data"`
	DataChecksum  uint64                       `json:"dataChecksum"`
}

// marshalCPUv4 writes st as the kubelet's MarshalCheckpoint does for v4:
// the data with its checksum, and the v2 fields with theirs.
func marshalCPUv4(st CPUManagerState, baselines map[string]map[string]ckBaseline) ([]byte, error) {
	d := ckDataOut{PolicyName: st.PolicyName, DefaultCPUSet: cpuString(st.DefaultCPUSet),
		Entries: map[string]map[string]string{}, Baselines: baselines}
	for uid, containers := range st.Containers {
		d.Entries[uid] = make(map[string]string, len(containers))
		for name, set := range containers {
			d.Entries[uid][name] = cpuString(set)
		}
	}
	if st.Pods != nil {
		d.PodEntries = make(map[string]ckPodEntryOut, len(st.Pods))
		for uid, set := range st.Pods {
			d.PodEntries[uid] = ckPodEntryOut{CPUSet: cpuString(set)}
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("marshal CPU manager checkpoint data: %w", err)
	}
	f := ckFileOut{PolicyName: d.PolicyName, DefaultCPUSet: d.DefaultCPUSet, Entries: d.Entries,
		Data: string(data), DataChecksum: uint64(fnv32a("(string)" + string(data)))}
	f.Checksum = uint64(v2Hash(ckFile{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet}, d.Entries, false)("CPUManagerCheckpoint"))
	return json.Marshal(f)
}

// cpuString formats a CPU list as the kubelet does (cpuset.CPUSet.String).
func cpuString(s topology.CPUSet) string { return cpuset.New(s...).String() }
