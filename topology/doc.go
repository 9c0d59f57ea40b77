// Package topology models the machine from sysfs and procfs: the CPUs that
// are online, offline, present and possible, the NUMA nodes with their online
// CPUs, memory and hugepage pools, the memory blocks with their state and
// zone, and the node's physical capacity computed exactly as the kubelet
// computes it through cAdvisor.
//
// Its one job is to read the truth from the filesystem. It never takes
// anything from a uevent but the name of the object to look at: a caller
// that hears about hotplug events passes the devices they name to
// [FS.Update], which re-reads those objects and the totals capacity
// depends on, and reads the whole machine ([FS.Snapshot]) whenever what it
// finds does not square with the previous model. [Diff] names what
// changed between two snapshots, and [IsLoss] whether an event that takes
// a device away takes capacity from a model.
//
// An [FS] is rooted at a sysfs and a procfs mount point, so the same code
// reads /sys and /proc on a node and synthetic trees in tests. Reads skip
// stat (sysfs reports a size of 4096 for every attribute), cap what they
// read, reuse their scratch buffers, and keep the files open between
// rebuilds; a large machine's blocks and nodes are read on a few
// goroutines, so that a rebuild of a 1024-CPU machine with thousands of
// memory blocks stays cheap.
//
// Objects that vanish while a rebuild runs (a CPU or memory block unplugged
// between the directory scan and the read of its attributes) are treated as
// absent: the hotplug that removed them raises its own uevent, and the next
// rebuild sees a consistent tree.
package topology
