package cgroup

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// PodWorkingSet returns the memory working set of a pod, in bytes, read
// from the pod's own cgroup (see Paths.Pod) as cAdvisor computes it for the
// kubelet's eviction manager: usage minus inactive file pages, never below
// zero. On cgroup v2 usage is memory.current and the inactive file pages are
// inactive_file in memory.stat; on cgroup v1 they are memory.usage_in_bytes
// and total_inactive_file. qos is "guaranteed", "burstable" or "besteffort"
// in any case. An error that wraps fs.ErrNotExist means the pod has no
// cgroup (it is gone, or not started yet). It matches evict.WorkingSetFunc.
func (e *Enforcer) PodWorkingSet(podUID, qos string) (int64, error) {
	g, err := e.paths.Pod(podUID, qos)
	if err != nil {
		return 0, err
	}
	if e.mode == ModeUnified {
		return readWorkingSet(g.Dir, "memory.current", "inactive_file")
	}
	return readWorkingSet(filepath.Join(e.paths.Root, "memory", g.Path), "memory.usage_in_bytes", "total_inactive_file")
}

// readWorkingSet computes usage − inactive file pages for the cgroup at
// dir.
func readWorkingSet(dir, usageFile, inactiveKey string) (int64, error) {
	s, err := readValue(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, fmt.Errorf("working set: %w", err)
	}
	usage, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("working set: parse %s: %w", filepath.Join(dir, usageFile), err)
	}
	inactive, _, err := readKey(filepath.Join(dir, "memory.stat"), inactiveKey)
	if err != nil {
		return 0, fmt.Errorf("working set: %w", err)
	}
	return workingSet(usage, inactive), nil
}

// workingSet is cAdvisor's arithmetic: usage − inactive file, floored at 0
// and capped at the int64 range.
func workingSet(usage, inactive uint64) int64 {
	if inactive >= usage {
		return 0
	}
	ws := usage - inactive
	if ws > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(ws)
}
