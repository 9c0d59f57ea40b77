//go:build linux

package cgroup

import (
	"errors"
	"testing"
)

// TestDetectHost runs the real statfs check on this machine's cgroup mount
// (read-only). The answer depends on the host; it must be one of the three
// modes, with ErrUnsupported exactly when the host is not unified.
func TestDetectHost(t *testing.T) {
	mode, err := Detect("")
	if mode == "" {
		t.Skipf("no cgroup hierarchy at %s: %v", DefaultRoot, err)
	}
	t.Logf("%s: %s (%v)", DefaultRoot, mode, err)
	if (mode == ModeUnified) == errors.Is(err, ErrUnsupported) {
		t.Errorf("mode %q with err %v", mode, err)
	}
}
