package vmscenario

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/topology"
)

// guest runs commands in the booted VM for a test.
type guest struct {
	*vm.VM
}

// Under TCG a guest command takes tens to hundreds of milliseconds; a
// command slower than this is logged.
const slowCommand = 3 * time.Second

// run runs cmd in the guest and returns its output and exit code; a
// transport failure (VM gone, agent stuck) ends the test.
func (g guest) run(t testing.TB, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, code, err := g.Exec(ctx, cmd)
	if d := time.Since(start); d > slowCommand {
		t.Logf("slow guest command (%v): %s", d.Round(time.Millisecond), cmd)
	}
	if err != nil {
		t.Fatalf("guest: %q: %v", cmd, err)
	}
	return out, code
}

// sh runs a command that must succeed and returns its trimmed output.
func (g guest) sh(t testing.TB, cmd string) string {
	t.Helper()
	out, code := g.run(t, cmd)
	if code != 0 {
		t.Fatalf("guest: %q exited %d: %s", cmd, code, out)
	}
	return strings.TrimSpace(out)
}

// poll is how often the waits look again.
const poll = 100 * time.Millisecond

// waitFor runs cmd until cond holds for its trimmed output, and returns
// that output; after timeout it ends the test with the last output.
func (g guest) waitFor(t testing.TB, what string, timeout time.Duration, cmd string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := g.run(t, cmd)
		out = strings.TrimSpace(out)
		if cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last output of %q:\n%s", timeout, what, cmd, out)
		}
		time.Sleep(poll)
	}
}

// readInt reads a file holding one integer.
func (g guest) readInt(t testing.TB, path string) int64 {
	t.Helper()
	s := g.sh(t, "cat "+path)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number", path, s)
	}
	return n
}

// memTotal is /proc/meminfo's MemTotal in bytes.
func (g guest) memTotal(t testing.TB) int64 {
	t.Helper()
	return parseMemTotal(t, g.sh(t, "grep '^MemTotal:' /proc/meminfo"))
}

func parseMemTotal(t testing.TB, line string) int64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "MemTotal:" || f[2] != "kB" {
		t.Fatalf("MemTotal line %q", line)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("MemTotal line %q: %v", line, err)
	}
	return kb << 10
}

// cpuSet reads a file in the kernel's CPU list format.
func (g guest) cpuSet(t testing.TB, path string) topology.CPUSet {
	t.Helper()
	return mustCPUSet(t, g.sh(t, "cat "+path))
}

func mustCPUSet(t testing.TB, s string) topology.CPUSet {
	t.Helper()
	set, err := topology.ParseCPUSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// kubepods is what the kubepods cgroup files say.
type kubepods struct {
	MemoryMax    string // "max" or bytes
	CPUWeight    int64
	CPUs         topology.CPUSet // cpuset.cpus
	CPUsEff      topology.CPUSet // cpuset.cpus.effective
	OOMKills     int64           // memory.events oom_kill
	MemoryEvents string
	PidsMax      string // "max" or a count
}

// kubepods reads the kubepods cgroup's files in one guest command.
func (g guest) kubepods(t testing.TB) kubepods {
	t.Helper()
	out := g.sh(t, "cd "+guestKubepods+" && for f in memory.max cpu.weight cpuset.cpus cpuset.cpus.effective pids.max; do echo \"$f=$(cat $f)\"; done && cat memory.events")
	var k kubepods
	var events []string
	for _, line := range strings.Split(out, "\n") {
		name, val, ok := strings.Cut(line, "=")
		if !ok {
			events = append(events, line)
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
				k.OOMKills, _ = strconv.ParseInt(f[1], 10, 64)
			}
			continue
		}
		switch name {
		case "memory.max":
			k.MemoryMax = val
		case "cpu.weight":
			k.CPUWeight, _ = strconv.ParseInt(val, 10, 64)
		case "cpuset.cpus":
			k.CPUs = mustCPUSet(t, val)
		case "cpuset.cpus.effective":
			k.CPUsEff = mustCPUSet(t, val)
		case "pids.max":
			k.PidsMax = val
		}
	}
	k.MemoryEvents = strings.Join(events, ", ")
	return k
}

func (k kubepods) String() string {
	return fmt.Sprintf("memory.max=%s cpu.weight=%d cpuset.cpus=%q cpuset.cpus.effective=%q pids.max=%s memory.events{%s}",
		k.MemoryMax, k.CPUWeight, k.CPUs.String(), k.CPUsEff.String(), k.PidsMax, k.MemoryEvents)
}

// memoryEventsOOMKill reads oom_kill from a cgroup's memory.events.
func (g guest) memoryEventsOOMKill(t testing.TB, dir string) int64 {
	t.Helper()
	s := g.sh(t, "sed -n 's/^oom_kill //p' "+dir+"/memory.events")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s/memory.events oom_kill %q", dir, s)
	}
	return n
}

