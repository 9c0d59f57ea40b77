//go:build linux

package cgroup

import (
	"context"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/decide"
)

// TestRestoreLiftsAConfiguredClamp: a configured capacity below the
// hardware (Path A2) clamped kubepods to 2 CPUs and 5 GiB; Restore with
// the kubelet's limits for the 4-CPU machine as it is puts them back, and
// records the change as a restore.
func TestRestoreLiftsAConfiguredClamp(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	kp := tr.paths.Kubepods.Dir
	e, rec, _ := newTestEnforcer(t, tr, nil)
	if err := e.Apply(context.Background(), clamp(3, 2, 5*gib), online(0, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if got := tr.get(t, kp, "memory.max"); got != "5368709120" {
		t.Fatalf("the clamp left memory.max %s", got)
	}
	rec.take()

	ch, err := e.Restore(context.Background(), limitsFor(4, 7*gib), online(0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{"kubepods/memory.max", "kubepods/cpu.weight"}; !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	if got := tr.get(t, kp, "memory.max"); got != bootMemoryMax {
		t.Errorf("memory.max %s after the restore, want the kubelet's %s", got, bootMemoryMax)
	}
	if got := tr.get(t, kp, "cpu.weight"); got != bootWeight {
		t.Errorf("cpu.weight %s after the restore, want the kubelet's %s", got, bootWeight)
	}
	if ch.Action != KindRestore || ch.Result != ResultChanged || ch.Error != "" {
		t.Errorf("change %+v", ch)
	}
	if f := fileChange(t, &ch, "kubepods/memory.max"); f.Before != "5368709120" || f.After != bootMemoryMax || !f.Written {
		t.Errorf("memory.max record %+v", f)
	}
	if last := e.Status().Last; last == nil || last.Action != KindRestore {
		t.Errorf("status does not show the restore: %+v", last)
	}

	// Nothing of the restore is re-asserted: Reapply puts back the last
	// decision (the clamp), not the restore's limits. The process that
	// restores does not run the re-assert loop; this guards that Restore
	// does not become "the last action" of a running daemon.
	if err := e.Reapply(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := tr.get(t, kp, "memory.max"); got != "5368709120" {
		t.Errorf("Reapply after Restore wrote memory.max %s, want the last decision's clamp", got)
	}
}

// TestRestoreKeepsAHardwareClamp: after a loss of hardware (Path B)
// kubepods holds what the kubelet writes for the machine as it is, so
// Restore with those limits writes nothing.
func TestRestoreKeepsAHardwareClamp(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	if err := e.Apply(context.Background(), clamp(1, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	rec.take()
	ch, err := e.Restore(context.Background(), limitsFor(3, 6*gib), online(0, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("writes %q, want none", got)
	}
	if ch.Result != ResultUnchanged {
		t.Errorf("result %s, want %s", ch.Result, ResultUnchanged)
	}
	if got := tr.get(t, tr.paths.Kubepods.Dir, "memory.max"); got != "6442450944" {
		t.Errorf("memory.max %s, want the clamp's 6442450944", got)
	}
}

// TestRestoreThroughSystemd: with the systemd driver the restore sets the
// slice's properties as the enforcer's clamps do, so that systemd keeps
// the kubelet's values and does not put the clamp back.
func TestRestoreThroughSystemd(t *testing.T) {
	tr := newTree(t, DriverSystemd, "/")
	kp := tr.paths.Kubepods.Dir
	tr.set(t, kp, "memory.max", "5368709120")
	fake := &fakeSystemd{}
	e, _, _ := newTestEnforcer(t, tr, systemdWriter(fake))
	lim := decide.CgroupLimits{MemoryMax: 7 * gib}
	if _, err := e.Restore(context.Background(), lim, online(0, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	mem := base()
	mem.Memory = 7 * gib
	want := []unitCall{{"kubepods.slice", "-.slice", true, kp, mem}}
	if got := fake.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("systemd requests:\n got %+v\nwant %+v", got, want)
	}
	if got := tr.get(t, kp, "memory.max"); got != bootMemoryMax {
		t.Errorf("kubepods.slice/memory.max = %s, want %s", got, bootMemoryMax)
	}
}

// TestRestoreWithoutKubepods: no kubepods (no kubelet has started) is a
// skipped change, not an error.
func TestRestoreWithoutKubepods(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	if err := os.RemoveAll(tr.paths.Kubepods.Dir); err != nil {
		t.Fatal(err)
	}
	e, rec, _ := newTestEnforcer(t, tr, nil)
	ch, err := e.Restore(context.Background(), limitsFor(4, 7*gib), online(0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Result != ResultSkipped || ch.Reason == "" || len(rec.take()) != 0 {
		t.Errorf("change %+v", ch)
	}
}
