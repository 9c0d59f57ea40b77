//go:build linux

package kubeletparity

// Every checkpoint node-resized writes for a changed machine is loaded here
// by the kubelet's own code and checked the way the kubelet checks it when
// it starts:
//
//   - CPU manager: state.NewCheckpointState (the v4 loader: its checksum
//     over data), the checkpoint manager loading the v2 fields with their
//     legacy checksum as an older kubelet would, and then the static policy
//     built by cpumanager.NewStaticPolicy for the new topology
//     (topology.Discover on the new cAdvisor MachineInfo) whose Start runs
//     the unexported validateState on the loaded state;
//   - memory manager: state.NewCheckpointState (v3, dataChecksum), the v1
//     fields with their legacy checksum, and memorymanager.NewPolicyStatic
//     for the new MachineInfo whose Start runs its validateState.
//
// The starting checkpoints are written by the kubelet's state packages too,
// and each case first shows that the kubelet accepts the old checkpoint on
// the old machine and refuses it on the new one.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/utils/cpuset"

	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	cputopology "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/topology"
)

const (
	cpuCheckpoint = "cpu_manager_state"
	memCheckpoint = "memory_manager_state"
	gib           = uint64(1 << 30)
	mib           = uint64(1 << 20)
)

// numaNode is one NUMA node: its online CPUs (one thread per core), its
// MemTotal and its huge pages (page size in bytes → count).
type numaNode struct {
	id   int
	cpus []int
	mem  uint64
	huge map[uint64]uint64
}

type numaMachine []numaNode

// cadvisor is the MachineInfo cAdvisor reports for m: one socket per node.
func (m numaMachine) cadvisor() *cadvisorapi.MachineInfo {
	mi := &cadvisorapi.MachineInfo{NumSockets: len(m)}
	for _, n := range m {
		cn := cadvisorapi.Node{Id: n.id, Memory: n.mem}
		for _, c := range n.cpus {
			cn.Cores = append(cn.Cores, cadvisorapi.Core{Id: c, Threads: []int{c}, SocketID: n.id})
		}
		for _, size := range slices.Sorted(mapsKeys(n.huge)) {
			cn.HugePages = append(cn.HugePages, cadvisorapi.HugePagesInfo{PageSize: size / 1024, NumPages: n.huge[size]})
		}
		mi.NumCores += len(n.cpus)
		mi.MemoryCapacity += n.mem
		mi.Topology = append(mi.Topology, cn)
	}
	return mi
}

// model is m as node-resized's topology package describes it.
func (m numaMachine) model() []topology.Node {
	var out []topology.Node
	for _, n := range m {
		tn := topology.Node{ID: n.id, MemTotal: n.mem}
		for _, size := range slices.Sorted(mapsKeys(n.huge)) {
			tn.Hugepages = append(tn.Hugepages, topology.Hugepages{PageSize: size, Count: n.huge[size]})
		}
		out = append(out, tn)
	}
	return out
}

