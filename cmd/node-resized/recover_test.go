package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestKubeletRecoverVoidRecord: the ExecStopPost does nothing without a
// record, and removes one from another boot without asking systemd (the
// test has no bus: a call would fail and exit 1).
func TestKubeletRecoverVoidRecord(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(filepath.Join(proc, "sys", "kernel", "random"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys", "kernel", "random", "boot_id"), []byte("this-boot\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "no-bus"))
	args := []string{"--state-file", filepath.Join(dir, "state.json"), "--procfs-root", proc,
		"--kubelet-config", filepath.Join(dir, "absent.yaml"), "--log-format", "text", "--log-level", "error"}
	if code := kubeletRecover(args); code != 0 {
		t.Fatalf("no record: exit %d", code)
	}
	rec := filepath.Join(dir, "kubelet-stopped.json")
	if err := os.WriteFile(rec, []byte(`{"unit":"kubelet.service","at":"2026-01-01T00:00:00Z","bootID":"another-boot","pid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := kubeletRecover(args); code != 0 {
		t.Fatalf("a record of another boot: exit %d", code)
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record of another boot is still there: %v", err)
	}
}
