package vmscenario

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// guest runs commands in the booted VM for a test.
type guest struct {
	guesttest.Guest
}

// Under TCG a guest command takes tens to hundreds of milliseconds; a
// command slower than this is logged.
const slowCommand = 3 * time.Second

// waitFor runs cmd until cond holds for its trimmed output, and returns
// that output; after timeout it ends the test with the last output.
func (g guest) waitFor(t testing.TB, what string, timeout time.Duration, cmd string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := g.Run(t, cmd)
		out = strings.TrimSpace(out)
		if cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last output of %q:\n%s", timeout, what, cmd, out)
		}
		time.Sleep(guesttest.Poll)
	}
}

// readInt reads a file holding one integer.
func (g guest) readInt(t testing.TB, path string) int64 {
	t.Helper()
	s := g.Sh(t, "cat "+path)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number", path, s)
	}
	return n
}

// memoryEventsOOMKill reads oom_kill from a cgroup's memory.events.
func (g guest) memoryEventsOOMKill(t testing.TB, dir string) int64 {
	t.Helper()
	s := g.Sh(t, "sed -n 's/^oom_kill //p' "+dir+"/memory.events")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s/memory.events oom_kill %q", dir, s)
	}
	return n
}

// metrics returns the lines of the daemon's /metrics (read over its socket
// by vmtool) that start with prefix.
func (g guest) metrics(t testing.TB, prefix string) []string {
	t.Helper()
	out := g.Sh(t, guestTool+" get "+guesttest.Socket+" /metrics")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	return lines
}

// daemonAlive checks that the daemon's process still runs and answers.
func (g guest) daemonAlive(t testing.TB) {
	t.Helper()
	pid := g.Sh(t, "cat "+guesttest.PIDFile)
	if out, code := g.Run(t, "kill -0 "+pid); code != 0 {
		t.Fatalf("the daemon (pid %s) is gone: %s\nits log:\n%s", pid, out, g.DaemonLogTail(t, 40))
	}
	g.Status(t)
}

// memoryBlocks lists the memoryN directories.
func (g guest) memoryBlocks(t testing.TB) map[string]bool {
	t.Helper()
	blocks := map[string]bool{}
	for _, b := range strings.Fields(g.Sh(t, "cd /sys/devices/system/memory && ls -d memory[0-9]*")) {
		blocks[b] = true
	}
	return blocks
}