func (m numaMachine) online() topology.CPUSet {
	var all []int
	for _, n := range m {
		all = append(all, n.cpus...)
	}
	slices.Sort(all)
	return topology.CPUSet(all)
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// cpuCase is a CPU manager checkpoint on an old machine and a new machine.
type cpuCase struct {
	name       string
	old, new   numaMachine
	reserved   []int // reservedSystemCPUs
	strict     bool
	podLevel   bool                        // PodLevelResourceManagers
	baselines  map[string]map[string][]int // InPlacePodVerticalScalingExclusiveCPUs when set
	def        []int
	containers map[string]map[string][]int
	pods       map[string][]int
	dropped    []string
}

func cpuCases() []cpuCase {
	one := func(cpus ...int) numaMachine { return numaMachine{{id: 0, cpus: cpus}} }
	return []cpuCase{
		{name: "added", old: one(seq(0, 3)...), new: one(seq(0, 7)...), reserved: []int{0},
			def: []int{0, 3}, containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}},
			baselines: map[string]map[string][]int{"pod-a": {"app": {1}}}}, // admitted with one CPU, resized to two
		{name: "removed", old: one(seq(0, 7)...), new: one(seq(0, 5)...), reserved: []int{0}, podLevel: true,
			def:        []int{0, 3, 5},
			containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-b": {"db": {6, 7}}},
			pods:       map[string][]int{"pod-c": {4}}, dropped: []string{"pod-b"}},
		{name: "removed-pod-level", old: one(seq(0, 7)...), new: one(seq(0, 5)...), reserved: []int{0}, podLevel: true,
			def: []int{0, 3, 4, 5}, containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}},
			pods: map[string][]int{"pod-c": {6, 7}}, dropped: []string{"pod-c"}},
		{name: "strict-added", old: one(seq(0, 3)...), new: one(seq(0, 5)...), reserved: []int{0}, strict: true,
			def: []int{3}, containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}},
		{name: "reserved-two-removed", old: one(seq(0, 5)...), new: one(0, 1, 2, 3), reserved: []int{0, 1},
			def: []int{0, 1, 4, 5}, containers: map[string]map[string][]int{"pod-a": {"app": {2, 3}}}},
		{name: "numa-node-removed",
			old:      numaMachine{{id: 0, cpus: seq(0, 3)}, {id: 1, cpus: seq(4, 7)}},
			new:      numaMachine{{id: 0, cpus: seq(0, 3)}},
			reserved: []int{0}, def: []int{0, 3, 6, 7},
			containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-b": {"db": {4, 5}}},
			dropped:    []string{"pod-b"}},
		{name: "numa-node-added",
			old:      numaMachine{{id: 0, cpus: seq(0, 3)}},
			new:      numaMachine{{id: 0, cpus: seq(0, 3)}, {id: 1, cpus: seq(4, 7)}},
			reserved: []int{0}, def: []int{0, 3},
			containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}},
	}
}

// staticPolicy is the kubelet's static CPU policy for machine m.
func staticPolicy(t *testing.T, m numaMachine, reserved []int, strict bool) cpumanager.Policy {
	t.Helper()
	topo, err := cputopology.Discover(logr.Discard(), m.cadvisor())
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string]string{}
	if strict {
		opts[cpumanager.StrictCPUReservationOption] = "true"
	}
	p, err := cpumanager.NewStaticPolicy(logr.Discard(), topo, len(reserved), cpuset.New(reserved...),
		topologymanager.NewFakeManager(logr.Discard()), opts)
	if err != nil {
		t.Fatalf("NewStaticPolicy: %v", err)
	}
	return p
}

// kubeletStartsCPU loads dir's checkpoint as the kubelet does and runs the
// static policy's Start (validateState) for m on it.
func kubeletStartsCPU(t *testing.T, dir string, m numaMachine, c cpuCase) (cpustate.State, error) {
	t.Helper()
	st, err := cpustate.NewCheckpointState(logr.Discard(), dir, cpuCheckpoint, "static", nil)
	if err != nil {
		return nil, err
	}
	return st, staticPolicy(t, m, c.reserved, c.strict).Start(logr.Discard(), st)
}

// writeCPUCheckpoint writes c's starting checkpoint with the kubelet's
// checkpoint state, as a running kubelet would have.
func writeCPUCheckpoint(t *testing.T, dir string, c cpuCase) {
	t.Helper()
	st, err := cpustate.NewCheckpointState(logr.Discard(), dir, cpuCheckpoint, "static", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.SetDefaultCPUSet(cpuset.New(c.def...))
	for uid, containers := range c.containers {
		for name, cpus := range containers {
			st.SetCPUSet(uid, name, cpuset.New(cpus...))
		}
	}
	for uid, cpus := range c.pods {
		st.SetPodCPUSet(uid, cpuset.New(cpus...))
	}
	if c.baselines != nil {
		b := cpustate.ContainerCPUBaselines{}
		for uid, containers := range c.baselines {
			b[uid] = map[string]cpustate.ContainerCPUBaseline{}
			for name, cpus := range containers {
				b[uid][name] = cpustate.ContainerCPUBaseline{Baseline: cpuset.New(cpus...)}
			}
		}
		st.SetCPUBaselines(b)
	}
}

func TestCPUManagerCheckpointRewrite(t *testing.T) {
	for _, c := range cpuCases() {
		t.Run(c.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResourceManagers, c.podLevel)
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.InPlacePodVerticalScalingExclusiveCPUs, c.baselines != nil)
			dir := t.TempDir()
			writeCPUCheckpoint(t, dir, c)
			if _, err := kubeletStartsCPU(t, dir, c.old, c); err != nil {
				t.Fatalf("the kubelet refuses the starting checkpoint on the old machine: %v", err)
			}
			if _, err := kubeletStartsCPU(t, dir, c.new, c); err == nil {
				t.Fatal("the kubelet accepts the old checkpoint on the new machine: the case shows nothing")
			}

			plan, err := kubelet.PlanCPUManagerCheckpoint(filepath.Join(dir, cpuCheckpoint),
				kubelet.CPUTarget{Online: c.new.online(), Reserved: topology.CPUSet(c.reserved), StrictReservation: c.strict})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(plan.Dropped, c.dropped) {
				t.Errorf("dropped %v, want %v", plan.Dropped, c.dropped)
			}
			if err := plan.Apply(); err != nil {
				t.Fatal(err)
			}
			checkCPUWritten(t, dir, c)
		})
	}
}

