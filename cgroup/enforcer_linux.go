//go:build linux

package cgroup

import (
	"fmt"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	"github.com/opencontainers/cgroups/systemd"
)

// cgroupManager is the one method of an opencontainers/cgroups manager the
// Enforcer uses: the smallest seam over fs2's and systemd's managers, and
// what tests fake.
type cgroupManager interface {
	Set(r *cgroups.Resources) error
}

var (
	_ cgroupManager = (*fs2.Manager)(nil)
	_ cgroupManager = (*systemd.UnifiedManager)(nil)
)

// managerFactory returns the manager of the cgroup at dir. For the systemd
// driver c names the unit (Name, Parent) as the kubelet does.
type managerFactory func(c *cgroups.Cgroup, dir string) (cgroupManager, error)

func fs2Manager(c *cgroups.Cgroup, dir string) (cgroupManager, error) {
	return fs2.NewManager(c, dir)
}

// systemdManager returns libcontainer's systemd manager for cgroup v2, as
// the kubelet's cgroup manager makes it. It connects to systemd's D-Bus
// API on its first Set, not here.
func systemdManager(c *cgroups.Cgroup, dir string) (cgroupManager, error) {
	return systemd.NewUnifiedManager(c, dir)
}

// libWriter writes one limit at a time through opencontainers/cgroups.
type libWriter struct {
	systemd bool
	// manager is the driver's manager factory; direct writes the file
	// alone (fs2), for when systemd fails.
	manager, direct managerFactory
}

var _ writer = (*libWriter)(nil)

func newWriter(driver string) writer {
	w := &libWriter{systemd: driver == DriverSystemd, manager: fs2Manager, direct: fs2Manager}
	if w.systemd {
		w.manager = systemdManager
	}
	return w
}

// resources is the request for one op: that limit alone, with devices and
// the freezer skipped as the kubelet's own requests skip them, so that
// nothing else of the cgroup is touched (no swap, no cpu.max, no device
// filter, no freeze).
func libResources(o *op) *cgroups.Resources {
	r := &cgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	switch o.kind {
	case kindMemory:
		r.Memory = o.num
	case kindPids:
		n := o.num
		r.PidsLimit = &n
	case kindCPUWeight:
		r.CpuWeight = uint64(o.num)
	case kindCpuset:
		r.CpusetCpus = o.cpus.String()
	}
	return r
}

func (w *libWriter) set(o *op) error {
	r := libResources(o)
	c := &cgroups.Cgroup{Resources: r}
	if w.systemd {
		c.Name, c.Parent, c.Systemd = o.g.Unit, o.g.Parent, true
	} else {
		c.Path = o.g.Path
	}
	err := setWith(w.manager, c, o.g.Dir, r)
	if err == nil || !w.systemd {
		return err
	}
	// Protection first: the limit must hold now even if systemd may put
	// the old one back later.
	d := &cgroups.Cgroup{Path: o.g.Path, Resources: r}
	if derr := setWith(w.direct, d, o.g.Dir, r); derr != nil {
		return fmt.Errorf("%w; writing the file directly failed too: %w", err, derr)
	}
	return &fallbackError{err: err}
}

func setWith(f managerFactory, c *cgroups.Cgroup, dir string, r *cgroups.Resources) error {
	m, err := f(c, dir)
	if err != nil {
		return err
	}
	return m.Set(r)
}
