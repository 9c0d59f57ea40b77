//go:build linux

package kubeletparity

// Every checkpoint node-resized writes for a changed machine is loaded here
// by kubelet v1.37.2's own code and checked the way the kubelet checks it
// when it starts, for the rewrites of the shared cases
// (test/kubeletparity/cases, which the parity modules of v1.34 to v1.36
// run too):
//
//   - CPU manager: state.NewCheckpointState (the v4 loader: its checksum
//     over data), then the static policy built by cpumanager.NewStaticPolicy
//     for the new topology (topology.Discover on the new cAdvisor
//     MachineInfo) whose Start runs the unexported validateState on the
//     loaded state;
//   - memory manager: state.NewCheckpointState (v3, dataChecksum), then
//     memorymanager.NewPolicyStatic for the new MachineInfo whose Start runs
//     its validateState.
//
// The starting checkpoints are written by the kubelet's state packages too,
// and each case first shows that the kubelet accepts the old checkpoint on
// the old machine and refuses it on the new one. The legacy fields older
// kubelets read are held against those kubelets' own code in their
// modules.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/node-resized/node-resized/test/kubeletparity/cases"
)

const (
	gib = uint64(1 << 30)
)

var update = flag.Bool("update", false, "write the starting checkpoints to the cases' testdata")

// kubelet137 is kubelet v1.37.2's CPU and memory managers.
type kubelet137 struct{}

var (
	_ cases.CPUKubelet    = kubelet137{}
	_ cases.MemoryKubelet = kubelet137{}
)

func (kubelet137) WriteCPU(dir string, st cases.CPUState) error {
	s, err := cpustate.NewCheckpointState(logr.Discard(), dir, cases.CPUFile, "static", nil)
	if err != nil {
		return err
	}
	s.SetDefaultCPUSet(cpuset.New(st.Default...))
	for uid, containers := range st.Containers {
		for name, cpus := range containers {
			s.SetCPUSet(uid, name, cpuset.New(cpus...))
		}
	}
	for uid, cpus := range st.Pods {
		s.SetPodCPUSet(uid, cpuset.New(cpus...))
	}
	if st.Baselines != nil {
		b := s.GetCPUBaselines()
		for uid, containers := range st.Baselines {
			b[uid] = map[string]cpustate.ContainerCPUBaseline{}
			for name, cpus := range containers {
				b[uid][name] = cpustate.ContainerCPUBaseline{Baseline: cpuset.New(cpus...)}
			}
		}
		s.SetCPUBaselines(b)
	}
	return nil
}

func (kubelet137) StartCPU(dir string, m cases.Machine, p cases.CPUPolicy) (cases.CPUState, error) {
	s, err := cpustate.NewCheckpointState(logr.Discard(), dir, cases.CPUFile, "static", nil)
	if err != nil {
		return cases.CPUState{}, err
	}
	mi, err := machineInfo(m)
	if err != nil {
		return cases.CPUState{}, err
	}
	topo, err := cputopology.Discover(logr.Discard(), mi)
	if err != nil {
		return cases.CPUState{}, err
	}
	opts := map[string]string{}
	if p.Strict {
		opts[cpumanager.StrictCPUReservationOption] = "true"
	}
	policy, err := cpumanager.NewStaticPolicy(logr.Discard(), topo, len(p.Reserved), cpuset.New(p.Reserved...),
		topologymanager.NewFakeManager(logr.Discard()), opts)
	if err != nil {
		return cases.CPUState{}, fmt.Errorf("NewStaticPolicy: %w", err)
	}
	err = policy.Start(logr.Discard(), s)
	st := cases.CPUState{Default: s.GetDefaultCPUSet().List(), Containers: map[string]map[string][]int{},
		Pods: map[string][]int{}, Baselines: map[string]map[string][]int{}}
	for uid, containers := range s.GetCPUAssignments() {
		st.Containers[uid] = map[string][]int{}
		for name, set := range containers {
			st.Containers[uid][name] = set.List()
		}
	}
	for uid, e := range s.GetPodCPUAssignments() {
		st.Pods[uid] = e.CPUSet.List()
	}
	for uid, containers := range s.GetCPUBaselines() {
		st.Baselines[uid] = map[string][]int{}
		for name, b := range containers {
			st.Baselines[uid][name] = b.Baseline.List()
		}
	}
	return st, err
}

