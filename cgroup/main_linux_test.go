//go:build linux

package cgroup

import (
	"os"
	"testing"

	"github.com/opencontainers/cgroups"
)

func TestMain(m *testing.M) {
	// opencontainers/cgroups refuses files that are not on a cgroup
	// filesystem; TestMode lets its fs2 writer work on the synthetic trees
	// in t.TempDir() (it then opens files with O_CREAT|O_TRUNC, as a fake
	// cgroupfs would need). Nothing here touches the host's /sys/fs/cgroup.
	cgroups.TestMode = true
	os.Exit(m.Run())
}
