package vmarch

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
	"github.com/node-resized/node-resized/topology"
)

// guest runs commands in the booted VM for a test.
type guest struct {
	guesttest.Guest
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
	for _, line := range strings.Split(g.Sh(t, "cat "+vm.GuestUeventLog+" 2>/dev/null || true"), "\n") {
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
	out := g.Sh(t, "cat /sys/kernel/uevent_seqnum")
	n, err := strconv.ParseUint(out, 10, 64)
	if err != nil {
		t.Fatalf("/sys/kernel/uevent_seqnum: %q", out)
	}
	return n
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
	out := g.Sh(t, guestProbe)
	var kv kubeletView
	if err := json.Unmarshal([]byte(out), &kv); err != nil {
		t.Fatalf("cadvisorprobe: %v\n%s", err, out)
	}
	return kv
}

func (kv kubeletView) String() string {
	var nodes []string
	for _, n := range kv.Nodes {
		nodes = append(nodes, fmt.Sprintf("node%d cpus %v memory %s", n.ID, n.CPUs, guesttest.MiB(n.Memory)))
	}
	return fmt.Sprintf("NumCores %d, MemoryCapacity %s; %s", kv.NumCores, guesttest.MiB(kv.MemoryCapacity), strings.Join(nodes, "; "))
}

// checkKubeletExact requires the daemon's capacity and NUMA nodes to be
// what cAdvisor, hence the kubelet, computes on the same machine: the
// daemon's contract.
func checkKubeletExact(t testing.TB, st *guesttest.Status, kv kubeletView) {
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
