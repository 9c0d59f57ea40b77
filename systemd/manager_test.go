package systemd

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestStartWithoutReplacing: a recovery's start is StartUnit with job
// mode "fail", so that systemd refuses it rather than replace a pending
// stop or a shutdown; the system state is the manager's SystemState.
func TestStartWithoutReplacing(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	f := exportSystemd(t, b.addr, testUnit, "inactive", "done")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := s.SystemState(ctx); err != nil || st != "running" {
		t.Fatalf("SystemState = %q, %v; want running", st, err)
	}
	if res, err := s.StartWithoutReplacing(ctx, testUnit); err != nil || res != JobDone {
		t.Fatalf("StartWithoutReplacing = %q, %v; want done", res, err)
	}
	if res, err := s.Start(ctx, testUnit); err != nil || res != JobDone {
		t.Fatalf("Start = %q, %v; want done", res, err)
	}
	f.mu.Lock()
	modes := slices.Clone(f.starts)
	f.mu.Unlock()
	if !slices.Equal(modes, []string{"fail", "replace"}) {
		t.Errorf("StartUnit modes %q, want fail then replace", modes)
	}
}
