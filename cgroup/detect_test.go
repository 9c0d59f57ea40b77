package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetectLayout(t *testing.T) {
	mk := func(t *testing.T, files ...string) string {
		root := t.TempDir()
		for _, f := range files {
			p := filepath.Join(root, f)
			if strings.HasSuffix(f, "/") {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(v2Controllers+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, tc := range []struct {
		name        string
		files       []string
		mode        Mode
		unsupported bool
		fail        bool
	}{
		{"unified", []string{"cgroup.controllers", "kubepods/"}, ModeUnified, false, false},
		{"hybrid", []string{"unified/cgroup.controllers", "memory/", "cpu,cpuacct/"}, ModeHybrid, true, false},
		{"legacy", []string{"memory/", "cpuset/", "pids/"}, ModeLegacy, true, false},
		{"legacy systemd only", []string{"systemd/"}, ModeLegacy, true, false},
		{"empty", nil, "", false, true},
		{"unrelated", []string{"etc/passwd"}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := mk(t, tc.files...)
			mode, err := Detect(root, SkipMagicCheck())
			if mode != tc.mode {
				t.Errorf("mode %q, want %q", mode, tc.mode)
			}
			switch {
			case tc.fail:
				if err == nil || errors.Is(err, ErrUnsupported) {
					t.Errorf("err %v, want a hard error", err)
				}
			case tc.unsupported:
				if !errors.Is(err, ErrUnsupported) {
					t.Fatalf("err %v, want ErrUnsupported", err)
				}
				for _, want := range []string{root, "cgroup v1 (or hybrid): enforcement is not supported; detection and reporting go on"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("err %q does not say %q", err, want)
					}
				}
			case err != nil:
				t.Errorf("err %v", err)
			}
		})
	}
}

func TestDetectMissingRoot(t *testing.T) {
	if _, err := Detect(filepath.Join(t.TempDir(), "nope"), SkipMagicCheck()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err %v, want ErrNotExist", err)
	}
	if _, err := Detect(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("statfs of a missing root: no error")
	}
}

// TestDetectMagicRejectsPlainDirectory: without SkipMagicCheck a synthetic
// tree is not a cgroup filesystem, whatever it holds.
func TestDetectMagicRejectsPlainDirectory(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	mode, err := Detect(tr.root)
	if err == nil || errors.Is(err, ErrUnsupported) || mode != "" {
		t.Errorf("Detect(%s) = %q, %v; want a hard error", tr.root, mode, err)
	}
}
