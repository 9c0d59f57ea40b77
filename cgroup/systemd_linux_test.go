//go:build linux

package cgroup

// The systemd driver is tested here through a fake of cgroupManager (the
// one method, Set, the Enforcer uses of libcontainer's systemd manager):
// the fake records the unit each request names and the resources it
// carries, then writes the files with fs2 as the real manager does after
// its D-Bus call. The D-Bus half (SetUnitProperties on a real systemd, and
// that systemd keeps the values across daemon-reload) is not tested here:
// it needs systemd as PID 1, which only the real-node guest under QEMU has
// (test/node); until a scenario there exercises it, it is untested.

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	"github.com/opencontainers/cgroups/systemd"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/topology"
)

type unitCall struct {
	unit, parent string
	systemd      bool
	dir          string
	res          cgroups.Resources
}

// fakeSystemd plays libcontainer's systemd unified manager.
type fakeSystemd struct {
	mu    sync.Mutex
	calls []unitCall
	// fail, when set, is the D-Bus error of every Set.
	fail error
}

func (f *fakeSystemd) factory(c *cgroups.Cgroup, dir string) (cgroupManager, error) {
	return &fakeUnit{f: f, c: c, dir: dir}, nil
}

type fakeUnit struct {
	f   *fakeSystemd
	c   *cgroups.Cgroup
	dir string
}

func (u *fakeUnit) Set(r *cgroups.Resources) error {
	u.f.mu.Lock()
	u.f.calls = append(u.f.calls, unitCall{unit: u.c.Name, parent: u.c.Parent, systemd: u.c.Systemd, dir: u.dir, res: *r})
	fail := u.f.fail
	u.f.mu.Unlock()
	if fail != nil {
		return fail // SetUnitProperties failed: the real manager stops there
	}
	m, err := fs2.NewManager(u.c, u.dir)
	if err != nil {
		return err
	}
	return m.Set(r)
}

func (f *fakeSystemd) take() []unitCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func systemdWriter(f *fakeSystemd) *libWriter {
	return &libWriter{systemd: true, manager: f.factory, direct: fs2Manager}
}

func base() cgroups.Resources { return cgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true} }

