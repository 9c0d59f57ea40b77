package topology

import (
	"fmt"
	"path/filepath"
	"slices"
)

// HotplugCPU is what taking one logical CPU offline needs to know about it,
// beyond the Snapshot: whether it can be taken offline at all, and which
// CPUs share its core. [FS.HotplugCPUs] reads it on demand; a rebuild does
// not.
type HotplugCPU struct {
	ID int `json:"id"`
	// OnlineFile says whether cpuN/online exists. Only a CPU with one can
	// be taken offline: the kernel makes none for a CPU it cannot
	// offline (x86's boot CPU, cpu0).
	OnlineFile bool `json:"onlineFile"`
	// Siblings are the CPUs of its core, itself included:
	// topology/core_cpus_list, or thread_siblings_list on kernels older
	// than 5.3. The kernel lists only online CPUs there, and an offline
	// CPU has no topology directory: nil then, or when neither file
	// exists.
	Siblings CPUSet `json:"siblings,omitempty"`
}

// HotplugCPUs reads every cpuN directory of devices/system/cpu, sorted by
// id: whether it has an online file and its SMT siblings. A CPU that
// vanishes while it is read (hot-removed) is left out.
func (fs FS) HotplugCPUs() ([]HotplugCPU, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	r := getReader()
	defer putReader(r)

	var ids []int
	err := r.scan(r.at(fs.cpuDir, -1, ""), func(name []byte) {
		if id, ok := numberedName(name, "cpu"); ok && id <= MaxCPUID {
			ids = append(ids, id)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)

	cpus := make([]HotplugCPU, 0, len(ids))
	for _, id := range ids {
		c, ok, err := fs.readHotplugCPU(r, id)
		if err != nil {
			return nil, err
		}
		if ok {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// readHotplugCPU reads cpuN's online file and sibling list; ok is false
// when the directory is gone.
func (fs FS) readHotplugCPU(r *reader, id int) (c HotplugCPU, ok bool, err error) {
	c.ID = id
	dir := filepath.Join(fs.cpuDir, fmt.Sprintf("cpu%d", id))
	if _, c.OnlineFile, err = r.readOptional(cwd, r.at(dir, -1, "/online")); err != nil {
		return HotplugCPU{}, false, err
	}
	for _, name := range [...]string{"/topology/core_cpus_list", "/topology/thread_siblings_list"} {
		p := r.at(dir, -1, name)
		b, found, err := r.readOptional(cwd, p)
		if err != nil {
			return HotplugCPU{}, false, err
		}
		if !found {
			continue
		}
		if c.Siblings, err = parseCPUList(b); err != nil {
			return HotplugCPU{}, false, fmt.Errorf("parse %s: %w", p, err)
		}
		break
	}
	if !c.OnlineFile && c.Siblings == nil {
		// Nothing read: is the CPU still there?
		if there, err := r.exists(cwd, r.at(dir, -1, "")); err != nil || !there {
			return HotplugCPU{}, false, err
		}
	}
	return c, true, nil
}
