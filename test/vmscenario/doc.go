// Package vmscenario runs the real node-resized daemon inside a QEMU guest
// (package test/vm) whose CPUs and DIMMs are hot-plugged, and checks what it
// does to the kubepods cgroups by reading the cgroup files in the guest.
//
// One guest is booted for all scenarios; they run in this order, each
// starting from the machine the previous one left:
//
//  1. cpu-hot-add: a CPU is plugged over QMP; the daemon onlines it
//     (--auto-online), counts it and adds it to kubepods' cpuset.cpus and
//     cpu.weight.
//  2. dimm-hot-add: a 256 MiB DIMM; the daemon onlines its blocks movable
//     and grows kubepods' memory.max.
//  3. dimm-hot-unplug: the DIMM is unplugged; the daemon clamps memory.max
//     and reports the uevent-to-clamp latency and the OOM kill counts.
//  4. oom-in-kubepods: another DIMM is plugged; a process in a burstable
//     pod cgroup holds more memory than kubepods may hold once the DIMM is
//     gone, and the DIMM is unplugged; the clamp OOM-kills it inside
//     kubepods while the guest's own processes live on.
//  5. cpu-hot-unplug: the CPU is unplugged; it leaves kubepods' cpuset.
//     This comes last because QEMU 7.2 under TCG crashes on any hotplug
//     operation after a CPU unplug.
//
// The guest's kubepods hierarchy is laid out by the setup script as the
// kubelet lays it out with the cgroupfs driver; no kubelet runs. The daemon
// runs standalone (no API server).
//
// Run it with make e2e-vm, or after test/vm/fetch:
//
//	cd test && go test -count=1 -v -timeout 30m ./vmscenario/
//
// The binaries are built from this tree (stripped, CGO_ENABLED=0);
// NODE_RESIZED_VM_BINDIR names a folder with node-resized and
// node-resizectl to test instead, e.g. release builds.
// NODE_RESIZED_VM_ACCEL and NODE_RESIZED_VM_FETCH mean what they mean for
// test/vm.
package vmscenario
