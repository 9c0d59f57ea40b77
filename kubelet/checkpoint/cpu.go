package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/node-resized/node-resized/kubelet/internal/cpulist"
	"github.com/node-resized/node-resized/topology"
)

// DefaultCPUManagerPath is where the kubelet keeps its CPU manager's state
// (<root-dir>/cpu_manager_state).
const DefaultCPUManagerPath = "/var/lib/kubelet/cpu_manager_state"

// cpuLayouts are the layouts of the CPU manager's checkpoint that the
// kubelet loads, in the order it tries them: newest first, and the oldest,
// which takes or refuses whatever the others leave, last. A layout a new
// kubelet writes is one file, cpu_vN.go, and one line here.
var cpuLayouts = []layout[*cpuFile, CPUManagerState]{decodeCPUV4, decodeCPUV3, decodeCPUV2}

var cpuManager = codec[CPUManagerState]{name: "CPU manager checkpoint", defaultPath: DefaultCPUManagerPath, parse: ParseCPUManager}

// CPUManagerState is the CPU manager's checkpoint as the kubelet reads it.
// It is a plain value, safe for concurrent reads.
type CPUManagerState struct {
	// Format is the layout the kubelet would load: CPUManagerV2, V3 or V4.
	Format     string `json:"format"`
	PolicyName string `json:"policyName"`
	// DefaultCPUSet is the shared pool.
	DefaultCPUSet topology.CPUSet `json:"defaultCpuSet"`
	// Containers maps pod UID → container name → the container's exclusive
	// CPUs (the checkpoint's entries).
	Containers map[string]map[string]topology.CPUSet `json:"containers,omitempty"`
	// Pods maps pod UID → the CPUs assigned to the pod as a whole (the
	// checkpoint's podEntries, v3 and v4).
	Pods map[string]topology.CPUSet `json:"pods,omitempty"`
	// Exclusive maps pod UID → every exclusive CPU of the pod: its
	// containers' and its own.
	Exclusive map[string]topology.CPUSet `json:"exclusive,omitempty"`
}

