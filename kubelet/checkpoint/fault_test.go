package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/node-resized/node-resized/internal/fault"
)

// The checkpoint-corrupt fault writes a file the kubelet refuses: every
// layout's checksum is off.
func TestCorruptChecksumsIsRefused(t *testing.T) {
	for _, name := range []string{"v1", "v1-none", "v2", "v3"} {
		b, err := os.ReadFile(filepath.Join("testdata", "memory_manager_state", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseMemoryManager(b); err != nil {
			t.Fatalf("%s as it is: %v", name, err)
		}
		bad := corruptChecksums(b)
		if bytes.Equal(bad, b) {
			t.Fatalf("%s: no checksum changed", name)
		}
		if _, err := ParseMemoryManager(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s with its checksums off: %v, want ErrCorrupt", name, err)
		}
	}
}

// With checkpoint-corrupt set, a test build writes the memory manager's
// checkpoint corrupt once, even unchanged, and leaves the CPU manager's
// alone; any other build writes neither.
func TestFaultCorruptsTheMemoryCheckpointOnce(t *testing.T) {
	t.Setenv("NODE_RESIZED_FAULT", "checkpoint-corrupt=on")
	t.Setenv("NODE_RESIZED_FAULT_DIR", t.TempDir())
	dir := t.TempDir()
	mem, cpu := filepath.Join(dir, "memory_manager_state"), filepath.Join(dir, "cpu_manager_state")
	for src, dst := range map[string]string{"memory_manager_state/v1-none": mem, "cpu_manager_state/v4": cpu} {
		b, err := os.ReadFile(filepath.Join("testdata", src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := PlanCPUManager(cpu, CPUTarget{})
	if err != nil {
		t.Fatal(err)
	}
	cp.Changed = false
	if err := cp.Apply(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		mp, err := PlanMemoryManager(mem, nil, nil)
		if err != nil {
			if i == 1 && errors.Is(err, ErrCorrupt) {
				break // the fault acted the first time
			}
			t.Fatal(err)
		}
		if mp.Changed {
			t.Fatal("the None policy's checkpoint planned changed")
		}
		if err := mp.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = ReadMemoryManager(mem)
	if got := errors.Is(err, ErrCorrupt); got != fault.Enabled {
		t.Errorf("memory manager checkpoint corrupt %v (%v), want %v in this build", got, err, fault.Enabled)
	}
	if _, err := os.Stat(mem + BackupSuffix); (err == nil) != fault.Enabled {
		t.Errorf("backup of the memory checkpoint: %v", err)
	}
	if _, err := os.Stat(cpu + BackupSuffix); err == nil {
		t.Errorf("the CPU checkpoint, unchanged, was rewritten")
	}
}