// status is the daemon's GET /v1/status as node-resizectl prints it, with
// the enforcer's part decoded.
type status struct {
	api.Status
	Enforce cgroup.Status
}

// status asks the daemon in the guest through node-resizectl.
func (g guest) status(t testing.TB) *status {
	t.Helper()
	out := g.sh(t, guestCtl+" --socket "+guestSocket+" -o json status")
	st := new(status)
	if err := json.Unmarshal([]byte(out), &st.Status); err != nil {
		t.Fatalf("node-resizectl status: %v\n%s", err, out)
	}
	if len(st.Enforcement) > 0 {
		if err := json.Unmarshal(st.Enforcement, &st.Enforce); err != nil {
			t.Fatalf("status.enforcement: %v\n%s", err, st.Enforcement)
		}
	}
	return st
}

func (st *status) cpu() int64 {
	return st.Physical["cpu"] / 1000
}

func (st *status) memory() int64 {
	return st.Physical["memory"]
}

// waitStatus polls the daemon's status until cond holds.
func (g guest) waitStatus(t testing.TB, what string, timeout time.Duration, cond func(*status) bool) *status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := g.status(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st.Status, "", "  ")
			t.Fatalf("waited %v for the daemon to report %s; last status:\n%s", timeout, what, b)
		}
		time.Sleep(poll)
	}
}

// waitKubepods polls the kubepods files until cond holds.
func (g guest) waitKubepods(t testing.TB, what string, timeout time.Duration, cond func(kubepods) bool) kubepods {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		k := g.kubepods(t)
		if cond(k) {
			return k
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for kubepods %s; last: %v", timeout, what, k)
		}
		time.Sleep(poll)
	}
}

// events lists the daemon's changes through node-resizectl.
func (g guest) events(t testing.TB) []monitor.Change {
	t.Helper()
	out := g.sh(t, guestCtl+" --socket "+guestSocket+" -o json events")
	var ch []monitor.Change
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		t.Fatalf("node-resizectl events: %v\n%s", err, out)
	}
	return ch
}

// changesSince returns the changes with an id above id.
func changesSince(all []monitor.Change, id uint64) []monitor.Change {
	var out []monitor.Change
	for _, c := range all {
		if c.ID > id {
			out = append(out, c)
		}
	}
	return out
}

// lastChangeID is the id of the daemon's newest change.
func (g guest) lastChangeID(t testing.TB) uint64 {
	t.Helper()
	var id uint64
	for _, c := range g.events(t) {
		id = max(id, c.ID)
	}
	return id
}

// metrics returns the lines of the daemon's /metrics (read over its socket
// by vmtool) that start with prefix.
func (g guest) metrics(t testing.TB, prefix string) []string {
	t.Helper()
	out := g.sh(t, guestTool+" get "+guestSocket+" /metrics")
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
	pid := g.sh(t, "cat "+guestPIDFile)
	if out, code := g.run(t, "kill -0 "+pid); code != 0 {
		t.Fatalf("the daemon (pid %s) is gone: %s\nits log:\n%s", pid, out, g.daemonLogTail(t, 40))
	}
	g.status(t)
}

// daemonLogTail is the end of the daemon's log in the guest.
func (g guest) daemonLogTail(t testing.TB, n int) string {
	t.Helper()
	out, _ := g.run(t, fmt.Sprintf("tail -n %d %s", n, guestLog))
	return out
}

// daemonLog returns the JSON log records whose msg contains substr.
func (g guest) daemonLog(t testing.TB, substr string) []map[string]any {
	t.Helper()
	out, _ := g.run(t, "cat "+guestLog)
	var recs []map[string]any
	for _, line := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if msg, _ := rec["msg"].(string); strings.Contains(msg, substr) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// memoryBlocks lists the memoryN directories.
func (g guest) memoryBlocks(t testing.TB) map[string]bool {
	t.Helper()
	blocks := map[string]bool{}
	for _, b := range strings.Fields(g.sh(t, "cd /sys/devices/system/memory && ls -d memory[0-9]*")) {
		blocks[b] = true
	}
	return blocks
}

// kubeletWeight is the cpu.weight the kubelet writes for kubepods on a
// node with n CPUs (cgroup v1 shares converted to v2 weight).
func kubeletWeight(n int64) int64 {
	shares := n * 1000 * 1024 / 1000
	shares = min(max(shares, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

// wantMemoryMax is kubepods' memory.max for a MemTotal.
func wantMemoryMax(memTotal int64) string {
	return strconv.FormatInt(memTotal-reserved, 10)
}

func mib(b int64) string {
	return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
}