// AllCPUs returns the shared pool with every assignment: the set the
// static policy compares with the machine's CPUs when the kubelet starts,
// and refuses to start on when they differ ("current set of available CPUs
// doesn't match with CPUs in state"; with strictCPUReservation the machine's
// CPUs lose reservedSystemCPUs first).
func (s CPUManagerState) AllCPUs() topology.CPUSet {
	all := slices.Clone(s.DefaultCPUSet)
	for _, set := range s.Exclusive {
		all = append(all, set...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// ReadCPUManager reads the CPU manager's checkpoint at path ("" means
// DefaultCPUManagerPath) as the kubelet loads it: the v4 layout when the
// file has data or a dataChecksum (then its dataChecksum must match),
// otherwise v3 and then v2, each with the kubelet's checksum (under its own
// type name or the legacy "CPUManagerCheckpoint"; a v2 checksum of 0 is
// accepted, as the kubelet accepts it).
//
// A missing file gives an error that wraps fs.ErrNotExist (the kubelet has
// not run the CPU manager yet). A file the kubelet would refuse gives an
// error that wraps ErrCorrupt; when only the checksum is wrong, the state
// as written is returned with that error, since its CPUs are still those
// the containers run on.
func ReadCPUManager(path string) (CPUManagerState, error) {
	_, _, st, err := cpuManager.read(path)
	return st, err
}

// ParseCPUManager parses the contents of a CPU manager checkpoint; see
// ReadCPUManager.
func ParseCPUManager(b []byte) (CPUManagerState, error) {
	var f cpuFile
	if err := json.Unmarshal(b, &f); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err := knownFields(b, &cpuKnownFile{}, &cpuV4DataOut{}); err != nil {
		return CPUManagerState{}, err
	}
	// Every layout holds the v2 fields, and the kubelet decodes them in
	// each.
	var err error
	if f.entries, err = decodeEntries(f.Entries); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: entries: %w", ErrCorrupt, err)
	}
	return decode(&f, cpuLayouts)
}

// ExclusiveCPUsFunc returns a function that reads the checkpoint at path
// afresh on every call and returns every pod's exclusive CPUs, as
// evict.Options.ExclusiveCPUs (package kube/evict) wants them. A missing checkpoint means
// no pod has exclusive CPUs; a checksum mismatch does not hide them.
func ExclusiveCPUsFunc(path string) func() (map[string][]int, error) {
	return func() (map[string][]int, error) {
		st, err := ReadCPUManager(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return map[string][]int{}, nil
		case err != nil && st.Format == "":
			return nil, err
		}
		out := make(map[string][]int, len(st.Exclusive))
		for uid, set := range st.Exclusive {
			out[uid] = slices.Clone([]int(set))
		}
		return out, nil
	}
}

// cpuFile is a CPU manager checkpoint as its layouts read it: every field
// any layout has, kept raw where the kubelet's checksum tells a null from
// an absent value, and the v2 entries every layout holds.
type cpuFile struct {
	PolicyName    string          `json:"policyName"`
	DefaultCPUSet string          `json:"defaultCpuSet"`
	Entries       json.RawMessage `json:"entries"`
	PodEntries    json.RawMessage `json:"podEntries"`
	Checksum      uint64          `json:"checksum"`
	Data          string          `json:"data"`
	DataChecksum  uint64          `json:"dataChecksum"`

	// entries are Entries decoded (nil for a JSON null).
	entries map[string]map[string]string
}

// decodeEntries decodes entries: nil for a JSON null (nil in the kubelet's
// struct), an empty map for an absent field (as the kubelet's constructor
// makes it).
func decodeEntries(raw json.RawMessage) (map[string]map[string]string, error) {
	if len(raw) == 0 {
		return map[string]map[string]string{}, nil
	}
	var m map[string]map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// buildCPUState parses the CPU lists as the kubelet's restoreState does.
func buildCPUState(format, policy, def string, entries map[string]map[string]string, pods map[string]string) (CPUManagerState, error) {
	st := CPUManagerState{Format: format, PolicyName: policy}
	var err error
	if st.DefaultCPUSet, err = parseCPUSet(def); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: default CPU set: %w", ErrCorrupt, err)
	}
	union := func(uid string, set topology.CPUSet) {
		if st.Exclusive == nil {
			st.Exclusive = map[string]topology.CPUSet{}
		}
		all := append(slices.Clone(st.Exclusive[uid]), set...)
		slices.Sort(all)
		st.Exclusive[uid] = slices.Compact(all)
	}
	for uid, containers := range entries {
		if st.Containers == nil {
			st.Containers = map[string]map[string]topology.CPUSet{}
		}
		st.Containers[uid] = make(map[string]topology.CPUSet, len(containers))
		for name, list := range containers {
			set, err := parseCPUSet(list)
			if err != nil {
				return CPUManagerState{}, fmt.Errorf("%w: container %q of pod %s: %w", ErrCorrupt, name, uid, err)
			}
			st.Containers[uid][name] = set
			union(uid, set)
		}
	}
	for uid, list := range pods {
		set, err := parseCPUSet(list)
		if err != nil {
			return CPUManagerState{}, fmt.Errorf("%w: pod %s: %w", ErrCorrupt, uid, err)
		}
		if st.Pods == nil {
			st.Pods = map[string]topology.CPUSet{}
		}
		st.Pods[uid] = set
		union(uid, set)
	}
	return st, nil
}

// dumpCPUHead writes the dump of the fields every layout's struct starts
// with (v2's, under the struct's name), up to its entries.
func dumpCPUHead(b *strings.Builder, name string, f *cpuFile) {
	b.WriteString("(*state." + name + "){PolicyName:(string)" + f.PolicyName +
		" DefaultCPUSet:(string)" + f.DefaultCPUSet + " Entries:(map[string]map[string]string)")
	dumpMap(b, f.entries, func(uid string, containers map[string]string) {
		b.WriteString(uid + ":")
		dumpMap(b, containers, func(name, cpus string) { b.WriteString(name + ":" + cpus) })
	})
}

// parseCPUSet parses a CPU list of a checkpoint as the kubelet does
// (cpuset.Parse).
func parseCPUSet(s string) (topology.CPUSet, error) {
	ids, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	return topology.CPUSet(ids), nil
}

// cpuString formats a CPU list as the kubelet does (cpuset.CPUSet.String).
func cpuString(s topology.CPUSet) string { return cpulist.Format(s) }
