package guesttest

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

// Poll is how often the waits look again.
const Poll = 100 * time.Millisecond

// commandTimeout bounds one guest command.
const commandTimeout = 2 * time.Minute

// Guest runs commands in the booted VM for a test, and asks the daemon
// there through node-resizectl. A transport failure (VM gone, agent
// stuck), a command that must succeed and did not, or an answer that does
// not parse ends the test.
type Guest struct {
	*vm.VM
	// Ctl is node-resizectl's path in the guest.
	Ctl string
	// SlowCommand, when not zero, is how long a guest command may take
	// before Run logs it.
	SlowCommand time.Duration
	// KubepodsDetail makes Kubepods read cpuset.cpus.effective, pids.max
	// and memory.events too.
	KubepodsDetail bool
}

// Run runs cmd in the guest and returns its output and exit code.
func (g Guest) Run(t testing.TB, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	start := time.Now()
	out, code, err := g.Exec(ctx, cmd)
	if d := time.Since(start); g.SlowCommand > 0 && d > g.SlowCommand {
		t.Logf("slow guest command (%v): %s", d.Round(time.Millisecond), cmd)
	}
	if err != nil {
		t.Fatalf("guest: %q: %v", cmd, err)
	}
	return out, code
}

// Sh runs a command that must succeed and returns its trimmed output.
func (g Guest) Sh(t testing.TB, cmd string) string {
	t.Helper()
	out, code := g.Run(t, cmd)
	if code != 0 {
		t.Fatalf("guest: %q exited %d: %s", cmd, code, out)
	}
	return strings.TrimSpace(out)
}

// MemTotal is /proc/meminfo's MemTotal in bytes.
func (g Guest) MemTotal(t testing.TB) int64 {
	t.Helper()
	return ParseMemTotal(t, g.Sh(t, "grep '^MemTotal:' /proc/meminfo"))
}

// ParseMemTotal returns the bytes of /proc/meminfo's MemTotal line.
func ParseMemTotal(t testing.TB, line string) int64 {
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

// CPUSet reads a file in the kernel's CPU list format.
func (g Guest) CPUSet(t testing.TB, path string) topology.CPUSet {
	t.Helper()
	return MustCPUSet(t, g.Sh(t, "cat "+path))
}

// MustCPUSet parses a CPU list.
func MustCPUSet(t testing.TB, s string) topology.CPUSet {
	t.Helper()
	set, err := topology.ParseCPUSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// Status is the daemon's GET /v1/status as node-resizectl prints it, with
// the enforcer's part decoded.
type Status struct {
	api.Status
	Enforce cgroup.Status
}

// PhysicalCPU is the CPUs the daemon counts.
func (st *Status) PhysicalCPU() int64 { return st.Physical["cpu"] / 1000 }

// PhysicalMemory is the memory the daemon counts, in bytes.
func (st *Status) PhysicalMemory() int64 { return st.Physical["memory"] }

// ctl runs node-resizectl's JSON output of cmd and decodes it into v.
func (g Guest) ctl(t testing.TB, cmd string, v any) {
	t.Helper()
	out := g.Sh(t, g.Ctl+" --socket "+Socket+" -o json "+cmd)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("node-resizectl %s: %v\n%s", cmd, err, out)
	}
}

// Status asks the daemon for its status.
func (g Guest) Status(t testing.TB) *Status {
	t.Helper()
	st := new(Status)
	g.ctl(t, "status", &st.Status)
	if len(st.Enforcement) > 0 {
		if err := json.Unmarshal(st.Enforcement, &st.Enforce); err != nil {
			t.Fatalf("status.enforcement: %v\n%s", err, st.Enforcement)
		}
	}
	return st
}

// WaitStatus polls the daemon's status until cond holds.
func (g Guest) WaitStatus(t testing.TB, what string, timeout time.Duration, cond func(*Status) bool) *Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := g.Status(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st.Status, "", "  ")
			t.Fatalf("waited %v for the daemon to report %s; last status:\n%s", timeout, what, b)
		}
		time.Sleep(Poll)
	}
}

// WaitDaemon requires the setup script to have succeeded and waits for
// the daemon to answer on its socket.
func (g Guest) WaitDaemon(t testing.TB, timeout time.Duration) {
	t.Helper()
	if got := g.Sh(t, "cat "+vm.GuestSetupStatus); got != "0" {
		t.Fatalf("setup script exited %s; console:\n%s", got, g.TailConsole(30))
	}
	deadline := time.Now().Add(timeout)
	for {
		out, code := g.Run(t, g.Ctl+" --socket "+Socket+" -o json status")
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not answer on %s after %v: %s\nits log:\n%s", Socket, timeout, out, g.DaemonLogTail(t, 40))
		}
		time.Sleep(Poll)
	}
}

