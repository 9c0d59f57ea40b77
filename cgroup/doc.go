// Package cgroup finds the kubelet's kubepods cgroups and changes their
// limits.
//
// # What it writes
//
// The kubelet writes the kubepods cgroup once, when it starts, from the
// machine it saw then (memory.max, cpu.weight, pids.max, hugetlb.<size>.max;
// see decide.KubepodsLimits). Its QoS loop then sets the hugetlb limits
// unbounded, at once and every minute (kubepods is also its Guaranteed
// cgroup), so those are the kubelet's alone: the Enforcer never writes them. When CPUs or memory go away under a running
// kubelet, the pods keep limits that no longer fit the machine; the
// [Enforcer] writes the limits the kubelet would write for the new capacity
// (a [Request]: the limits of the decision core's ClampCgroups or
// GrowCgroups, with the online CPUs beside it), on the kubepods cgroup
// itself, so that the kernel reclaims and, at worst, OOM-kills inside
// kubepods and never outside it. A limit the request leaves at zero is not
// touched.
//
// The CPU set is handled apart, because the kubelet never writes one: on
// cgroup v2 the kubepods, burstable and besteffort cgroups normally have an
// empty cpuset.cpus, which means "inherit", and their effective CPUs follow
// the online CPUs by themselves, a hot-added CPU id included. The Enforcer
// leaves an inheriting cgroup alone (writing a list would pin it). Only a
// cgroup that carries its own list (written by an operator, a v1-era tool,
// or systemd's AllowedCPUs=) is changed: kubepods gets exactly the online
// CPUs (on a grow this is what adds a CPU id that did not exist when the
// list was written; on a clamp it drops the CPUs that went away); a child
// whose list equals kubepods' old list follows kubepods; a child with a
// narrower list of its own only loses the CPUs that went offline. Cgroup v2
// does not require a child's list to be a subset of its parent's (only the
// effective sets nest), but the Enforcer keeps the safe order anyway:
// children before the parent when CPUs are removed, the parent first when
// CPUs are only added.
//
// Every write is idempotent: the current value is read first (with the
// kernel's rounding of memory.max to the page size), nothing is written
// when it already holds the target, and every write is read back. Each limit is written on its own, in a fixed
// order (memory.max first), so that one failure neither hides nor stops the
// others.
//
// # How it writes
//
// Writes go through github.com/opencontainers/cgroups, as the kubelet's
// own: with the cgroupfs driver an fs2 manager writes the file; with the
// systemd driver the systemd unified manager first sets the unit property
// over D-Bus (MemoryMax=, CPUWeight=, TasksMax=, AllowedCPUs=; runtime
// properties, as the kubelet sets them) and then writes the file, so that
// systemd does not put the old value back on its next daemon-reload.
// Every request carries only the one limit being
// changed, with devices and the freezer skipped (as the kubelet does), so
// that no other setting of kubepods is reset. When the D-Bus call fails the
// file is still written directly (protection first), and the change reports
// that systemd may restore the old value.
//
// # Restore
//
// [Enforcer.Restore] is node-resized --uninstall's write: the limits the
// kubelet writes for the machine as it is now, through the same driver, so
// that no limit of node-resized's own is left behind (a configured
// capacity's clamp is lifted; a clamp for lost hardware is what the kubelet
// writes for that hardware and stays).
//
// # Cgroup v1
//
// Enforcement needs the unified cgroup v2 hierarchy. On a cgroup v1 or
// hybrid host [Detect] returns an error that wraps [ErrUnsupported]; the
// Enforcer is still built, reports why in its [Status], and its Apply
// records every action as skipped without error, so detection and
// reporting go on. Working sets are read on v1 as well.
//
// # Also here
//
// [Enforcer.PodWorkingSet] reads a pod's working set from its own cgroup as
// cAdvisor computes it, for the evictor. The kubelet's own files (its
// configuration, its CPU manager checkpoint) are read in package kubelet.
//
// The filesystem is a root path (normally /sys/fs/cgroup), so the same code
// runs on synthetic cgroup v2 trees in tests; the statfs check that the root
// is a cgroup filesystem can be skipped for such trees. A daemon built with
// the tag syntheticcgroups (the end-to-end tests' build) takes a synthetic
// tree for --cgroup-root.
package cgroup