// checkCPUWritten holds the written checkpoint against the kubelet.
func checkCPUWritten(t *testing.T, dir string, c cpuCase) {
	t.Helper()
	st, err := kubeletStartsCPU(t, dir, c.new, c)
	if err != nil {
		t.Fatalf("the kubelet refuses the rewritten checkpoint: %v", err)
	}
	for uid, containers := range c.containers {
		for name, cpus := range containers {
			got, ok := st.GetCPUSet(uid, name)
			if slices.Contains(c.dropped, uid) != !ok || (ok && !got.Equals(cpuset.New(cpus...))) {
				t.Errorf("pod %s container %s: %v %v (dropped: %v)", uid, name, got, ok, c.dropped)
			}
		}
	}
	for uid, containers := range c.baselines {
		for name, cpus := range containers {
			b, ok := st.GetBaselineCPUSet(uid, name)
			if slices.Contains(c.dropped, uid) != !ok || (ok && !b.Equals(cpuset.New(cpus...))) {
				t.Errorf("pod %s container %s: baseline %v %v (dropped: %v)", uid, name, b, ok, c.dropped)
			}
		}
	}
	for uid, cpus := range c.pods {
		got, ok := st.GetPodCPUSet(uid)
		if slices.Contains(c.dropped, uid) != !ok || (ok && !got.Equals(cpuset.New(cpus...))) {
			t.Errorf("pod %s: %v %v (dropped: %v)", uid, got, ok, c.dropped)
		}
	}
	// An older kubelet reads the v2 fields, with their own checksum.
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	v2 := &cpustate.CPUManagerCheckpointV2{Entries: map[string]map[string]string{}}
	if err := cm.GetCheckpoint(cpuCheckpoint, v2); err != nil {
		t.Errorf("the v2 fields: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, cpuCheckpoint+kubelet.BackupSuffix)); err != nil {
		t.Errorf("no backup: %v", err)
	}
}

// A reserved CPU that goes offline, or a shared pool that would be empty,
// is refused rather than written.
func TestCPUManagerCheckpointInfeasible(t *testing.T) {
	dir := t.TempDir()
	c := cpuCase{old: numaMachine{{id: 0, cpus: seq(0, 3)}}, reserved: []int{0, 3}, def: []int{0, 3},
		containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}}
	writeCPUCheckpoint(t, dir, c)
	path := filepath.Join(dir, cpuCheckpoint)
	before, _ := os.ReadFile(path)
	for _, target := range []kubelet.CPUTarget{
		{Online: topology.CPUSet{0, 1, 2}, Reserved: topology.CPUSet{0, 3}},
		{Online: topology.CPUSet{0, 1, 2, 3}, Reserved: topology.CPUSet{0, 3}, StrictReservation: true},
	} {
		p, err := kubelet.PlanCPUManagerCheckpoint(path, target)
		if !errors.Is(err, kubelet.ErrCheckpointInfeasible) {
			t.Errorf("%+v: plan %+v, err %v; want ErrCheckpointInfeasible", target, p, err)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the checkpoint changed")
	}
}

