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
	"strings"
	"testing"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/utils/cpuset"

	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	cputopology "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
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

			plan, err := checkpoint.PlanCPUManager(filepath.Join(dir, cpuCheckpoint),
				checkpoint.CPUTarget{Online: c.new.online(), Reserved: topology.CPUSet(c.reserved), StrictReservation: c.strict})
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
	if _, err := os.Stat(filepath.Join(dir, cpuCheckpoint+checkpoint.BackupSuffix)); err != nil {
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
	for _, target := range []checkpoint.CPUTarget{
		{Online: topology.CPUSet{0, 1, 2}, Reserved: topology.CPUSet{0, 3}},
		{Online: topology.CPUSet{0, 1, 2, 3}, Reserved: topology.CPUSet{0, 3}, StrictReservation: true},
	} {
		p, err := checkpoint.PlanCPUManager(path, target)
		if !errors.Is(err, checkpoint.ErrInfeasible) {
			t.Errorf("%+v: plan %+v, err %v; want ErrInfeasible", target, p, err)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the checkpoint changed")
	}
}

// memCase is a memory manager checkpoint on an old machine and a new one.
type memCase struct {
	name     string
	old, new numaMachine
	reserved map[int]map[v1.ResourceName]uint64 // reservedMemory
	// blocks are pod → container → its memory blocks.
	blocks  map[string]map[string][]memstate.Block
	dropped []string
	// infeasible: no checkpoint fits, the plan must refuse.
	infeasible bool
}

func memMachine(mem0, mem1, mem2 uint64, huge0 uint64) numaMachine {
	m := numaMachine{
		{id: 0, cpus: []int{0}, mem: mem0, huge: map[uint64]uint64{2 * mib: huge0, gib: 0}},
		{id: 1, cpus: []int{1}, mem: mem1, huge: map[uint64]uint64{2 * mib: 0, gib: 0}},
	}
	if mem2 > 0 {
		m = append(m, numaNode{id: 2, cpus: []int{2}, mem: mem2, huge: map[uint64]uint64{2 * mib: 0, gib: 0}})
	}
	return m
}

func memCases() []memCase {
	reserved := map[int]map[v1.ResourceName]uint64{0: {v1.ResourceMemory: 512 * mib}, 1: {v1.ResourceMemory: 256 * mib}}
	blocks := map[string]map[string][]memstate.Block{
		"pod-a": {"app": {{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gib},
			{NUMAAffinity: []int{0}, Type: "hugepages-2Mi", Size: 256 * mib}}},
		"pod-b": {"db": {{NUMAAffinity: []int{1, 2}, Type: v1.ResourceMemory, Size: 5 * gib}}},
	}
	return []memCase{
		{name: "grown", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(4*gib, 6*gib, 4*gib, 512),
			reserved: reserved, blocks: blocks},
		{name: "shrunk-still-fits", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(3*gib, 3*gib, 4*gib, 512),
			reserved: reserved, blocks: blocks},
		{name: "hugepages-added", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(4*gib, 4*gib, 4*gib, 1024),
			reserved: reserved, blocks: blocks},
		{name: "node-removed", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(4*gib, 4*gib, 0, 512),
			reserved: reserved, blocks: blocks, dropped: []string{"pod-b"}},
		{name: "node-added", old: memMachine(4*gib, 4*gib, 0, 512), new: memMachine(4*gib, 4*gib, 2*gib, 512),
			reserved: reserved, blocks: map[string]map[string][]memstate.Block{"pod-a": blocks["pod-a"]}},
		{name: "shrunk-below-assigned", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(1536*mib, 4*gib, 4*gib, 512),
			reserved: reserved, blocks: blocks, infeasible: true},
		{name: "shrunk-below-reserved", old: memMachine(4*gib, 4*gib, 4*gib, 512), new: memMachine(4*gib, 128*mib, 4*gib, 512),
			reserved: reserved, blocks: map[string]map[string][]memstate.Block{"pod-a": blocks["pod-a"]}, infeasible: true},
	}
}

// systemReserved is the memory manager's reservation table for m: every
// node present, as the kubelet's convertReserved builds it.
func systemReserved(m numaMachine, r map[int]map[v1.ResourceName]uint64) map[int]map[v1.ResourceName]uint64 {
	out := map[int]map[v1.ResourceName]uint64{}
	for _, n := range m {
		out[n.id] = map[v1.ResourceName]uint64{}
		for name, v := range r[n.id] {
			out[n.id][name] = v
		}
	}
	return out
}

// kubeletStartsMemory loads dir's checkpoint as the kubelet does and runs
// the Static policy's Start (validateState) for m on it.
func kubeletStartsMemory(t *testing.T, dir string, m numaMachine, c memCase) (memstate.State, error) {
	t.Helper()
	st, err := memstate.NewCheckpointState(logr.Discard(), dir, memCheckpoint, "Static")
	if err != nil {
		return nil, err
	}
	p, err := memorymanager.NewPolicyStatic(logr.Discard(), m.cadvisor(), systemReserved(m, c.reserved), topologymanager.NewFakeManager(logr.Discard()))
	if err != nil {
		t.Fatalf("NewPolicyStatic: %v", err)
	}
	return st, p.Start(logr.Discard(), st)
}

// writeMemCheckpoint writes c's starting checkpoint with the kubelet's
// checkpoint state: the policy's own default machine state (its Start on
// an empty state), then each assignment accounted as the policy accounts
// it. The kubelet's Start on the old machine checks the result.
func writeMemCheckpoint(t *testing.T, dir string, c memCase) {
	t.Helper()
	st, err := kubeletStartsMemory(t, dir, c.old, c)
	if err != nil {
		t.Fatal(err)
	}
	ms := st.GetMachineState()
	for _, uid := range slices.Sorted(mapsKeys(c.blocks)) {
		for name, blocks := range c.blocks[uid] {
			st.SetMemoryBlocks(uid, name, blocks)
			for _, b := range blocks {
				left := b.Size
				for _, id := range b.NUMAAffinity {
					ms[id].NumberOfAssignments++
					ms[id].Cells = b.NUMAAffinity
					t := ms[id].MemoryMap[b.Type]
					take := min(left, t.Free)
					t.Free -= take
					t.Reserved += take
					left -= take
				}
			}
		}
	}
	st.SetMachineState(ms)
}

func TestMemoryManagerCheckpointRewrite(t *testing.T) {
	for _, c := range memCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeMemCheckpoint(t, dir, c)
			if _, err := kubeletStartsMemory(t, dir, c.old, c); err != nil {
				t.Fatalf("the kubelet refuses the starting checkpoint on the old machine: %v", err)
			}
			if _, err := kubeletStartsMemory(t, dir, c.new, c); err == nil {
				t.Fatal("the kubelet accepts the old checkpoint on the new machine: the case shows nothing")
			}
			path := filepath.Join(dir, memCheckpoint)
			before, _ := os.ReadFile(path)
			reserved := map[int]map[string]uint64{}
			for id, r := range c.reserved {
				reserved[id] = map[string]uint64{}
				for name, v := range r {
					reserved[id][string(name)] = v
				}
			}
			plan, err := checkpoint.PlanMemoryManager(path, c.new.model(), reserved)
			if c.infeasible {
				if !errors.Is(err, checkpoint.ErrInfeasible) {
					t.Fatalf("plan: %v, want ErrInfeasible", err)
				}
				if after, _ := os.ReadFile(path); string(after) != string(before) {
					t.Error("the checkpoint changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(plan.Dropped, c.dropped) {
				t.Errorf("dropped %v, want %v", plan.Dropped, c.dropped)
			}
			if err := plan.Apply(); err != nil {
				t.Fatal(err)
			}
			checkMemWritten(t, dir, c)
		})
	}
}

