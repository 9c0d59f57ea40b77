package main

import (
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

func TestSeqnumsStayReadable(t *testing.T) {
	var few monitor.Seqnums
	for _, n := range []uint64{10, 11, 12, 20} {
		few.Add(n)
	}
	if got := seqnums(few); got != "10-12,20" {
		t.Errorf("few: %q, want the list", got)
	}
	var many monitor.Seqnums
	for i := uint64(0); i < 400; i++ {
		many.Add(1000 + 2*i) // a CPU flip's uevents interleave with other subsystems'
	}
	if got, want := seqnums(many), "1000…1510+ (400 in 256+ ranges)"; got != want {
		t.Errorf("many: %q, want %q", got, want)
	}
	var some monitor.Seqnums
	for i := uint64(0); i < 100; i++ {
		some.Add(1000 + 2*i)
	}
	if got, want := seqnums(some), "1000…1198 (100 in 100 ranges)"; got != want {
		t.Errorf("some: %q, want %q", got, want)
	}
}

func TestPrintKubelet(t *testing.T) {
	var b strings.Builder
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	printKubelet(&b, &api.KubeletStatus{KubeletView: types.KubeletView{Unit: "kubelet.service", ActiveState: "active", SubState: "running", MainPID: 42, Started: started,
		Capacity: resources.List{resources.CPU: 4000}, Sources: map[string]string{"cpu": "status.capacity as the kubelet wrote it"},
		Stale: true, StaleSince: 12, Version: "v1.38.0", VersionNote: "kubelet v1.38.0 is newer than the versions whose checkpoints node-resized knows"},
		Restart: "never", RestartBlocked: "restarts are turned off"}, started.Add(time.Minute))
	out := b.String()
	for _, want := range []string{"kubelet.service active/running, pid 42", "1m0s ago", "cpu=4 (stale since change #12)",
		"Kubelet version:\tv1.38.0 (warning: kubelet v1.38.0 is newer than",
		"cpu: status.capacity as the kubelet wrote it", "never, not now: restarts are turned off"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPrintKubeletBudget: a restart that waits for the budget says until
// when, and the budget shows how much of it is used.
func TestPrintKubeletBudget(t *testing.T) {
	var b strings.Builder
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	next := started.Add(20 * time.Minute)
	printKubelet(&b, &api.KubeletStatus{KubeletView: types.KubeletView{Unit: "kubelet.service", ActiveState: "active", SubState: "running", MainPID: 42, Started: started},
		Restart: "auto", RestartBudget: "3/20m", RecentRestarts: []time.Time{started, started.Add(time.Minute), started.Add(2 * time.Minute)},
		RestartWaiting: "budget", NextRestart: next}, started.Add(time.Minute))
	out := b.String()
	for _, want := range []string{"auto, next at " + next.Local().Format(time.DateTime) + " (the restart budget is spent); budget 3/20m, 3 used"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPrintRelease: the status names what is released and, per memory
// device, whether it is safe to unplug, and what could not be released.
func TestPrintRelease(t *testing.T) {
	var b strings.Builder
	printRelease(&b, &api.ReleaseStatus{Allowed: true, Short: "memory: 128Mi more to take offline, but block 20 would not go offline",
		Released: types.Released{CPUs: []int{2, 3}, Blocks: []int{16, 17, 18, 19, 24}, Devices: []types.ReleasedDevice{
			{ID: "PNP0C80:00", Start: 0x100000000, End: 0x120000000, Size: 512 << 20, Offline: 4, Blocks: 4, SafeToUnplug: true},
			{ID: "PNP0C80:01", Start: 0x120000000, End: 0x140000000, Size: 512 << 20, Offline: 1, Blocks: 4},
		}}})
	out := b.String()
	for _, want := range []string{"Planned release:\tallowed (--release)", "Released:\tcpus 2-3; memory PNP0C80:00",
		"PNP0C80:00:\t[0x100000000-0x120000000) 512Mi, 4/4 blocks offline: SAFE TO UNPLUG",
		"PNP0C80:01:\t[0x120000000-0x140000000) 512Mi, 1/4 blocks offline: not yet safe to unplug",
		"Not released:\tmemory: 128Mi more"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
