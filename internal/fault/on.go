//go:build faultinject

package fault

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Enabled reports whether this build injects faults.
const Enabled = true

// Point carries out the fault named name when its action is kill (SIGKILL
// of this process) or stop (SIGSTOP), once.
func Point(name string) {
	switch action(name) {
	case "kill":
		if claim(name) {
			slog.Warn("fault injected", "fault", name, "action", "kill")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is delivered before this returns
		}
	case "stop":
		if claim(name) {
			slog.Warn("fault injected", "fault", name, "action", "stop")
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
}

// Active reports whether the fault named name is set (any action) and has
// not acted yet; true claims it.
func Active(name string) bool {
	if action(name) == "" || !claim(name) {
		return false
	}
	slog.Warn("fault injected", "fault", name)
	return true
}

func action(name string) string {
	for _, kv := range strings.Split(os.Getenv("NODE_RESIZED_FAULT"), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == name {
			return v
		}
	}
	return ""
}

// claim creates the fault's marker; false when it exists already (the
// fault acted before).
func claim(name string) bool {
	dir := os.Getenv("NODE_RESIZED_FAULT_DIR")
	if dir == "" {
		dir = "/var/lib/node-resized"
	}
	f, err := os.OpenFile(filepath.Join(dir, "fault-"+name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false
	}
	if err != nil {
		slog.Warn("fault marker", "fault", name, "err", err)
		return false
	}
	_ = f.Sync()
	_ = f.Close()
	return true
}

// Armed reports whether the fault named name is set and has not acted
// yet, without claiming it.
func Armed(name string) bool {
	if action(name) == "" {
		return false
	}
	dir := os.Getenv("NODE_RESIZED_FAULT_DIR")
	if dir == "" {
		dir = "/var/lib/node-resized"
	}
	_, err := os.Stat(filepath.Join(dir, "fault-"+name))
	return errors.Is(err, fs.ErrNotExist)
}
