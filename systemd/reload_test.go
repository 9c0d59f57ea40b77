package systemd

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	godbus "github.com/godbus/dbus/v5"
)

// Reload is the manager's Reload (daemon-reload); the stand-in records it
// as a job.
func (f *fakeSystemd) Reload() *godbus.Error {
	f.mu.Lock()
	f.jobs = append(f.jobs, "reload")
	f.mu.Unlock()
	return nil
}

func TestReload(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	f := exportSystemd(t, b.addr, testUnit, "active", "done")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.jobKinds(); !slices.Equal(got, []string{"reload"}) {
		t.Errorf("calls %v, want one reload", got)
	}
}
