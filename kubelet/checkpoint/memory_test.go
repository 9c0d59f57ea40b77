package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

// The files in testdata/memory_manager_state were written by the kubelet's
// own code (k8s.io/kubernetes v1.37.2, pkg/kubelet/cm/memorymanager/state:
// the checkpoint manager's CreateCheckpoint of each layout), the -badsum
// ones then altered in one number, which makes the kubelet's
// NewCheckpointState refuse them; it loads the others.
func TestReadMemoryManager(t *testing.T) {
	gi := uint64(1 << 30)
	machine := map[int]*NUMANodeState{
		0: {NumberOfAssignments: 1, Cells: []int{0}, MemoryMap: map[string]*MemoryTable{
			"memory":        {TotalMemSize: 4 * gi, SystemReserved: gi, Allocatable: 3 * gi, Reserved: gi, Free: 2 * gi},
			"hugepages-2Mi": {}}},
		1: {Cells: []int{1}, MemoryMap: map[string]*MemoryTable{"memory": {TotalMemSize: gi, Allocatable: gi, Free: gi}}},
	}
	blocks := []MemoryBlock{{NUMAAffinity: []int{0}, Type: "memory", Size: gi}}
	containers := map[string]map[string][]MemoryBlock{"pod-a": {"app": blocks}, "pod-b": {}}
	pods := map[string][]MemoryBlock{"pod-a": blocks, "pod-c": nil}
	for _, tc := range []struct {
		file    string
		corrupt bool // the kubelet refuses it
		want    MemoryManagerState
	}{
		{file: "v1", want: MemoryManagerState{Format: MemoryManagerV1, PolicyName: "Static", MachineState: machine, Containers: containers}},
		{file: "v1-none", want: MemoryManagerState{Format: MemoryManagerV1, PolicyName: "None",
			MachineState: map[int]*NUMANodeState{}, Containers: map[string]map[string][]MemoryBlock{}}},
		{file: "v2", want: MemoryManagerState{Format: MemoryManagerV2, PolicyName: "Static", MachineState: machine, Containers: containers, Pods: pods}},
		{file: "v3", want: MemoryManagerState{Format: MemoryManagerV3, PolicyName: "Static", MachineState: machine, Containers: containers, Pods: pods}},
		{file: "v1-badsum", corrupt: true},
		{file: "v2-badsum", corrupt: true},
		{file: "v3-badsum", corrupt: true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			st, err := ReadMemoryManager(filepath.Join("testdata", "memory_manager_state", tc.file))
			if tc.corrupt != errors.Is(err, ErrCorrupt) || (!tc.corrupt && err != nil) {
				t.Fatalf("err %v, corrupt %v", err, tc.corrupt)
			}
			if !reflect.DeepEqual(st, tc.want) {
				t.Errorf("state\n got %+v\nwant %+v", st, tc.want)
			}
		})
	}
}

// writeMemoryState writes st as v3 into a temporary directory.
func writeMemoryState(t *testing.T, st MemoryManagerState) string {
	t.Helper()
	b, err := marshalMemoryV3(st)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "memory_manager_state")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Two NUMA nodes of 4 GiB, 1 GiB reserved on node 0; pod A has 1 GiB on
// node 0, pod B 2 GiB on node 1. (test/kubeletparity holds the same
// arithmetic against the kubelet's own.)
func memoryFixture() (MemoryManagerState, []topology.Node) {
	gi := uint64(1 << 30)
	st := MemoryManagerState{PolicyName: "Static",
		MachineState: map[int]*NUMANodeState{
			0: {NumberOfAssignments: 1, Cells: []int{0}, MemoryMap: map[string]*MemoryTable{
				"memory": {TotalMemSize: 4 * gi, SystemReserved: gi, Allocatable: 3 * gi, Reserved: gi, Free: 2 * gi}}},
			1: {NumberOfAssignments: 1, Cells: []int{1}, MemoryMap: map[string]*MemoryTable{
				"memory": {TotalMemSize: 4 * gi, Allocatable: 4 * gi, Reserved: 2 * gi, Free: 2 * gi}}},
		},
		Containers: map[string]map[string][]MemoryBlock{
			podA: {"app": {{NUMAAffinity: []int{0}, Type: "memory", Size: gi}}},
			podB: {"db": {{NUMAAffinity: []int{1}, Type: "memory", Size: 2 * gi}}},
		}}
	return st, []topology.Node{{ID: 0, MemTotal: 4 * gi}, {ID: 1, MemTotal: 4 * gi}}
}

func TestPlanMemoryManager(t *testing.T) {
	gi := uint64(1 << 30)
	st, nodes := memoryFixture()
	path := writeMemoryState(t, st)
	got, err := ReadMemoryManager(path)
	if err != nil || got.Format != MemoryManagerV3 || !reflect.DeepEqual(got.MachineState, st.MachineState) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	p, err := PlanMemoryManager(path, nodes, nil)
	if err != nil || p.Changed {
		t.Fatalf("same machine: changed %v, %v", p.Changed, err)
	}

	nodes[1].MemTotal = 3 * gi // still holds pod B
	p, err = PlanMemoryManager(path, nodes, nil)
	if err != nil || !p.Changed {
		t.Fatalf("node 1 shrunk: changed %v, %v", p != nil && p.Changed, err)
	}
	if n1 := p.New.MachineState[1].MemoryMap["memory"]; n1.TotalMemSize != 3*gi || n1.Free != gi || n1.Reserved != 2*gi {
		t.Errorf("node 1 after the shrink: %+v", *n1)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMemoryManager(path); err != nil {
		t.Fatalf("our own reader refuses the result: %v", err)
	}

	nodes[1].MemTotal = gi // pod B's 2 GiB no longer fit
	if _, err := PlanMemoryManager(path, nodes, nil); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("node 1 below pod B: %v", err)
	}
	// Node 1 gone with pod B evicted: its entry is dropped.
	p, err = PlanMemoryManager(path, nodes[:1], nil)
	if err != nil || len(p.Dropped) != 1 || p.Dropped[0] != podB || len(p.New.MachineState) != 1 {
		t.Fatalf("node 1 removed: %+v, %v", p, err)
	}
}

func TestReadMemoryManagerCorrupt(t *testing.T) {
	st, _ := memoryFixture()
	path := writeMemoryState(t, st)
	b, _ := os.ReadFile(path)
	b[len(b)-3]++ // the dataChecksum
	os.WriteFile(path, b, 0o644)
	if _, err := ReadMemoryManager(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("altered dataChecksum: %v", err)
	}
	if _, err := PlanMemoryManager(path, nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("plan on a corrupt checkpoint: %v", err)
	}
}

func FuzzParseMemoryManager(f *testing.F) {
	fuzzParse(f, "memory_manager_state", func(b []byte) (string, error) {
		st, err := ParseMemoryManager(b)
		return st.Format, err
	})
}
