package vmarch

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/topology"
)

// guest runs commands in the booted VM for a test.
type guest struct {
	*vm.VM
}

// poll is how often the waits look again.
const poll = 100 * time.Millisecond

// run runs cmd in the guest and returns its output and exit code; a
// transport failure (VM gone, agent stuck) ends the test.
func (g guest) run(t testing.TB, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code, err := g.Exec(ctx, cmd)
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

// memTotal is /proc/meminfo's MemTotal in bytes.
func (g guest) memTotal(t testing.TB) int64 {
	t.Helper()
	line := g.sh(t, "grep '^MemTotal:' /proc/meminfo")
	f := strings.Fields(line)
	if len(f) != 3 || f[2] != "kB" {
		t.Fatalf("MemTotal line %q", line)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("MemTotal line %q: %v", line, err)
	}
	return kb << 10
}

func mustCPUSet(t testing.TB, s string) topology.CPUSet {
	t.Helper()
	set, err := topology.ParseCPUSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// cpuSet reads a file in the kernel's CPU list format.
func (g guest) cpuSet(t testing.TB, path string) topology.CPUSet {
	t.Helper()
	return mustCPUSet(t, g.sh(t, "cat "+path))
}

// status asks the daemon in the guest through node-resizectl.
func (g guest) status(t testing.TB) *api.Status {
	t.Helper()
	out := g.sh(t, guestCtl+" --socket "+guestSocket+" -o json status")
	st := new(api.Status)
	if err := json.Unmarshal([]byte(out), st); err != nil {
		t.Fatalf("node-resizectl status: %v\n%s", err, out)
	}
	return st
}

func cpus(st *api.Status) int64 { return st.Physical["cpu"] / 1000 }

// waitStatus polls the daemon's status until cond holds.
func (g guest) waitStatus(t testing.TB, what string, timeout time.Duration, cond func(*api.Status) bool) *api.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := g.status(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("waited %v for the daemon to report %s; last status:\n%s", timeout, what, b)
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

// lastChangeID is the id of the daemon's newest change.
func (g guest) lastChangeID(t testing.TB) uint64 {
	t.Helper()
	var id uint64
	for _, c := range g.events(t) {
		id = max(id, c.ID)
	}
	return id
}

// changesSince returns the daemon's changes with an id above id.
func (g guest) changesSince(t testing.TB, id uint64) []monitor.Change {
	t.Helper()
	var out []monitor.Change
	for _, c := range g.events(t) {
		if c.ID > id {
			out = append(out, c)
		}
	}
	return out
}

// uevent is one line of the guest's uevent log (vm.GuestUeventLog).
type uevent struct {
	Seqnum    uint64
	Action    string
	Devpath   string
	Subsystem string
}

func (u uevent) String() string { return u.Action + " " + u.Devpath }

// relevantSubsystems are those whose uevents the daemon rebuilds on
// (package uevent's defaults).
var relevantSubsystems = map[string]bool{"cpu": true, "memory": true, "node": true}

// uevents returns the uevents of the relevant subsystems the guest logged
// after seqnum after, in order.
func (g guest) uevents(t testing.TB, after uint64) []uevent {
	t.Helper()
	var out []uevent
	// The log appears with the first uevent after boot.
	for _, line := range strings.Split(g.sh(t, "cat "+vm.GuestUeventLog+" 2>/dev/null || true"), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		seq, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || seq <= after || !relevantSubsystems[f[3]] {
			continue
		}
		out = append(out, uevent{seq, f[1], f[2], f[3]})
	}
	return out
}

// lastSeqnum is the kernel's newest uevent SEQNUM.
func (g guest) lastSeqnum(t testing.TB) uint64 {
	t.Helper()
	out := g.sh(t, "cat /sys/kernel/uevent_seqnum")
	n, err := strconv.ParseUint(out, 10, 64)
	if err != nil {
		t.Fatalf("/sys/kernel/uevent_seqnum: %q", out)
	}
	return n
}

// kubepods is what the kubepods cgroup files say.
type kubepods struct {
	MemoryMax string
	CPUWeight int64
	CPUs      topology.CPUSet
}

func (k kubepods) String() string {
	return fmt.Sprintf("memory.max=%s cpu.weight=%d cpuset.cpus=%q", k.MemoryMax, k.CPUWeight, k.CPUs.String())
}

func (g guest) kubepods(t testing.TB) kubepods {
	t.Helper()
	out := g.sh(t, "cd "+guestKubepods+" && for f in memory.max cpu.weight cpuset.cpus; do echo \"$f=$(cat $f)\"; done")
	var k kubepods
	for _, line := range strings.Split(out, "\n") {
		name, val, _ := strings.Cut(line, "=")
		switch name {
		case "memory.max":
			k.MemoryMax = val
		case "cpu.weight":
			k.CPUWeight, _ = strconv.ParseInt(val, 10, 64)
		case "cpuset.cpus":
			k.CPUs = mustCPUSet(t, val)
		}
	}
	return k
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

// kubeletWeight is the cpu.weight the kubelet writes for kubepods on a
// node with n CPUs (cgroup v1 shares converted to v2 weight).
func kubeletWeight(n int64) int64 {
	shares := min(max(n*1024, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

// wantMemoryMax is kubepods' memory.max for a MemTotal.
func wantMemoryMax(memTotal int64) string {
	return strconv.FormatInt(memTotal-reserved, 10)
}

// daemonLog returns the daemon's JSON log records whose msg contains
// substr.
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

// kubeletView is what cAdvisor's own code (testdata/cadvisorprobe) makes
// of the guest: the kubelet's MachineInfo.
type kubeletView struct {
	NumCores       int64 `json:"numCores"`
	MemoryCapacity int64 `json:"memoryCapacity"`
	Nodes          []struct {
		ID     int   `json:"id"`
		CPUs   []int `json:"cpus"`
		Memory int64 `json:"memory"`
	} `json:"nodes"`
}

func (g guest) kubeletView(t testing.TB) kubeletView {
	t.Helper()
	out := g.sh(t, guestProbe)
	var kv kubeletView
	if err := json.Unmarshal([]byte(out), &kv); err != nil {
		t.Fatalf("cadvisorprobe: %v\n%s", err, out)
	}
	return kv
}

func (kv kubeletView) String() string {
	var nodes []string
	for _, n := range kv.Nodes {
		nodes = append(nodes, fmt.Sprintf("node%d cpus %v memory %s", n.ID, n.CPUs, mib(n.Memory)))
	}
	return fmt.Sprintf("NumCores %d, MemoryCapacity %s; %s", kv.NumCores, mib(kv.MemoryCapacity), strings.Join(nodes, "; "))
}

// checkKubeletExact requires the daemon's capacity and NUMA nodes to be
// what cAdvisor, hence the kubelet, computes on the same machine: the
// daemon's contract.
func checkKubeletExact(t testing.TB, st *api.Status, kv kubeletView) {
	t.Helper()
	if st.Physical["cpu"] != kv.NumCores*1000 || st.Physical["memory"] != kv.MemoryCapacity {
		t.Errorf("the daemon's physical cpu=%dm memory=%d; cAdvisor's NumCores %d, MemoryCapacity %d",
			st.Physical["cpu"], st.Physical["memory"], kv.NumCores, kv.MemoryCapacity)
	}
	var got, want []string
	for _, n := range st.NUMANodes {
		got = append(got, fmt.Sprintf("node%d cpus %v memory %d", n.ID, n.CPUs.String(), n.Memory))
	}
	for _, n := range kv.Nodes {
		want = append(want, fmt.Sprintf("node%d cpus %v memory %d", n.ID, topology.CPUSet(n.CPUs).String(), n.Memory))
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("the daemon's NUMA nodes differ from cAdvisor's:\n daemon   %s\n cAdvisor %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
