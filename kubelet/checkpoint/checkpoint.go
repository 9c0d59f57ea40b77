package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/kubelet/internal/cpulist"
	"github.com/node-resized/node-resized/topology"
)

// DefaultCPUManagerPath is where the kubelet keeps its CPU manager's
// state (<root-dir>/cpu_manager_state).
const DefaultCPUManagerPath = "/var/lib/kubelet/cpu_manager_state"

// maxSize caps the checkpoint read: a few hundred bytes per pod.
const maxSize = 16 << 20

// ErrCorrupt is wrapped by the errors returned for a checkpoint the
// kubelet itself would refuse: not JSON, unparsable CPU sets, or a
// checksum that does not match. Such a checkpoint stops the kubelet from
// starting until it is removed.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Checkpoint layouts, as the kubelet names its CPUManagerCheckpoint
// versions.
const (
	// CPUManagerV2: policyName, defaultCpuSet, entries, checksum.
	CPUManagerV2 = "v2"
	// CPUManagerV3: v2 with podEntries (pod-level resource managers).
	CPUManagerV3 = "v3"
	// CPUManagerV4: v2 for older kubelets, plus data (the whole state as a
	// JSON string) and dataChecksum, which is authoritative.
	CPUManagerV4 = "v4"
)

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

// ReadCPUManager reads the CPU manager's checkpoint at path
// ("" means DefaultCPUManagerPath) as the kubelet loads it: the v4
// layout when the file has data or a dataChecksum (then its dataChecksum
// must match), otherwise v3 and then v2, each with the kubelet's checksum
// (under its own type name or the legacy "CPUManagerCheckpoint"; a v2
// checksum of 0 is accepted, as the kubelet accepts it).
//
// A missing file gives an error that wraps fs.ErrNotExist (the kubelet has
// not run the CPU manager yet). A file the kubelet would refuse gives an
// error that wraps ErrCorrupt; when only the checksum is wrong,
// the state as written is returned with that error, since its CPUs are
// still those the containers run on.
func ReadCPUManager(path string) (CPUManagerState, error) {
	if path == "" {
		path = DefaultCPUManagerPath
	}
	b, err := readCheckpointFile(path)
	if errors.Is(err, capped.ErrTooLarge) {
		return CPUManagerState{}, fmt.Errorf("CPU manager checkpoint: %w: %w", err, ErrCorrupt)
	}
	if err != nil {
		return CPUManagerState{}, fmt.Errorf("CPU manager checkpoint: %w", err)
	}
	st, err := ParseCPUManager(b)
	if err != nil {
		return st, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
	}
	return st, nil
}

// ExclusiveCPUsFunc returns a function that reads the checkpoint at path
// afresh on every call and returns every pod's exclusive CPUs, as
// kube.EvictorOptions.ExclusiveCPUs wants them. A missing checkpoint means
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

// ckFile is every field any layout has, kept raw where the kubelet's
// checksum tells a null from an absent value.
type ckFile struct {
	PolicyName    string          `json:"policyName"`
	DefaultCPUSet string          `json:"defaultCpuSet"`
	Entries       json.RawMessage `json:"entries"`
	PodEntries    json.RawMessage `json:"podEntries"`
	Checksum      uint64          `json:"checksum"`
	Data          string          `json:"data"`
	DataChecksum  uint64          `json:"dataChecksum"`
}

// ckData is the v4 data payload (baselines are not needed here).
type ckData struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	PodEntries    map[string]ckPodEntry        `json:"podEntries"`
}

type ckPodEntry struct {
	CPUSet string `json:"cpuSet"`
}

// ParseCPUManager parses the contents of a CPU manager checkpoint;
// see ReadCPUManager.
func ParseCPUManager(b []byte) (CPUManagerState, error) {
	var f ckFile
	if err := json.Unmarshal(b, &f); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if f.Data != "" || f.DataChecksum != 0 {
		return parseV4(f)
	}
	entries, eNull, err := decodeEntries(f.Entries)
	if err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: entries: %w", ErrCorrupt, err)
	}
	// The kubelet tries v3 first; a podEntries it cannot decode sends it
	// to v2, which ignores them.
	pods, pNull, perr := decodePodEntries(f.PodEntries)
	if perr == nil {
		h := v3Hash(f, entries, eNull, pods, pNull)
		if uint64(h("CPUManagerCheckpointV3")) == f.Checksum || uint64(h("CPUManagerCheckpoint")) == f.Checksum {
			return build(CPUManagerV3, f.PolicyName, f.DefaultCPUSet, entries, pods)
		}
	}
	h := v2Hash(f, entries, eNull)
	if f.Checksum == 0 || uint64(h("CPUManagerCheckpointV2")) == f.Checksum || uint64(h("CPUManagerCheckpoint")) == f.Checksum {
		return build(CPUManagerV2, f.PolicyName, f.DefaultCPUSet, entries, nil)
	}
	st, err := build(CPUManagerV2, f.PolicyName, f.DefaultCPUSet, entries, pods)
	if err != nil {
		return CPUManagerState{}, err
	}
	return st, fmt.Errorf("%w: checksum %d matches neither the v3 nor the v2 content (v2 hashes to %d)",
		ErrCorrupt, f.Checksum, h("CPUManagerCheckpoint"))
}