func (kubelet137) WriteMemory(dir string, st cases.MemoryState) error {
	s, err := memstate.NewCheckpointState(logr.Discard(), dir, cases.MemoryFile, "Static")
	if err != nil {
		return err
	}
	var ms memstate.NUMANodeMap
	if err := convert(st.Machine, &ms); err != nil {
		return err
	}
	for uid, containers := range st.Containers {
		for name, blocks := range containers {
			var b []memstate.Block
			if err := convert(blocks, &b); err != nil {
				return err
			}
			s.SetMemoryBlocks(uid, name, b)
		}
	}
	for uid, blocks := range st.Pods {
		var b []memstate.Block
		if err := convert(blocks, &b); err != nil {
			return err
		}
		s.SetPodMemoryBlocks(uid, b)
	}
	s.SetMachineState(ms)
	return nil
}

func (kubelet137) StartMemory(dir string, m cases.Machine, reserved map[int]map[string]uint64) (cases.MemoryState, error) {
	s, err := memstate.NewCheckpointState(logr.Discard(), dir, cases.MemoryFile, "Static")
	if err != nil {
		return cases.MemoryState{}, err
	}
	mi, err := machineInfo(m)
	if err != nil {
		return cases.MemoryState{}, err
	}
	r := map[int]map[v1.ResourceName]uint64{}
	for id, res := range reserved {
		r[id] = map[v1.ResourceName]uint64{}
		for name, v := range res {
			r[id][v1.ResourceName(name)] = v
		}
	}
	policy, err := memorymanager.NewPolicyStatic(logr.Discard(), mi, r, topologymanager.NewFakeManager(logr.Discard()))
	if err != nil {
		return cases.MemoryState{}, fmt.Errorf("NewPolicyStatic: %w", err)
	}
	err = policy.Start(logr.Discard(), s)
	var st cases.MemoryState
	pods := map[string][]memstate.Block{}
	for uid, e := range s.GetPodMemoryAssignments() {
		pods[uid] = e.MemoryBlocks
	}
	for _, c := range []struct{ from, to any }{
		{s.GetMachineState(), &st.Machine},
		{s.GetMemoryAssignments(), &st.Containers},
		{pods, &st.Pods},
	} {
		if cerr := convert(c.from, c.to); cerr != nil {
			return st, cerr
		}
	}
	return st, err
}

// machineInfo is cAdvisor's MachineInfo for m.
func machineInfo(m cases.Machine) (*cadvisorapi.MachineInfo, error) {
	var mi cadvisorapi.MachineInfo
	if err := json.Unmarshal(m.MachineInfo(), &mi); err != nil {
		return nil, fmt.Errorf("machine info: %w", err)
	}
	return &mi, nil
}

// convert copies from into to through their JSON, which the kubelet's
// state types and the cases' share.
func convert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

// each137 runs f for each build of v1.37.2, with its feature gates set.
func each137(t *testing.T, f func(t *testing.T, k cases.Kubelet)) {
	for _, k := range cases.Of("v1.37.2") {
		t.Run(k.String(), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResourceManagers, k.PodLevel)
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.InPlacePodVerticalScalingExclusiveCPUs, k.Baselines)
			f(t, k)
		})
	}
}

func TestCheckpointRewrite(t *testing.T) {
	each137(t, func(t *testing.T, k cases.Kubelet) {
		t.Run("cpu", func(t *testing.T) { cases.RunCPU(t, k, kubelet137{}) })
		t.Run("memory", func(t *testing.T) { cases.RunMemory(t, k, kubelet137{}) })
	})
}

// The starting checkpoints v1.37.2 writes, which v1.36's downgrade test
// rewrites, are those committed in the cases' testdata.
func TestStartingCheckpoints(t *testing.T) {
	each137(t, func(t *testing.T, k cases.Kubelet) { cases.CheckStarting(t, k, kubelet137{}, kubelet137{}, *update) })
}

// Our reader takes every layout the kubelet writes, checksum included, and
// refuses what the kubelet refuses.
func TestMemoryManagerCheckpointLayouts(t *testing.T) {
	const memCheckpoint = cases.MemoryFile
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