// Events lists the daemon's changes.
func (g Guest) Events(t testing.TB) []monitor.Change {
	t.Helper()
	var ch []monitor.Change
	g.ctl(t, "events", &ch)
	return ch
}

// LastChangeID is the id of the daemon's newest change.
func (g Guest) LastChangeID(t testing.TB) uint64 {
	t.Helper()
	var id uint64
	for _, c := range g.Events(t) {
		id = max(id, c.ID)
	}
	return id
}

// ChangesSince returns the changes with an id above id.
func ChangesSince(all []monitor.Change, id uint64) []monitor.Change {
	var out []monitor.Change
	for _, c := range all {
		if c.ID > id {
			out = append(out, c)
		}
	}
	return out
}

// DaemonLog returns the daemon's JSON log records whose msg contains
// substr.
func (g Guest) DaemonLog(t testing.TB, substr string) []map[string]any {
	t.Helper()
	out, _ := g.Run(t, "cat "+LogFile)
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

// DaemonLogTail is the end of the daemon's log, n lines.
func (g Guest) DaemonLogTail(t testing.TB, n int) string {
	t.Helper()
	out, _ := g.Run(t, fmt.Sprintf("tail -n %d %s", n, LogFile))
	return out
}

// Kubepods is what the kubepods cgroup's files say.
type Kubepods struct {
	MemoryMax string // "max" or bytes
	CPUWeight int64
	CPUs      topology.CPUSet // cpuset.cpus

	// With Guest.KubepodsDetail:
	CPUsEff      topology.CPUSet // cpuset.cpus.effective
	OOMKills     int64           // memory.events oom_kill
	MemoryEvents string
	PidsMax      string // "max" or a count

	detail bool
}

func (k Kubepods) String() string {
	if !k.detail {
		return fmt.Sprintf("memory.max=%s cpu.weight=%d cpuset.cpus=%q", k.MemoryMax, k.CPUWeight, k.CPUs.String())
	}
	return fmt.Sprintf("memory.max=%s cpu.weight=%d cpuset.cpus=%q cpuset.cpus.effective=%q pids.max=%s memory.events{%s}",
		k.MemoryMax, k.CPUWeight, k.CPUs.String(), k.CPUsEff.String(), k.PidsMax, k.MemoryEvents)
}

// kubepodsCommand reads kubepods' files in one guest command: a line
// "file=value" each, then with detail memory.events' lines.
func kubepodsCommand(detail bool) string {
	if !detail {
		return "cd " + KubepodsDir + " && for f in memory.max cpu.weight cpuset.cpus; do echo \"$f=$(cat $f)\"; done"
	}
	return "cd " + KubepodsDir + " && for f in memory.max cpu.weight cpuset.cpus cpuset.cpus.effective pids.max; do echo \"$f=$(cat $f)\"; done && cat memory.events"
}

// parseKubepods parses kubepodsCommand's output.
func parseKubepods(t testing.TB, out string, detail bool) Kubepods {
	t.Helper()
	k := Kubepods{detail: detail}
	var events []string
	for _, line := range strings.Split(out, "\n") {
		name, val, ok := strings.Cut(line, "=")
		if !ok {
			if !detail {
				continue
			}
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
			k.CPUs = MustCPUSet(t, val)
		case "cpuset.cpus.effective":
			k.CPUsEff = MustCPUSet(t, val)
		case "pids.max":
			k.PidsMax = val
		}
	}
	if detail {
		k.MemoryEvents = strings.Join(events, ", ")
	}
	return k
}

// Kubepods reads the kubepods cgroup's files in one guest command.
func (g Guest) Kubepods(t testing.TB) Kubepods {
	t.Helper()
	return parseKubepods(t, g.Sh(t, kubepodsCommand(g.KubepodsDetail)), g.KubepodsDetail)
}

// WaitKubepods polls the kubepods files until cond holds.
func (g Guest) WaitKubepods(t testing.TB, what string, timeout time.Duration, cond func(Kubepods) bool) Kubepods {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		k := g.Kubepods(t)
		if cond(k) {
			return k
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for kubepods %s; last: %v", timeout, what, k)
		}
		time.Sleep(Poll)
	}
}

// MiB formats bytes in MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
