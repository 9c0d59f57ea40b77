package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

// The files in testdata/cpu_manager_state were written by the kubelet's own
// code (k8s.io/kubernetes v1.37.2, pkg/kubelet/cm/cpumanager/state:
// MarshalCheckpoint for each layout, checksum.New for the type-named
// variants), some then altered by hand; each was loaded with the kubelet's
// NewCheckpointState to learn whether the kubelet accepts it. The table
// holds that verdict.

const (
	podA = "0b1e6f7a-1111-4c3d-9e8f-000000000001"
	podB = "0b1e6f7a-1111-4c3d-9e8f-000000000002"
	podC = "0b1e6f7a-1111-4c3d-9e8f-000000000003"
)

func TestReadCPUManager(t *testing.T) {
	static := map[string]map[string]topology.CPUSet{
		podA: {"app": {1, 2}},
		podB: {"db": {8, 9}, "sidecar": {10}},
	}
	for _, tc := range []struct {
		file       string
		corrupt    bool // the kubelet refuses it
		format     string
		policy     string
		def        topology.CPUSet
		containers map[string]map[string]topology.CPUSet
		pods       map[string]topology.CPUSet
		exclusive  map[string]topology.CPUSet
	}{
		{file: "v4", format: CPUManagerV4, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			pods:      map[string]topology.CPUSet{podC: {11, 12}},
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}, podC: {11, 12}}},
		{file: "none", format: CPUManagerV4, policy: "none"},
		{file: "v3", format: CPUManagerV3, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			pods:      map[string]topology.CPUSet{podC: {11, 12}},
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}, podC: {11, 12}}},
		{file: "v3-empty", format: CPUManagerV3, policy: "static", def: topology.CPUSet{0, 1, 2, 3}},
		{file: "v3-typename", format: CPUManagerV3, policy: "static", def: topology.CPUSet{0, 1},
			containers: map[string]map[string]topology.CPUSet{"u1": {"c": {2, 3}}},
			pods:       map[string]topology.CPUSet{"u2": {4, 5, 6}, "u3": nil},
			exclusive:  map[string]topology.CPUSet{"u1": {2, 3}, "u2": {4, 5, 6}, "u3": nil}},
		{file: "v2", format: CPUManagerV2, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}}},
		{file: "v2-none", format: CPUManagerV2, policy: "none"},
		{file: "v2-typename", format: CPUManagerV2, policy: "static", def: topology.CPUSet{0, 1},
			containers: map[string]map[string]topology.CPUSet{"u1": {"c": {2, 3}}},
			exclusive:  map[string]topology.CPUSet{"u1": {2, 3}}},
		{file: "v2-zero", format: CPUManagerV2, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}}},
		// podEntries a v2 checksum does not cover: the kubelet falls back to
		// v2 and ignores them.
		{file: "v2-extra", format: CPUManagerV2, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}}},
		{file: "v2-badsum", corrupt: true, format: CPUManagerV2, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6}, containers: static,
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}}},
		{file: "v4-badsum", corrupt: true, format: CPUManagerV4, policy: "static", def: topology.CPUSet{0, 3, 4, 5, 6, 7}, containers: static,
			pods:      map[string]topology.CPUSet{podC: {11, 12}},
			exclusive: map[string]topology.CPUSet{podA: {1, 2}, podB: {8, 9, 10}, podC: {11, 12}}},
		{file: "v2-badcpuset", corrupt: true},
		{file: "garbage", corrupt: true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "cpu_manager_state", tc.file)
			st, err := ReadCPUManager(path)
			if tc.corrupt != errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, corrupt %v", err, tc.corrupt)
			}
			if !tc.corrupt && err != nil {
				t.Fatal(err)
			}
			want := CPUManagerState{Format: tc.format, PolicyName: tc.policy, DefaultCPUSet: tc.def,
				Containers: tc.containers, Pods: tc.pods, Exclusive: tc.exclusive}
			if !reflect.DeepEqual(st, want) {
				t.Errorf("state\n got %+v\nwant %+v", st, want)
			}
		})
	}
}

func TestReadCPUManagerMissing(t *testing.T) {
	_, err := ReadCPUManager(filepath.Join(t.TempDir(), "cpu_manager_state"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt) {
		t.Errorf("err %v, want ErrNotExist", err)
	}
	ex, err := ExclusiveCPUsFunc(filepath.Join(t.TempDir(), "cpu_manager_state"))()
	if err != nil || ex == nil || len(ex) != 0 {
		t.Errorf("exclusive CPUs without a checkpoint: %v, %v", ex, err)
	}
}

func TestReadCPUManagerTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err := os.WriteFile(path, make([]byte, maxSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCPUManager(path); !errors.Is(err, ErrCorrupt) {
		t.Errorf("err %v", err)
	}
}

func TestCPUManagerStateAllCPUs(t *testing.T) {
	st, err := ReadCPUManager(filepath.Join("testdata", "cpu_manager_state", "v4"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.AllCPUs(), (topology.CPUSet{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}); !reflect.DeepEqual(got, want) {
		t.Errorf("AllCPUs %v, want %v", got, want)
	}
}

func TestExclusiveCPUsFunc(t *testing.T) {
	for file, want := range map[string]map[string][]int{
		"v4":        {podA: {1, 2}, podB: {8, 9, 10}, podC: {11, 12}},
		"v2-badsum": {podA: {1, 2}, podB: {8, 9, 10}}, // the CPUs are still what the containers run on
		"none":      {},
	} {
		got, err := ExclusiveCPUsFunc(filepath.Join("testdata", "cpu_manager_state", file))()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, %v; want %v", file, got, err, want)
		}
	}
	if got, err := ExclusiveCPUsFunc(filepath.Join("testdata", "cpu_manager_state", "garbage"))(); err == nil {
		t.Errorf("garbage: %v", got)
	}
}

func FuzzParseCPUManager(f *testing.F) {
	fuzzParse(f, "cpu_manager_state", func(b []byte) (string, error) {
		st, err := ParseCPUManager(b)
		_ = st.AllCPUs()
		return st.Format, err
	})
}
