package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// legacyOf returns a checkpoint's legacy fields: the file without data and
// dataChecksum, what kubelets before v1.37 read of it.
func legacyOf(t *testing.T, b []byte) (map[string]json.RawMessage, []byte) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	delete(top, "data")
	delete(top, "dataChecksum")
	legacy, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return top, legacy
}

func checksumOf(t *testing.T, b []byte) uint64 {
	t.Helper()
	var f struct {
		Checksum uint64 `json:"checksum"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Checksum
}

// A rewrite writes the newest layout with legacy fields in the layout that
// holds its state: v2 (CPU) and v1 (memory), which every kubelet before
// v1.37 reads, unless a pod holds pod-level CPUs or memory; those only the
// CPU manager's v3 and the memory manager's v2 hold, and kubelet v1.36 with
// PodLevelResourceManagers reads them and ignores data, so the legacy
// fields are then v3 and v2. Written from the kubelet's own files, the
// legacy fields are those the kubelet wrote in that layout, checksum
// included; from v1.37's files, which carry pod-level assignments in data
// only, they are v3 and v2.
func TestLegacyFieldsCPU(t *testing.T) {
	for _, tc := range []struct {
		file, legacy string
		// sameAs is the kubelet's own file whose checksum the legacy
		// fields must have.
		sameAs string
	}{
		{file: "v2", legacy: CPUManagerV2, sameAs: "v2"},
		{file: "v3", legacy: CPUManagerV3, sameAs: "v3"},
		{file: "v4", legacy: CPUManagerV3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "cpu_manager_state", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			st, err := ParseCPUManager(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := marshalCPUV4(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			top, legacy := legacyOf(t, out)
			got, err := ParseCPUManager(legacy)
			if err != nil || got.Format != tc.legacy {
				t.Fatalf("legacy fields in layout %q (%v), want %s:\n%s", got.Format, err, tc.legacy, legacy)
			}
			if !slices.Equal(got.DefaultCPUSet, st.DefaultCPUSet) || !reflect.DeepEqual(got.Containers, st.Containers) ||
				!reflect.DeepEqual(got.Pods, st.Pods) {
				t.Errorf("legacy fields hold %+v, want %+v", got, st)
			}
			if _, ok := top["podEntries"]; ok != (tc.legacy == CPUManagerV3) {
				t.Errorf("podEntries in the legacy fields: %v", ok)
			}
			if tc.sameAs != "" {
				kb, err := os.ReadFile(filepath.Join("testdata", "cpu_manager_state", tc.sameAs))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := checksumOf(t, out), checksumOf(t, kb); got != want {
					t.Errorf("legacy checksum %d, the kubelet's %d", got, want)
				}
			}
			if back, err := ParseCPUManager(out); err != nil || back.Format != CPUManagerV4 {
				t.Errorf("the rewrite reads back as %q: %v", back.Format, err)
			}
		})
	}
}

func TestLegacyFieldsMemory(t *testing.T) {
	for _, tc := range []struct {
		file, legacy, sameAs string
	}{
		{file: "v1", legacy: MemoryManagerV1, sameAs: "v1"},
		{file: "v2", legacy: MemoryManagerV2, sameAs: "v2"},
		{file: "v3", legacy: MemoryManagerV2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "memory_manager_state", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			st, err := ParseMemoryManager(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := marshalMemoryV3(st)
			if err != nil {
				t.Fatal(err)
			}
			top, legacy := legacyOf(t, out)
			got, err := ParseMemoryManager(legacy)
			if err != nil || got.Format != tc.legacy {
				t.Fatalf("legacy fields in layout %q (%v), want %s:\n%s", got.Format, err, tc.legacy, legacy)
			}
			if !reflect.DeepEqual(got.MachineState, st.MachineState) || !reflect.DeepEqual(got.Containers, st.Containers) ||
				!reflect.DeepEqual(got.Pods, st.Pods) {
				t.Errorf("legacy fields hold %+v, want %+v", got, st)
			}
			if _, ok := top["podEntries"]; ok != (tc.legacy == MemoryManagerV2) {
				t.Errorf("podEntries in the legacy fields: %v", ok)
			}
			if tc.sameAs != "" {
				kb, err := os.ReadFile(filepath.Join("testdata", "memory_manager_state", tc.sameAs))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := checksumOf(t, out), checksumOf(t, kb); got != want {
					t.Errorf("legacy checksum %d, the kubelet's %d", got, want)
				}
			}
			if back, err := ParseMemoryManager(out); err != nil || back.Format != MemoryManagerV3 {
				t.Errorf("the rewrite reads back as %q: %v", back.Format, err)
			}
		})
	}
}
