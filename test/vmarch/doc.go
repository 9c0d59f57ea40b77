// Package vmarch runs the real node-resized daemon, cross-built, in a QEMU
// guest of another architecture (package test/vm): ppc64le, a pseries
// machine, whose hotplug is nothing like the amd64 guest's ACPI. The
// hypervisor raises a hotplug interrupt; the guest kernel's DLPAR code reads
// the new device tree nodes over RTAS and attaches the CPUs and memory
// itself, and itself brings them online:
//
//   - a core's CPU is registered at boot with every possible CPU, so its
//     hot-add raises no add uevent, only "online" (and "add" of its NUMA
//     node when it is the node's first CPU);
//   - a DIMM is cut into 256 MiB LMBs, each added and onlined by the kernel
//     (an add and an online uevent per block), whatever
//     memhp_default_state says;
//   - an unplug is the kernel's own offline (and remove) of each LMB or
//     CPU, and a refusal is QEMU's DEVICE_UNPLUG_GUEST_ERROR.
//
// One guest, with test/vmscenario's machine, kubepods layout and daemon
// flags (--auto-online among them), which both take from package
// test/vm/guesttest with the helpers that read the guest and the daemon,
// is booted and walked through these steps in order, each starting from
// the machine the one before left:
//
//  1. daemon-up: the daemon answers and models the boot machine (one CPU);
//  2. cpu-hot-add: a core plugged into NUMA node 1 (no memory, no CPU at
//     boot);
//  3. dimm-hot-add: a 512 MiB DIMM on node 1, two blocks;
//  4. dimm-unplug: the DIMM taken back, its blocks offlined and removed by
//     the kernel;
//  5. cpu-unplug: the core taken back. Last: after a CPU unplug QEMU 7.2
//     under TCG fails the next hotplug operation.
//
// Each step requires the kernel's exact uevents of the cpu, memory and
// node subsystems, in order; the daemon to have taken exactly those, lost
// none, and made its model changes of the step's uevents alone; its
// capacity and NUMA nodes to be what cAdvisor's own code
// (testdata/cadvisorprobe, run in the guest) computes there, the kubelet's
// view; kubepods' cpuset.cpus, cpu.weight and memory.max to follow; and the
// auto-onliner, which races the kernel's own onlining, to raise no error.
// The whole run requires no error in the daemon's log. The assertions are
// about order and counts, never wall-clock bounds: times are logged.
//
// Run it with make e2e-vm-ppc64le, or after test/vm/fetch ppc64le:
//
//	cd test && go test -count=1 -v ./vmarch/
//
// NODE_RESIZED_VM_ARCH names the guest's architecture (default ppc64le, the
// only one for now); NODE_RESIZED_VM_ACCEL and NODE_RESIZED_VM_FETCH mean
// what they mean for test/vm. Without QEMU for the architecture the test
// skips, saying so; without its kernel it fails.
package vmarch
