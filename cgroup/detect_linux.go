//go:build linux

package cgroup

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fsType is the filesystem type at path, 0 when it cannot be told.
func fsType(path string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return 0
	}
	return int64(st.Type)
}

// detectMagic judges a root by its filesystem type, as runc and the
// kubelet do (cgroups.IsCgroup2UnifiedMode): cgroup2 at the root is
// unified; a tmpfs is hybrid when a cgroup2 filesystem is mounted at
// <root>/unified, legacy when v1 controllers are mounted in it.
func detectMagic(root string) (Mode, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return "", fmt.Errorf("cgroup root: statfs %s: %w", root, err)
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return ModeUnified, nil
	case unix.CGROUP_SUPER_MAGIC:
		return ModeLegacy, nil
	case unix.TMPFS_MAGIC:
		if fsType(filepath.Join(root, "unified")) == unix.CGROUP2_SUPER_MAGIC {
			return ModeHybrid, nil
		}
		for _, c := range v1Controllers {
			if fsType(filepath.Join(root, c)) == unix.CGROUP_SUPER_MAGIC {
				return ModeLegacy, nil
			}
		}
	}
	return "", fmt.Errorf("cgroup root %s is not a cgroup filesystem (statfs type %#x)", root, st.Type)
}
