package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWorkingSetArithmetic(t *testing.T) {
	for _, tc := range []struct {
		usage, inactive uint64
		want            int64
	}{
		{100, 30, 70},
		{100, 100, 0},
		{100, 150, 0}, // cAdvisor floors at 0
		{0, 0, 0},
		{1 << 63, 0, 1<<63 - 1},
	} {
		if got := workingSet(tc.usage, tc.inactive); got != tc.want {
			t.Errorf("workingSet(%d, %d) = %d, want %d", tc.usage, tc.inactive, got, tc.want)
		}
	}
}

func TestPodWorkingSet(t *testing.T) {
	const (
		uidG = "aaaaaaaa-0000-0000-0000-000000000001"
		uidB = "aaaaaaaa-0000-0000-0000-000000000002"
		uidE = "aaaaaaaa-0000-0000-0000-000000000003"
	)
	for _, driver := range []string{DriverCgroupfs, DriverSystemd} {
		t.Run(driver, func(t *testing.T) {
			tr := newTree(t, driver, "/")
			tr.addPod(t, uidG, QOSGuaranteed, 3<<30, 1<<30)
			tr.addPod(t, uidB, QOSBurstable, 500<<20, 100<<20)
			tr.addPod(t, uidE, QOSBestEffort, 10<<20, 20<<20)
			e, err := New(Options{Root: tr.root, Driver: driver, SkipMagicCheck: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				uid, qos string
				want     int64
			}{
				{uidG, "Guaranteed", 2 << 30},
				{uidB, "Burstable", 400 << 20},
				{uidE, "BestEffort", 0},
			} {
				got, err := e.PodWorkingSet(tc.uid, tc.qos)
				if err != nil || got != tc.want {
					t.Errorf("PodWorkingSet(%s, %s) = %d, %v; want %d", tc.uid, tc.qos, got, err, tc.want)
				}
			}
			// Guaranteed pods sit directly under kubepods: asking with the
			// wrong class finds nothing.
			if _, err := e.PodWorkingSet(uidG, QOSBurstable); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("wrong QoS: %v, want ErrNotExist", err)
			}
			if _, err := e.PodWorkingSet("gone", QOSBurstable); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("missing pod: %v, want ErrNotExist", err)
			}
			if _, err := e.PodWorkingSet(uidB, "gold"); err == nil {
				t.Error("unknown QoS accepted")
			}
		})
	}
}

func TestPodWorkingSetCorrupt(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	dir := tr.addPod(t, "u1", QOSBurstable, 1, 0)
	tr.set(t, dir, "memory.current", "lots")
	e, err := New(Options{Root: tr.root, SkipMagicCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.PodWorkingSet("u1", QOSBurstable); err == nil {
		t.Error("unparsable memory.current accepted")
	}
	tr.set(t, dir, "memory.current", "100")
	tr.set(t, dir, "memory.stat", "inactive_file x")
	if _, err := e.PodWorkingSet("u1", QOSBurstable); err == nil {
		t.Error("unparsable memory.stat accepted")
	}
	// A memory.stat without inactive_file: the whole usage is working set.
	tr.set(t, dir, "memory.stat", "anon 100")
	if ws, err := e.PodWorkingSet("u1", QOSBurstable); err != nil || ws != 100 {
		t.Errorf("got %d, %v", ws, err)
	}
}

// TestPodWorkingSetV1: on a cgroup v1 host nothing is enforced, but the
// evictor still gets working sets, from the memory controller.
func TestPodWorkingSetV1(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "memory/kubepods/burstable/podu1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{
		"memory.usage_in_bytes": "1048576000\n",
		"memory.stat":           "cache 1\ninactive_file 999\ntotal_inactive_file 48576000\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(Options{Root: root, SkipMagicCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := e.PodWorkingSet("u1", "Burstable"); err != nil || ws != 1000000000 {
		t.Errorf("v1 working set %d, %v", ws, err)
	}
}
