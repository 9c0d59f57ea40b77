//go:build linux && syntheticcgroups

package cgroup

import "github.com/opencontainers/cgroups"

// Built with the tag syntheticcgroups (end-to-end tests only; no release
// build has it), the daemon takes a synthetic cgroup v2 tree for
// --cgroup-root, as it takes a synthetic sysfs tree for --sysfs-root: the
// root is judged by its layout rather than its filesystem type, and
// opencontainers/cgroups writes files that are not on a cgroup filesystem
// (cgroups.TestMode). A host whose controllers are bound to cgroup v1 has
// no cgroup v2 hierarchy with memory and cpu to test on.
func init() {
	cgroups.TestMode = true
	syntheticTrees = true
}
