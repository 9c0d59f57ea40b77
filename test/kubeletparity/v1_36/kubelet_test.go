//go:build linux

package parity

// The kubelet v1.36.3 side of the shared cases: its state packages write
// and load the checkpoints, its static policies start on them.

import (
	"encoding/json"
	"fmt"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	cputopology "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/node-resized/node-resized/test/kubeletparity/cases"
)

type kubelet struct{}

var (
	_ cases.CPUKubelet    = kubelet{}
	_ cases.MemoryKubelet = kubelet{}
)

func (kubelet) WriteCPU(dir string, st cases.CPUState) error {
	if len(st.Baselines) > 0 {
		return fmt.Errorf("kubelet v1.36 keeps no CPU baselines")
	}
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
	return nil
}

func (kubelet) StartCPU(dir string, m cases.Machine, p cases.CPUPolicy) (cases.CPUState, error) {
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
		topologymanager.NewFakeManager(), opts)
	if err != nil {
		return cases.CPUState{}, fmt.Errorf("NewStaticPolicy: %w", err)
	}
	err = policy.Start(logr.Discard(), s)
	st := cases.CPUState{Default: s.GetDefaultCPUSet().List(), Containers: map[string]map[string][]int{}, Pods: map[string][]int{}}
	for uid, containers := range s.GetCPUAssignments() {
		st.Containers[uid] = map[string][]int{}
		for name, set := range containers {
			st.Containers[uid][name] = set.List()
		}
	}
	for uid, e := range s.GetPodCPUAssignments() {
		st.Pods[uid] = e.CPUSet.List()
	}
	return st, err
}

func (kubelet) WriteMemory(dir string, st cases.MemoryState) error {
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

func (kubelet) StartMemory(dir string, m cases.Machine, reserved map[int]map[string]uint64) (cases.MemoryState, error) {
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
	policy, err := memorymanager.NewPolicyStatic(logr.Discard(), mi, r, topologymanager.NewFakeManager())
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
