package cgroup

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/node-resized/node-resized/decide"
)

// Current reads the kubepods limits as they stand: memory.max and
// cpu.weight, the two the kubelet derives from the machine's capacity. The
// agent's first pass compares them with what the kubelet would write for
// the hardware now (decide.EnforcedCapacity): limits written for a larger
// machine mean it shrank while the daemon was not running.
//
// A limit that is absent, "max" (nothing enforced) or out of range is
// left zero, unknown; so is everything on a host where nothing is enforced
// (cgroup v1) or while kubepods does not exist. An error is returned only
// for a file that exists and cannot be read or parsed, with what could be
// read beside it.
func (e *Enforcer) Current() (decide.CgroupLimits, error) {
	var l decide.CgroupLimits
	if e.unsupported != "" || !isDir(e.paths.Kubepods.Dir) {
		return l, nil
	}
	dir := e.paths.Kubepods.Dir
	var errs []error
	read := func(file string) (int64, bool) {
		path := filepath.Join(dir, file)
		s, err := readValue(path)
		if errNotExist(err) {
			return 0, false
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", path, err))
			return 0, false
		}
		v, err := parseMax(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return 0, false
		}
		return v, v != math.MaxInt64 && v > 0
	}
	if v, ok := read("memory.max"); ok {
		l.MemoryMax = v
	}
	if v, ok := read("cpu.weight"); ok && v <= int64(decide.MaxWeight) {
		l.CPUWeight = uint64(v)
	}
	if len(errs) > 0 {
		return l, fmt.Errorf("read the kubepods limits: %w", errors.Join(errs...))
	}
	return l, nil
}
