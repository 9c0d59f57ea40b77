// Package cpu1test lets tests take this machine's cpu1 offline and back
// for real, one test at a time across every test binary that runs at
// once: `go test ./...` runs packages in parallel, and two tests that
// flip cpu1 together would see each other's uevents and models.
package cpu1test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Online is the file that takes cpu1 offline and back.
const Online = "/sys/devices/system/cpu/cpu1/online"

// lockPath is the machine-wide lock file.
var lockPath = filepath.Join(os.TempDir(), "node-resized-cpu1.lock")

// Lock holds the machine-wide cpu1 lock until the test ends: exclusive
// for a test that changes cpu1, shared for a test that reads the real
// machine and must not see it change under it. It waits for the holders
// of a conflicting lock.
func Lock(t testing.TB, exclusive bool) {
	t.Helper()
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("open the cpu1 lock %s: %v", lockPath, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", lockPath, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// Set takes cpu1 offline or brings it back through the kernel.
func Set(online bool) error {
	v := "0"
	if online {
		v = "1"
	}
	if err := os.WriteFile(Online, []byte(v), 0o644); err != nil {
		return fmt.Errorf("write %s to %s: %w", v, Online, err)
	}
	return nil
}

// Need skips the test, with the reason, unless it runs as root on a
// machine whose cpu1 can be hot-unplugged; otherwise it takes the
// exclusive lock, makes sure cpu1 is online, and brings it back online
// when the test ends, whatever happens.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("offlining cpu1 needs root")
	}
	f, err := os.OpenFile(Online, os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("cpu1 cannot be hot-unplugged here: %v", err)
	}
	f.Close()
	Lock(t, true)
	if err := Set(true); err != nil {
		t.Fatalf("online cpu1 before the test: %v", err)
	}
	t.Cleanup(func() {
		if err := Set(true); err != nil {
			t.Errorf("bring cpu1 back online: %v", err)
		}
	})
}
