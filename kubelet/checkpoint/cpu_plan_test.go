package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

// copyCheckpoint copies a testdata checkpoint into a temporary directory.
func copyCheckpoint(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cpu_manager_state", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func cpuRange(from, to int) topology.CPUSet {
	var s topology.CPUSet
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// The v4 testdata file (written by the kubelet) holds CPUs 0-12: pod A 1-2,
// pod B 8-10, pod C 11-12 (pod level), shared 0,3-7.
func TestPlanCPUManager(t *testing.T) {
	for _, tc := range []struct {
		name    string
		online  topology.CPUSet
		changed bool
		def     topology.CPUSet
		dropped []string
	}{
		{name: "same", online: cpuRange(0, 12), def: topology.CPUSet{0, 3, 4, 5, 6, 7}},
		{name: "added", online: cpuRange(0, 15), changed: true, def: append(topology.CPUSet{0, 3, 4, 5, 6, 7}, cpuRange(13, 15)...)},
		{name: "removed-shared", online: append(topology.CPUSet{0, 1, 2}, cpuRange(8, 12)...), changed: true, def: topology.CPUSet{0}},
		{name: "removed-exclusive", online: cpuRange(0, 9), changed: true, def: topology.CPUSet{0, 3, 4, 5, 6, 7, 8, 9},
			dropped: []string{podB, podC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := copyCheckpoint(t, "v4")
			before, _ := os.ReadFile(path)
			p, err := PlanCPUManager(path, CPUTarget{Online: tc.online, Reserved: topology.CPUSet{0}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Changed != tc.changed || !slices.Equal(p.New.DefaultCPUSet, tc.def) || !slices.Equal(p.Dropped, tc.dropped) {
				t.Fatalf("changed %v default %v dropped %v; want %v %v %v", p.Changed, p.New.DefaultCPUSet, p.Dropped, tc.changed, tc.def, tc.dropped)
			}
			if err := p.Apply(); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCPUManager(path)
			if err != nil {
				t.Fatalf("our own reader refuses the result: %v", err)
			}
			if !reflect.DeepEqual(got.Exclusive, p.New.Exclusive) || !slices.Equal(got.AllCPUs(), tc.online) {
				t.Errorf("written %+v, want exclusive %v on %v", got, p.New.Exclusive, tc.online)
			}
			bak, err := os.ReadFile(path + BackupSuffix)
			if tc.changed && (err != nil || string(bak) != string(before)) {
				t.Errorf("backup: %v", err)
			}
			if !tc.changed && err == nil {
				t.Error("a backup without a change")
			}
		})
	}
}

func TestPlanCPUManagerRefuses(t *testing.T) {
	path := copyCheckpoint(t, "v4-badsum")
	if _, err := PlanCPUManager(path, CPUTarget{Online: cpuRange(0, 15)}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a corrupt checkpoint: %v", err)
	}
	path = copyCheckpoint(t, "v4")
	// Pod A holds CPU 1, which reservedSystemCPUs now names.
	if _, err := PlanCPUManager(path, CPUTarget{Online: cpuRange(0, 15), Reserved: topology.CPUSet{0, 1}}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("a reserved CPU held by a pod: %v", err)
	}
	// The kubelet writes between the plan and its application.
	p, err := PlanCPUManager(path, CPUTarget{Online: cpuRange(0, 15)})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := os.ReadFile(filepath.Join("testdata", "cpu_manager_state", "v3"))
	os.WriteFile(path, other, 0o644)
	if err := p.Apply(); !errors.Is(err, ErrChanged) {
		t.Errorf("Apply over a changed file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(other) {
		t.Error("Apply replaced a file it did not plan from")
	}
}

func TestPlanCPUManagerNone(t *testing.T) {
	p, err := PlanCPUManager(copyCheckpoint(t, "none"), CPUTarget{Online: cpuRange(0, 3)})
	if err != nil || p.Changed {
		t.Fatalf("none policy: %+v, %v", p, err)
	}
}
