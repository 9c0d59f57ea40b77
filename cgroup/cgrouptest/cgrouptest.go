// Package cgrouptest builds synthetic cgroup v2 trees for the tests of
// packages that drive a cgroup.Enforcer, without a cgroup filesystem.
package cgrouptest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/opencontainers/cgroups"

	"github.com/node-resized/node-resized/decide"
)

// AllowSyntheticTrees lets opencontainers/cgroups write to files that are
// not on a cgroup filesystem (cgroups.TestMode), as the trees here are.
// Call it from TestMain: it is a process-wide setting.
func AllowSyntheticTrees() { cgroups.TestMode = true }

// Kubepods writes a cgroup v2 hierarchy with the cgroupfs driver's
// kubepods under root, holding the limits l (memory.max, cpu.weight) as
// a kubelet wrote them, and returns kubepods' directory. pids.max is "max"
// and cpuset.cpus empty (it inherits the online CPUs).
func Kubepods(t testing.TB, root string, l decide.CgroupLimits) string {
	t.Helper()
	const controllers = "cpuset cpu io memory hugetlb pids"
	write := func(dir string, files map[string]string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(root, map[string]string{"cgroup.controllers": controllers, "cgroup.subtree_control": controllers})
	kubepods := filepath.Join(root, "kubepods")
	write(kubepods, map[string]string{
		"cgroup.controllers": controllers, "cgroup.subtree_control": controllers, "cgroup.procs": "", "cgroup.freeze": "0",
		"memory.max": strconv.FormatInt(l.MemoryMax, 10), "memory.swap.max": "0", "memory.events": "oom_kill 0",
		"cpu.weight": strconv.FormatUint(l.CPUWeight, 10), "cpu.max": "max 100000", "pids.max": "max", "cpuset.cpus": "",
	})
	return kubepods
}
