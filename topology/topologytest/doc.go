// Package topologytest builds synthetic sysfs and procfs trees for tests.
//
// A [Machine] describes a machine: its CPUs, NUMA nodes, memory blocks,
// hugepage pools and meminfo totals. [Machine.Write] lays it out under a
// directory the way the kernel lays out /sys and /proc, so that code rooted
// at a sysfs and a procfs path (topology.NewFS, cAdvisor's SysFs) reads it
// as it would read a real node. [Machine.WriteTree] does the same and
// returns a [Tree] whose methods change the written tree as the kernel
// would on a hotplug: a CPU going offline, a memory block onlined, a DIMM's
// blocks added or removed, MemTotal shrinking under a balloon.
//
// The package does not import topology, whose own tests use it.
package topologytest
