//go:build linux

package cgroup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// recorder wraps a writer and lists the files it is asked to set, in order.
type recorder struct {
	inner writer
	mu    sync.Mutex
	calls []string
	// hook, when set, runs before each write (e.g. to play the kernel).
	hook func(o *op) error
}

func (r *recorder) set(o *op) error {
	r.mu.Lock()
	r.calls = append(r.calls, filepath.Base(o.g.Dir)+"/"+o.file)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		if err := hook(o); err != nil {
			return err
		}
	}
	return r.inner.set(o)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// newTestEnforcer builds an Enforcer on tr that writes through the real
// opencontainers/cgroups managers of the driver (fs2 for cgroupfs), wrapped
// in a recorder.
func newTestEnforcer(t *testing.T, tr *tree, inner writer, adjust ...func(*Options)) (*Enforcer, *recorder, *metrics.Metrics) {
	t.Helper()
	if inner == nil {
		inner = newWriter(tr.paths.Driver)
	}
	rec := &recorder{inner: inner}
	m := metrics.New()
	opts := Options{
		Root: tr.root, Driver: tr.paths.Driver, CgroupRoot: tr.paths.CgroupRoot,
		Metrics: m, SkipMagicCheck: true, writer: rec,
	}
	for _, f := range adjust {
		f(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, rec, m
}

func online(ids ...int) topology.CPUSet { return topology.CPUSet(ids) }

// limitsFor is what the kubelet writes for cpus CPUs and mem bytes of
// allocatable memory.
func limitsFor(cpus, mem int64) decide.CgroupLimits {
	shares := decide.MilliCPUToShares(cpus * 1000)
	return decide.CgroupLimits{
		MemoryMax: mem,
		CPUShares: shares,
		CPUWeight: decide.SharesToWeight(shares),
		PidsMax:   4194304,
		HugeTLB:   map[int64]int64{2 << 20: 0, 1 << 30: 0},
	}
}

func clamp(gen, cpus, mem int64) Request {
	return Request{Kind: KindClamp, Generation: gen, Limits: limitsFor(cpus, mem)}
}

func grow(gen, cpus, mem int64) Request {
	return Request{Kind: KindGrow, Generation: gen, Limits: limitsFor(cpus, mem)}
}

func resizeErrors(m *metrics.Metrics) float64 {
	return testutil.ToFloat64(m.ResizeErrors.WithLabelValues("cgroup_update"))
}

// fileChange finds the record of one file ("burstable/cpuset.cpus").
func fileChange(t *testing.T, c *Change, rel string) FileChange {
	t.Helper()
	for _, f := range c.Files {
		if strings.HasSuffix(f.Path, "/"+rel) {
			return f
		}
	}
	t.Fatalf("no record of %s in %+v", rel, c.Files)
	return FileChange{}
}

func TestClampShrinksParentAndNarrowsChildrenFirst(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	p := tr.paths
	// Explicit lists: kubepods and burstable pinned to 0-3 (burstable a copy
	// of kubepods), besteffort to 2-3 of its own.
	tr.set(t, p.Kubepods.Dir, "cpuset.cpus", "0-3")
	tr.set(t, p.Burstable.Dir, "cpuset.cpus", "0-3")
	tr.set(t, p.BestEffort.Dir, "cpuset.cpus", "2-3")
	e, rec, m := newTestEnforcer(t, tr, nil)

	// cpu3 is gone and 1 GiB of memory with it.
	if err := e.Apply(context.Background(), clamp(7, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	want := []string{"kubepods/memory.max", "kubepods/cpu.weight",
		"burstable/cpuset.cpus", "besteffort/cpuset.cpus", "kubepods/cpuset.cpus"}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	for _, c := range []struct{ dir, file, want string }{
		{p.Kubepods.Dir, "memory.max", "6442450944"},
		{p.Kubepods.Dir, "cpu.weight", "118"},
		{p.Kubepods.Dir, "pids.max", bootPids},
		{p.Kubepods.Dir, "cpuset.cpus", "0-2"},
		{p.Burstable.Dir, "cpuset.cpus", "0-2"},
		{p.BestEffort.Dir, "cpuset.cpus", "2"},
	} {
		if got := tr.get(t, c.dir, c.file); got != c.want {
			t.Errorf("%s/%s = %q, want %q", filepath.Base(c.dir), c.file, got, c.want)
		}
	}
	st := e.Status()
	if !st.Found || st.Mode != ModeUnified || st.Driver != DriverCgroupfs || st.Kubepods != p.Kubepods.Dir || st.Unsupported != "" {
		t.Errorf("status %+v", st)
	}
	last := st.Last
	if last == nil || last.Result != ResultChanged || last.Action != KindClamp || last.Generation != 7 || last.Error != "" {
		t.Fatalf("last %+v", last)
	}
	if f := fileChange(t, last, "kubepods/memory.max"); f.Before != bootMemoryMax || f.After != "6442450944" || !f.Written {
		t.Errorf("memory.max record %+v", f)
	}
	if f := fileChange(t, last, "kubepods/pids.max"); f.Written || f.Before != bootPids || f.After != bootPids {
		t.Errorf("pids.max record %+v", f)
	}
	if f := fileChange(t, last, "besteffort/cpuset.cpus"); f.Before != "2-3" || f.After != "2" || !strings.Contains(f.Note, "own") {
		t.Errorf("besteffort cpuset record %+v", f)
	}
	if len(st.History) != 1 || resizeErrors(m) != 0 {
		t.Errorf("history %d, errors %v", len(st.History), resizeErrors(m))
	}
}

func TestGrowWidensParentFirst(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	p := tr.paths
	tr.set(t, p.Kubepods.Dir, "memory.max", "6442450944")
	tr.set(t, p.Kubepods.Dir, "cpu.weight", "118")
	tr.set(t, p.Kubepods.Dir, "cpuset.cpus", "0-2")
	tr.set(t, p.Burstable.Dir, "cpuset.cpus", "0-2")
	e, rec, _ := newTestEnforcer(t, tr, nil)

	// cpu3 came back and cpu4, an id the machine never had, was hot-added.
	if err := e.Apply(context.Background(), grow(8, 5, 9*gib), online(0, 1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	want := []string{"kubepods/memory.max", "kubepods/cpu.weight", "kubepods/cpuset.cpus", "burstable/cpuset.cpus"}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	for _, c := range []struct{ dir, file, want string }{
		{p.Kubepods.Dir, "memory.max", "9663676416"},
		{p.Kubepods.Dir, "cpu.weight", "196"},
		{p.Kubepods.Dir, "cpuset.cpus", "0-4"},
		{p.Burstable.Dir, "cpuset.cpus", "0-4"},
		{p.BestEffort.Dir, "cpuset.cpus", ""},
	} {
		if got := tr.get(t, c.dir, c.file); got != c.want {
			t.Errorf("%s/%s = %q, want %q", filepath.Base(c.dir), c.file, got, c.want)
		}
	}
	if f := fileChange(t, e.Status().Last, "besteffort/cpuset.cpus"); f.Written || f.Note != noteInherits {
		t.Errorf("besteffort cpuset record %+v", f)
	}
}

// TestInheritingCpusetsLeftAlone: on cgroup v2 the kubelet never writes a
// cpuset, so kubepods and its children inherit the online CPUs; writing a
// list would pin them.
func TestInheritingCpusetsLeftAlone(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	if err := e.Apply(context.Background(), grow(1, 5, 9*gib), online(0, 1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	for _, w := range rec.take() {
		if strings.HasSuffix(w, "cpuset.cpus") {
			t.Errorf("wrote %s", w)
		}
	}
	for _, g := range []Group{tr.paths.Kubepods, tr.paths.Burstable, tr.paths.BestEffort} {
		if got := tr.get(t, g.Dir, "cpuset.cpus"); got != "" {
			t.Errorf("%s cpuset.cpus = %q", g.Dir, got)
		}
	}
	if f := fileChange(t, e.Status().Last, "kubepods/cpuset.cpus"); f.Written || f.Note != noteInherits {
		t.Errorf("kubepods cpuset record %+v", f)
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	tr.set(t, tr.paths.Kubepods.Dir, "cpuset.cpus", "0-3")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	ctx := context.Background()
	a := clamp(3, 3, 6*gib+100) // not a multiple of the page size
	if err := e.Apply(ctx, a, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if len(rec.take()) == 0 {
		t.Fatal("first apply wrote nothing")
	}
	// The kernel keeps memory.max in pages: play it.
	tr.set(t, tr.paths.Kubepods.Dir, "memory.max", "6442450944")
	tr.age(t)
	if err := e.Apply(ctx, a, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("second apply wrote %q", got)
	}
	if got := tr.touched(t); len(got) != 0 {
		t.Errorf("second apply touched %q", got)
	}
	st := e.Status()
	if st.Last.Result != ResultUnchanged || len(st.History) != 1 {
		t.Errorf("last %+v, history %d", st.Last, len(st.History))
	}
	for _, f := range st.Last.Files {
		if f.Written || f.Before != f.After {
			t.Errorf("unchanged apply recorded %+v", f)
		}
	}
}

// TestOnlyTargetFilesWritten: opencontainers/cgroups gets one limit at a
// time, so swap, cpu.max, the freezer, the children's limits and every
// other file stay as they were; and the hugetlb limits are the kubelet's
// QoS loop's (unbounded on kubepods, its Guaranteed cgroup, every minute),
// so a request's pool-sized ones are not written over them.
func TestOnlyTargetFilesWritten(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, _, _ := newTestEnforcer(t, tr, nil)
	const unbounded = "4611686018427387904" // 1<<62, the QoS loop's
	for _, f := range []string{"hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "hugetlb.1GB.max", "hugetlb.1GB.rsvd.max"} {
		tr.set(t, tr.paths.Kubepods.Dir, f, unbounded)
	}
	tr.age(t)
	a := clamp(1, 3, 6*gib)
	a.Limits.PidsMax = 1000
	a.Limits.HugeTLB = map[int64]int64{2 << 20: 512 << 20, 1 << 30: 0, 16 << 30: 0}
	if err := e.Apply(context.Background(), a, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	got := tr.touched(t)
	slices.Sort(got)
	want := []string{
		"kubepods/cpu.weight",
		"kubepods/memory.max",
		"kubepods/pids.max",
	}
	if !slices.Equal(got, want) {
		t.Errorf("touched %q, want %q", got, want)
	}
	kp := tr.paths.Kubepods.Dir
	for file, v := range map[string]string{
		"hugetlb.2MB.max": unbounded, "hugetlb.2MB.rsvd.max": unbounded, "hugetlb.1GB.max": unbounded,
		"pids.max": "1000", "memory.swap.max": "0", "cpu.max": "max 100000", "cgroup.freeze": "0",
	} {
		if got := tr.get(t, kp, file); got != v {
			t.Errorf("%s = %q, want %q", file, got, v)
		}
	}
	for _, f := range e.Status().Last.Files {
		if strings.Contains(f.Path, "hugetlb") {
			t.Errorf("a hugetlb file was planned: %+v", f)
		}
	}
}

func TestOOMKillsRecorded(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	// Play the kernel: shrinking memory.max below the usage OOM-kills a
	// task inside the write.
	rec.hook = func(o *op) error {
		if o.file == "memory.max" {
			tr.set(t, o.g.Dir, "memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 3\noom_group_kill 0")
		}
		return nil
	}
	if err := e.Apply(context.Background(), clamp(2, 4, 1*gib), online(0, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	last := e.Status().Last
	if last.OOMKillsBefore == nil || last.OOMKillsAfter == nil || *last.OOMKillsBefore != 2 || *last.OOMKillsAfter != 3 {
		t.Errorf("oom kills %v → %v, want 2 → 3", last.OOMKillsBefore, last.OOMKillsAfter)
	}
}

// makeUnwritable makes a cgroup file refuse writes, for root as well (a
// directory in its place) as for others (mode 0444).
func makeUnwritable(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o555); err != nil {
		t.Fatal(err)
	}
}

func TestWriteFailureIsCountedAndWrapped(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	target := filepath.Join(tr.paths.Kubepods.Dir, "memory.max")
	makeUnwritable(t, target)
	e, _, m := newTestEnforcer(t, tr, nil)
	err := e.Apply(context.Background(), clamp(4, 3, 6*gib), online(0, 1, 2))
	if err == nil {
		t.Fatal("no error")
	}
	var we *WriteError
	if !errors.As(err, &we) || we.Path != target || we.Value != "6442450944" {
		t.Errorf("err %v: want a *WriteError for %s", err, target)
	}
	if !strings.Contains(err.Error(), target) {
		t.Errorf("err %q does not name %s", err, target)
	}
	if got := resizeErrors(m); got != 1 {
		t.Errorf("resize_errors_total{cgroup_update} = %v, want 1", got)
	}
	// The other limits are still set.
	if got := tr.get(t, tr.paths.Kubepods.Dir, "cpu.weight"); got != "118" {
		t.Errorf("cpu.weight = %q after a memory.max failure", got)
	}
	last := e.Status().Last
	if last.Result != ResultFailed || last.Error == "" {
		t.Errorf("last %+v", last)
	}
	if f := fileChange(t, last, "kubepods/memory.max"); f.Written {
		t.Errorf("failed write recorded as written: %+v", f)
	}
	if len(e.Status().History) != 1 {
		t.Error("failure not in history")
	}
}

func TestReadBackMismatchIsAnError(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	// A writer that "succeeds" but leaves another value, as a kernel that
	// clamps a limit would.
	liar := writerFunc(func(o *op) error {
		return os.WriteFile(o.path(), []byte("12345\n"), 0o644)
	})
	e, _, m := newTestEnforcer(t, tr, liar)
	a := Request{Kind: KindClamp, Generation: 1, Limits: decide.CgroupLimits{MemoryMax: 6 * gib}}
	err := e.Apply(context.Background(), a, online(0, 1, 2, 3))
	if err == nil || !strings.Contains(err.Error(), `reads back "12345"`) {
		t.Errorf("err %v", err)
	}
	if resizeErrors(m) != 1 {
		t.Error("not counted")
	}
}

type writerFunc func(o *op) error

func (f writerFunc) set(o *op) error { return f(o) }

func TestKubepodsMissingIsAStatusNotAnError(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	if err := os.RemoveAll(tr.paths.Kubepods.Dir); err != nil {
		t.Fatal(err)
	}
	e, rec, m := newTestEnforcer(t, tr, nil)
	ctx := context.Background()
	if err := e.Apply(ctx, clamp(1, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatalf("Apply without kubepods: %v", err)
	}
	st := e.Status()
	if st.Found || st.Last.Result != ResultSkipped || !strings.Contains(st.Last.Reason, "does not exist") ||
		len(rec.take()) != 0 || resizeErrors(m) != 0 || len(st.History) != 0 {
		t.Errorf("status %+v, last %+v", st, st.Last)
	}
	// The kubelet starts and writes its boot-time limits: Reapply puts the
	// clamp back.
	tr = rebuildKubepods(t, tr)
	if err := e.Reapply(ctx, nil); err != nil {
		t.Fatal(err)
	}
	st = e.Status()
	if !st.Found || st.Last.Result != ResultChanged || !st.Last.Reapply || st.Last.Generation != 1 {
		t.Errorf("after reapply: %+v", st.Last)
	}
	if got := tr.get(t, tr.paths.Kubepods.Dir, "memory.max"); got != "6442450944" {
		t.Errorf("memory.max = %q", got)
	}
	// And again: nothing to do.
	if err := e.Reapply(ctx, nil); err != nil || e.Status().Last.Result != ResultUnchanged {
		t.Errorf("second reapply: %v, %+v", err, e.Status().Last)
	}
}

// rebuildKubepods recreates kubepods as the kubelet does on start.
func rebuildKubepods(t *testing.T, tr *tree) *tree {
	fresh := newTree(t, tr.paths.Driver, tr.paths.CgroupRoot)
	if err := os.Rename(fresh.paths.Kubepods.Dir, tr.paths.Kubepods.Dir); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestReapplyBeforeApplyDoesNothing(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	if err := e.Reapply(context.Background(), online(0)); err != nil || len(rec.take()) != 0 || e.Status().Last != nil {
		t.Errorf("reapply with nothing applied: %v", err)
	}
}

func TestUnsupportedHostSkipsEverything(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"memory/kubepods/burstable", "cpu,cpuacct/kubepods", "cpuset/kubepods"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{inner: writerFunc(func(*op) error { return errors.New("must not write") })}
	m := metrics.New()
	e, err := New(Options{Root: root, SkipMagicCheck: true, Metrics: m, writer: rec})
	if err != nil {
		t.Fatalf("New on cgroup v1: %v", err)
	}
	if err := e.Apply(context.Background(), clamp(1, 1, gib), online(0)); err != nil {
		t.Fatalf("Apply on cgroup v1: %v", err)
	}
	st := e.Status()
	if st.Mode != ModeLegacy || !strings.Contains(st.Unsupported, "cgroup v1 (or hybrid): enforcement is not supported; detection and reporting go on") ||
		st.Last.Result != ResultSkipped || st.Last.Reason != st.Unsupported || !st.Found || len(rec.take()) != 0 || resizeErrors(m) != 0 {
		t.Errorf("status %+v, last %+v", st, st.Last)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(Options{Root: t.TempDir(), SkipMagicCheck: true}); err == nil {
		t.Error("empty root accepted")
	}
	tr := newTree(t, DriverCgroupfs, "/")
	if _, err := New(Options{Root: tr.root, Driver: "cgroupfs2", SkipMagicCheck: true}); err == nil {
		t.Error("unknown driver accepted")
	}
	if _, err := New(Options{Root: tr.root}); err == nil {
		t.Error("a plain directory passed the statfs check")
	}
}

func TestApplyRejectsOtherKinds(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, _, m := newTestEnforcer(t, tr, nil)
	for _, r := range []Request{{Kind: KindRestore, Limits: limitsFor(1, gib)}, {Limits: limitsFor(1, gib)}} {
		if err := e.Apply(context.Background(), r, online(0)); err == nil {
			t.Errorf("Apply of kind %q accepted", r.Kind)
		}
	}
	if resizeErrors(m) != 0 || e.Status().Last != nil {
		t.Error("a refused action was recorded")
	}
}

func TestCancelledContextWritesNothing(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Apply(ctx, clamp(1, 3, 6*gib), online(0, 1, 2)); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if len(rec.take()) != 0 {
		t.Error("wrote with a cancelled context")
	}
}

func TestApplyDuration(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	clock := epoch
	e, rec, _ := newTestEnforcer(t, tr, nil, func(o *Options) {
		o.now = func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	})
	_ = e.Apply(context.Background(), clamp(1, 3, 6*gib), online(0, 1, 2))
	writes := len(rec.take())
	last := e.Status().Last
	// One tick at the start, one after each write, one at the end.
	if want := float64(writes+1) / 1000; last.DurationSeconds != want {
		t.Errorf("duration %v, want %v from the first read to the last read-back (%d writes)", last.DurationSeconds, want, writes)
	}
	want := last.Time.Add(time.Duration(writes) * time.Millisecond)
	if !last.WrittenAt.Equal(want) || !e.LastWrite().Equal(want) {
		t.Errorf("written at %v (LastWrite %v), want %v: the last of %d writes", last.WrittenAt, e.LastWrite(), want, writes)
	}
	// The enforcer's own loop puts a limit back after the kubelet rewrote
	// it: that write is not the clamp's.
	if err := os.WriteFile(filepath.Join(tr.paths.Kubepods.Dir, "memory.max"), []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reapply(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if re := e.Status().Last; !re.Reapply || re.WrittenAt.IsZero() || !e.LastWrite().Equal(want) {
		t.Errorf("after a Reapply that wrote at %v, LastWrite %v, want the Apply's %v", re.WrittenAt, e.LastWrite(), want)
	}
}

// TestMemoryMaxWrittenBeforeTheOthersAreRead: on a clamp memory.max is
// written before any other limit file is even read, so that protection
// does not wait for them. A pids.max that changes while memory.max is
// written is seen as it is after the write.
func TestMemoryMaxWrittenBeforeTheOthersAreRead(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, rec, _ := newTestEnforcer(t, tr, nil)
	lim := limitsFor(3, 6*gib)
	pids := filepath.Join(tr.paths.Kubepods.Dir, "pids.max")
	if err := os.WriteFile(pids, []byte(strconv.FormatInt(lim.PidsMax, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec.hook = func(o *op) error {
		if o.file == "memory.max" {
			return os.WriteFile(pids, []byte("max\n"), 0o644)
		}
		return nil
	}
	if err := e.Apply(context.Background(), Request{Kind: KindClamp, Generation: 1, Limits: lim}, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	calls := rec.take()
	if len(calls) < 2 || calls[0] != "kubepods/memory.max" || calls[1] != "kubepods/pids.max" {
		t.Errorf("writes %v, want kubepods/memory.max, then kubepods/pids.max (read after memory.max was written)", calls)
	}
}

// TestRunReasserts: the enforcer's own loop puts the last limits back
// after the kubelet rewrote them, on its ticker, with the model it is
// given.
func TestRunReasserts(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	fake := clocktesting.NewFakeClock(epoch)
	e, _, _ := newTestEnforcer(t, tr, nil, func(o *Options) { o.Clock = fake; o.ReassertInterval = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.Apply(ctx, clamp(1, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(e.paths.Kubepods.Dir, "memory.max")
	// The kubelet restarts and writes its boot-time value.
	if err := os.WriteFile(mem, []byte("8589934592"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, models{&topology.Snapshot{CPUs: topology.CPUs{Online: online(0, 1, 2)}}}) }()
	for !fake.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if b, _ := os.ReadFile(mem); strings.TrimSpace(string(b)) != "8589934592" {
		t.Fatalf("memory.max %q rewritten before the ticker fired", b)
	}
	fake.Step(time.Minute)
	// The re-assert is recorded after its last read-back: wait for the
	// record, then look at the file.
	deadline := time.Now().Add(10 * time.Second)
	for st := e.Status().Last; st == nil || !st.Reapply; st = e.Status().Last {
		if time.Now().After(deadline) {
			t.Fatalf("no re-assert recorded within 10s; last change %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	if st := e.Status().Last; st.Result != ResultChanged {
		t.Errorf("last change %+v, want a re-assert that changed memory.max", st)
	}
	if b, _ := os.ReadFile(mem); strings.TrimSpace(string(b)) != strconv.FormatInt(6*gib, 10) {
		t.Errorf("memory.max %q not re-asserted to %d", b, 6*gib)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// models is a fixed machine model for Run.
type models struct{ snap *topology.Snapshot }

func (m models) Snapshot() (*topology.Snapshot, resources.List) { return m.snap, m.snap.Capacity() }

func TestHistoryKeepsTheNewest(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, _, _ := newTestEnforcer(t, tr, nil)
	for i := range HistoryLen + 8 {
		if err := e.Apply(context.Background(), clamp(int64(i), 3, 6*gib-int64(i)*(1<<20)), online(0, 1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	h := e.Status().History
	if len(h) != HistoryLen || h[0].Generation != 8 || h[len(h)-1].Generation != HistoryLen+7 {
		t.Errorf("history of %d, from %d to %d", len(h), h[0].Generation, h[len(h)-1].Generation)
	}
}

func TestCustomCgroupRoot(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/custom/nodes")
	e, _, _ := newTestEnforcer(t, tr, nil)
	if err := e.Apply(context.Background(), clamp(1, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if got := tr.get(t, filepath.Join(tr.root, "custom/nodes/kubepods"), "memory.max"); got != "6442450944" {
		t.Errorf("memory.max = %q", got)
	}
}

// TestConcurrentApplyAndStatus runs applies, reapplies and status reads at
// once (meant for -race).
func TestConcurrentApplyAndStatus(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, _, _ := newTestEnforcer(t, tr, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 10 {
				mem := 6*gib - int64(i*10+j)*(1<<20)
				if err := e.Apply(ctx, clamp(int64(j), 3, mem), online(0, 1, 2)); err != nil {
					t.Error(err)
				}
				if err := e.Reapply(ctx, nil); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range 20 {
				st := e.Status()
				if _, err := json.Marshal(st); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Whatever the interleaving, the file holds the last applied value.
	last := e.Status().Last
	if f := fileChange(t, last, "kubepods/memory.max"); f.After != tr.get(t, tr.paths.Kubepods.Dir, "memory.max") {
		t.Errorf("last record %+v, file %s", f, tr.get(t, tr.paths.Kubepods.Dir, "memory.max"))
	}
}

func TestStatusJSON(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	e, _, _ := newTestEnforcer(t, tr, nil)
	if err := e.Apply(context.Background(), clamp(5, 3, 6*gib), online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e.Status())
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"mode":"unified"`, `"driver":"cgroupfs"`, `"found":true`, `"action":"ClampCgroups"`,
		`"generation":5`, `"result":"changed"`, `"oomKillsBefore":2`, `"oomKillsAfter":2`,
		fmt.Sprintf(`"before":%q`, bootMemoryMax), `"after":"6442450944"`} {
		if !strings.Contains(s, want) {
			t.Errorf("status JSON lacks %s: %s", want, s)
		}
	}
}

// A daemon that restarts re-asserts the clamp it recorded: a new
// Enforcer, with no Apply of its own yet, writes the limits again where
// kubepods does not hold them (cpu.weight, rewritten while the daemon was
// down), and only there; the change is recorded as a reassert, and Run
// keeps re-asserting it from then on.
func TestReassertAfterRestart(t *testing.T) {
	tr := newTree(t, DriverCgroupfs, "/")
	before, _, _ := newTestEnforcer(t, tr, nil)
	if err := before.Apply(context.Background(), clamp(3, 1, 2*gib), online(0)); err != nil {
		t.Fatal(err)
	}
	clamped := tr.get(t, tr.paths.Kubepods.Dir, "cpu.weight")
	tr.set(t, tr.paths.Kubepods.Dir, "cpu.weight", bootWeight)

	fake := clocktesting.NewFakeClock(epoch)
	e, rec, _ := newTestEnforcer(t, tr, nil, func(o *Options) { o.Clock = fake; o.ReassertInterval = time.Minute })
	r := clamp(3, 1, 2*gib)
	r.Kind = KindReassert
	if err := e.Apply(context.Background(), r, online(0)); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"kubepods/cpu.weight"}) {
		t.Errorf("written %v, want kubepods/cpu.weight alone", got)
	}
	if got := tr.get(t, tr.paths.Kubepods.Dir, "cpu.weight"); got != clamped {
		t.Errorf("cpu.weight %s, want the clamp's %s back", got, clamped)
	}
	if last := e.Status().Last; last.Action != KindReassert || last.Result != ResultChanged || last.Reapply {
		t.Errorf("last change %+v, want a reassert that changed cpu.weight", last)
	}

	tr.set(t, tr.paths.Kubepods.Dir, "memory.max", bootMemoryMax)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, models{&topology.Snapshot{CPUs: topology.CPUs{Online: online(0)}}}) }()
	for !fake.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	fake.Step(time.Minute)
	for deadline := time.Now().Add(10 * time.Second); !e.Status().Last.Reapply; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no re-assert by Run within 10s; last change %+v", e.Status().Last)
		}
	}
	cancel()
	<-done
	if got := tr.get(t, tr.paths.Kubepods.Dir, "memory.max"); got != strconv.FormatInt(2*gib, 10) {
		t.Errorf("memory.max %s, want the reassert's %d put back by Run", got, 2*gib)
	}
}