func TestSystemdDriverSetsUnitProperties(t *testing.T) {
	tr := newTree(t, DriverSystemd, "/")
	p := tr.paths
	tr.set(t, p.Kubepods.Dir, "cpuset.cpus", "0-3")
	tr.set(t, p.Burstable.Dir, "cpuset.cpus", "0-3")
	fake := &fakeSystemd{}
	e, _, m := newTestEnforcer(t, tr, systemdWriter(fake))
	a := clamp(3, 3, 6*gib)
	a.Limits.PidsMax = 1000
	a.Limits.HugeTLB = map[int64]int64{2 << 20: 512 << 20}
	if err := e.Apply(context.Background(), a, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	mem, pids := base(), base()
	mem.Memory = 6 * gib
	n := int64(1000)
	pids.PidsLimit = &n
	weight, cpus := base(), base()
	weight.CpuWeight = 118
	cpus.CpusetCpus = "0-2"
	want := []unitCall{
		{"kubepods.slice", "-.slice", true, p.Kubepods.Dir, mem},
		{"kubepods.slice", "-.slice", true, p.Kubepods.Dir, pids},
		{"kubepods.slice", "-.slice", true, p.Kubepods.Dir, weight},
		{"kubepods-burstable.slice", "kubepods.slice", true, p.Burstable.Dir, cpus},
		{"kubepods.slice", "-.slice", true, p.Kubepods.Dir, cpus},
	}
	got := fake.take()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("systemd requests:\n got %+v\nwant %+v", got, want)
	}
	for file, v := range map[string]string{"memory.max": "6442450944", "cpu.weight": "118", "pids.max": "1000",
		"hugetlb.2MB.max": "0", "cpuset.cpus": "0-2", "memory.swap.max": "0", "cpu.max": "max 100000"} {
		if got := tr.get(t, p.Kubepods.Dir, file); got != v {
			t.Errorf("kubepods.slice/%s = %q, want %q", file, got, v)
		}
	}
	if resizeErrors(m) != 0 {
		t.Error("errors counted")
	}
	// Idempotent through systemd too: no D-Bus call at all.
	if err := e.Apply(context.Background(), a, online(0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if got := fake.take(); len(got) != 0 {
		t.Errorf("second apply made %d systemd requests", len(got))
	}
}

func TestSystemdCustomCgroupRootUnits(t *testing.T) {
	tr := newTree(t, DriverSystemd, "/node")
	fake := &fakeSystemd{}
	e, _, _ := newTestEnforcer(t, tr, systemdWriter(fake))
	a := Request{Kind: KindClamp, Generation: 1, Limits: decide.CgroupLimits{MemoryMax: 6 * gib}}
	if err := e.Apply(context.Background(), a, online(0, 1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	got := fake.take()
	if len(got) != 1 || got[0].unit != "node-kubepods.slice" || got[0].parent != "node.slice" ||
		!strings.HasSuffix(got[0].dir, "/node.slice/node-kubepods.slice") {
		t.Errorf("requests %+v", got)
	}
}

// TestSystemdFailureStillWritesTheFile: when the D-Bus call fails, the
// limit is written to the file directly (protection first) and the change
// reports that systemd may restore the old value.
func TestSystemdFailureStillWritesTheFile(t *testing.T) {
	tr := newTree(t, DriverSystemd, "/")
	fake := &fakeSystemd{fail: errors.New("unable to set unit properties: dbus: connection refused")}
	e, _, m := newTestEnforcer(t, tr, systemdWriter(fake))
	err := e.Apply(context.Background(), clamp(1, 3, 6*gib), online(0, 1, 2, 3))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v", err)
	}
	if got := tr.get(t, tr.paths.Kubepods.Dir, "memory.max"); got != "6442450944" {
		t.Errorf("memory.max = %q: the fallback did not write it", got)
	}
	f := fileChange(t, e.Status().Last, "kubepods.slice/memory.max")
	if !f.Written || !strings.Contains(f.Note, "daemon-reload") {
		t.Errorf("record %+v", f)
	}
	if e.Status().Last.Result != ResultFailed || resizeErrors(m) != 1 {
		t.Errorf("result %s, errors %v", e.Status().Last.Result, resizeErrors(m))
	}
}

// TestResourcesCarryOneLimit: every request to opencontainers/cgroups
// holds the one limit and the kubelet's skip flags, nothing else (no swap,
// no quota, no devices, no freezer, no unified map).
func TestResourcesCarryOneLimit(t *testing.T) {
	n := int64(77)
	for _, tc := range []struct {
		op   op
		want func(*cgroups.Resources)
	}{
		{op{kind: kindMemory, num: 5}, func(r *cgroups.Resources) { r.Memory = 5 }},
		{op{kind: kindPids, num: 77}, func(r *cgroups.Resources) { r.PidsLimit = &n }},
		{op{kind: kindCPUWeight, num: 9}, func(r *cgroups.Resources) { r.CpuWeight = 9 }},
		{op{kind: kindCpuset, cpus: topology.CPUSet{0, 1, 2, 5}}, func(r *cgroups.Resources) { r.CpusetCpus = "0-2,5" }},
	} {
		want := base()
		tc.want(&want)
		if got := libResources(&tc.op); !reflect.DeepEqual(*got, want) {
			t.Errorf("kind %d: %+v, want %+v", tc.op.kind, *got, want)
		}
	}
}

// TestSystemdManagerBuildsOffline: the real manager the systemd driver
// uses is built from the kubelet's unit naming without touching D-Bus
// (it connects on the first Set).
func TestSystemdManagerBuildsOffline(t *testing.T) {
	tr := newTree(t, DriverSystemd, "/")
	g := tr.paths.Burstable
	m, err := systemdManager(&cgroups.Cgroup{Name: g.Unit, Parent: g.Parent, Systemd: true, Resources: &cgroups.Resources{}}, g.Dir)
	if err != nil {
		t.Fatal(err)
	}
	um, ok := m.(*systemd.UnifiedManager)
	if !ok {
		t.Fatalf("manager %T, want *systemd.UnifiedManager", m)
	}
	if um.Path("") != g.Dir {
		t.Errorf("manager at %q, want %s", um.Path(""), g.Dir)
	}
	w := newWriter(DriverSystemd).(*libWriter)
	if !w.systemd || reflect.ValueOf(w.manager).Pointer() != reflect.ValueOf(managerFactory(systemdManager)).Pointer() {
		t.Error("the systemd driver does not use the systemd manager")
	}
	if w := newWriter(DriverCgroupfs).(*libWriter); w.systemd {
		t.Error("the cgroupfs driver goes through systemd")
	}
}