// checkMemWritten holds the written checkpoint against the kubelet.
func checkMemWritten(t *testing.T, dir string, c memCase) {
	t.Helper()
	st, err := kubeletStartsMemory(t, dir, c.new, c)
	if err != nil {
		t.Fatalf("the kubelet refuses the rewritten checkpoint: %v", err)
	}
	for uid, containers := range c.blocks {
		for name, blocks := range containers {
			got := st.GetMemoryBlocks(uid, name)
			if slices.Contains(c.dropped, uid) != (got == nil) || (got != nil && !slices.EqualFunc(got, blocks, sameBlock)) {
				t.Errorf("pod %s container %s: %v (dropped: %v)", uid, name, got, c.dropped)
			}
		}
	}
	// An older kubelet reads the v1 fields, with their own checksum.
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	v1cp := &memstate.MemoryManagerCheckpointV1{Entries: memstate.ContainerMemoryAssignments{}, MachineState: memstate.NUMANodeMap{}}
	if err := cm.GetCheckpoint(memCheckpoint, v1cp); err != nil || v1cp.Checksum == 0 {
		t.Errorf("the v1 fields: %v (checksum %d)", err, v1cp.Checksum)
	}
	if _, err := os.Stat(filepath.Join(dir, memCheckpoint+checkpoint.BackupSuffix)); err != nil {
		t.Errorf("no backup: %v", err)
	}
}