func parseV4(f ckFile) (CPUManagerState, error) {
	// The kubelet decodes the v2 copy beside the data too.
	if _, _, err := decodeEntries(f.Entries); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: entries: %w", ErrCorrupt, err)
	}
	var d ckData
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return CPUManagerState{}, fmt.Errorf("%w: v4 data: %w", ErrCorrupt, err)
	}
	pods := make(map[string]string, len(d.PodEntries))
	for uid, pe := range d.PodEntries {
		pods[uid] = pe.CPUSet
	}
	st, err := build(CPUManagerV4, d.PolicyName, d.DefaultCPUSet, d.Entries, pods)
	if err != nil {
		return CPUManagerState{}, err
	}
	// checksum.New(data): fnv32a over the spew dump of a string.
	if sum := fnv32a("(string)" + f.Data); uint64(sum) != f.DataChecksum {
		return st, fmt.Errorf("%w: dataChecksum %d does not match the data (%d)", ErrCorrupt, f.DataChecksum, sum)
	}
	return st, nil
}

// decodeEntries decodes entries; null reports a JSON null (nil in the
// kubelet's struct), as opposed to an absent field (an empty map there).
func decodeEntries(raw json.RawMessage) (m map[string]map[string]string, null bool, err error) {
	if len(raw) == 0 {
		return map[string]map[string]string{}, false, nil
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, true, nil
	}
	err = json.Unmarshal(raw, &m)
	return m, false, err
}

// decodePodEntries decodes podEntries into pod UID → CPU list; an entry
// whose list does not parse is an error, as in the kubelet's PodEntry.
func decodePodEntries(raw json.RawMessage) (m map[string]string, null bool, err error) {
	if len(raw) == 0 {
		return map[string]string{}, false, nil
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, true, nil
	}
	var pe map[string]*ckPodEntry
	if err := json.Unmarshal(raw, &pe); err != nil {
		return nil, false, err
	}
	m = make(map[string]string, len(pe))
	for uid, e := range pe {
		s := ""
		if e != nil {
			s = e.CPUSet
		}
		if _, err := parseCPUSet(s); err != nil {
			return nil, false, fmt.Errorf("pod %s: %w", uid, err)
		}
		m[uid] = s
	}
	return m, false, nil
}

// build parses the CPU lists as the kubelet's restoreState does.
func build(format, policy, def string, entries map[string]map[string]string, pods map[string]string) (CPUManagerState, error) {
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

// The kubelet's checkpoint checksums are fnv32a over the go-spew dump
// (k8s.io/utils/dump.ForHash: %#v, sorted keys) of the checkpoint struct
// with its checksum zeroed. The dumps are reproduced here for the few shapes
// the checkpoint has; the tests hold them against files the kubelet wrote.

func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// v2Hash returns the checksum of the v2 fields under a struct name.
func v2Hash(f ckFile, entries map[string]map[string]string, null bool) func(name string) uint32 {
	return func(name string) uint32 {
		var b strings.Builder
		b.WriteString("(*state." + name + "){PolicyName:(string)" + f.PolicyName +
			" DefaultCPUSet:(string)" + f.DefaultCPUSet + " Entries:(map[string]map[string]string)")
		dumpEntries(&b, entries, null)
		b.WriteString(" Checksum:(checksum.Checksum)0}")
		return fnv32a(b.String())
	}
}

// v3Hash returns the checksum of the v3 fields under a struct name.
func v3Hash(f ckFile, entries map[string]map[string]string, eNull bool, pods map[string]string, pNull bool) func(name string) uint32 {
	return func(name string) uint32 {
		var b strings.Builder
		b.WriteString("(*state." + name + "){PolicyName:(string)" + f.PolicyName +
			" DefaultCPUSet:(string)" + f.DefaultCPUSet + " Entries:(map[string]map[string]string)")
		dumpEntries(&b, entries, eNull)
		b.WriteString(" PodEntries:(state.PodCPUAssignments)")
		if pNull {
			b.WriteString("<nil>")
		} else {
			b.WriteString("map[")
			for i, uid := range slices.Sorted(maps.Keys(pods)) {
				if i > 0 {
					b.WriteByte(' ')
				}
				set, _ := parseCPUSet(pods[uid])
				b.WriteString(uid + ":{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[")
				for j, c := range set {
					if j > 0 {
						b.WriteByte(' ')
					}
					b.WriteString(strconv.Itoa(c) + ":{}")
				}
				b.WriteString("]}}")
			}
			b.WriteString("]")
		}
		b.WriteString(" Checksum:(checksum.Checksum)0}")
		return fnv32a(b.String())
	}
}

func dumpEntries(b *strings.Builder, entries map[string]map[string]string, null bool) {
	if null {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, uid := range slices.Sorted(maps.Keys(entries)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(uid + ":")
		c := entries[uid]
		if c == nil {
			b.WriteString("<nil>")
			continue
		}
		b.WriteString("map[")
		for j, name := range slices.Sorted(maps.Keys(c)) {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(name + ":" + c[name])
		}
		b.WriteString("]")
	}
	b.WriteString("]")
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