func sameBlock(a, b memstate.Block) bool {
	return a.Type == b.Type && a.Size == b.Size && slices.Equal(a.NUMAAffinity, b.NUMAAffinity)
}

// Our reader takes every layout the kubelet writes, checksum included, and
// refuses what the kubelet refuses.
func TestMemoryManagerCheckpointLayouts(t *testing.T) {
	ms := memstate.NUMANodeMap{
		0: {NumberOfAssignments: 1, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 4 * gib, SystemReserved: gib, Allocatable: 3 * gib, Reserved: gib, Free: 2 * gib},
			"hugepages-2Mi":   {}}},
		1: {Cells: []int{1}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{v1.ResourceMemory: {TotalMemSize: gib, Allocatable: gib, Free: gib}}},
	}
	entries := memstate.ContainerMemoryAssignments{"pod-a": {"app": {{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gib}}}, "pod-b": {}}
	pods := memstate.PodMemoryAssignments{"pod-a": {MemoryBlocks: []memstate.Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: gib}}}, "pod-c": {}}
	for _, tc := range []struct {
		name   string
		cp     checkpointmanager.Checkpoint
		format string
	}{
		{"v1", &memstate.MemoryManagerCheckpointV1{PolicyName: "Static", MachineState: ms, Entries: entries}, checkpoint.MemoryManagerV1},
		{"v1-empty", &memstate.MemoryManagerCheckpointV1{PolicyName: "None", MachineState: memstate.NUMANodeMap{}, Entries: memstate.ContainerMemoryAssignments{}}, checkpoint.MemoryManagerV1},
		{"v2", &memstate.MemoryManagerCheckpointV2{PolicyName: "Static", MachineState: ms, Entries: entries, PodEntries: pods}, checkpoint.MemoryManagerV2},
		{"v3", &memstate.MemoryManagerCheckpointV3{CheckpointData: memstate.MemoryManagerCheckpointData{PolicyName: "Static", MachineState: ms, Entries: entries, PodEntries: pods}}, checkpoint.MemoryManagerV3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cm, err := checkpointmanager.NewCheckpointManager(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := cm.CreateCheckpoint(memCheckpoint, tc.cp); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, memCheckpoint)
			st, err := checkpoint.ReadMemoryManager(path)
			if err != nil || st.Format != tc.format {
				t.Fatalf("read: %+v, %v; want format %s", st, err, tc.format)
			}
			// The kubelet's loader agrees, and refuses the file once a byte
			// of its content changes; so does ours.
			if _, err := memstate.NewCheckpointState(logr.Discard(), dir, memCheckpoint, st.PolicyName); err != nil {
				t.Fatalf("the kubelet refuses it: %v", err)
			}
			b, _ := os.ReadFile(path)
			// Inside the v3 data too, where quotes are escaped.
			bad := []byte(strings.NewReplacer(`numberOfAssignments":1`, `numberOfAssignments":2`,
				`numberOfAssignments\":1`, `numberOfAssignments\":2`,
				`"policyName":"None"`, `"policyName":"none"`).Replace(string(b)))
			if string(bad) == string(b) {
				t.Fatal("nothing to alter")
			}
			os.WriteFile(path, bad, 0o644)
			_, kerr := memstate.NewCheckpointState(logr.Discard(), dir, memCheckpoint, st.PolicyName)
			_, err = checkpoint.ReadMemoryManager(path)
			if (kerr == nil) != (err == nil) || (err != nil && !errors.Is(err, checkpoint.ErrCorrupt)) {
				t.Errorf("altered: kubelet %v, ours %v", kerr, err)
			}
		})
	}
}
