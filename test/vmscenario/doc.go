// Package vmscenario runs the real node-resized daemon inside a QEMU guest
// (package test/vm) whose CPUs, DIMMs and virtio-mem memory are hot-plugged,
// and checks what it does to the kubepods cgroups by reading the cgroup
// files in the guest.
//
// One guest is booted for all scenarios; they run in this order, each
// starting from the machine the previous one left:
//
//  1. cpu-hot-add: a CPU is plugged over QMP; the daemon onlines it
//     (--auto-online), counts it and adds it to kubepods' cpuset.cpus and
//     cpu.weight.
//  2. virtio-mem: the guest's virtio-mem device (1 GiB on node 0, nothing
//     plugged at boot, QEMU's 2 MiB block size: Sub Block Mode) is asked
//     for 512 MiB, then 256 MiB, 192 MiB and 0 over QMP; the driver adds
//     the blocks offline, the daemon onlines them movable, MemTotal and
//     /proc/iomem follow; on the way down the driver offlines and removes
//     the blocks itself (192 MiB leaves a block partly plugged: no
//     uevent). Each step's times and memory block uevents are logged.
//  3. hotplug-cpu: cpu-hot-add's CPU is taken offline and onlined again through
//     package hotplug (testdata/hotplugtool, the writes the daemon's
//     release will do); kubepods follows; cpu0, without an online file, is
//     refused unwritten.
//  4. hotplug-dimm: a DIMM is plugged (the daemon onlines it); a page on
//     it is pinned in a pipe, so that its block's offline retries for
//     ever, and package hotplug cuts that offline at its 2 s bound (the
//     kernel answers EINTR and leaves the block online); then every block
//     is offlined, onlined movable and offlined through the package, and
//     the unplug ends in DEVICE_DELETED.
//  5. dimm-hot-add: a 256 MiB DIMM; the daemon onlines its blocks movable
//     and grows kubepods' memory.max.
//  6. dimm-hot-unplug: the DIMM is unplugged; the daemon clamps memory.max
//     and reports the uevent-to-clamp latency and the OOM kill counts.
//  7. uevent-overflow: the daemon is started again with --uevent-buffer
//     1024 and held (SIGSTOP) while a 1 GiB DIMM is plugged and the
//     kernel onlines its 8 blocks; their uevents overflow the socket.
//     Running again, the daemon counts the loss (the overflow metric,
//     lostEvents), rescans the whole machine and has the DIMM in its
//     model and in kubepods' memory.max; then it runs as before and the
//     DIMM is unplugged.
//  8. oom-in-kubepods: another DIMM is plugged; a process in a burstable
//     pod cgroup holds more memory than kubepods may hold once the DIMM is
//     gone, and the DIMM is unplugged; the clamp OOM-kills it inside
//     kubepods while the guest's own processes live on.
//  9. cpu-hot-unplug: the CPU is unplugged; it leaves kubepods' cpuset.
//     This comes last because QEMU 7.2 under TCG crashes on any hotplug
//     operation after a CPU unplug.
//
// The guest's kubepods hierarchy is laid out by the setup script as the
// kubelet lays it out with the cgroupfs driver; no kubelet runs. The daemon
// runs standalone (no API server). The machine, the setup script, the
// daemon's flags and the helpers that read the guest and the daemon are
// package test/vm/guesttest's, which test/vmarch uses too.
//
// Run it with make e2e-vm, or after test/vm/fetch:
//
//	cd test && go test -count=1 -v -timeout 30m ./vmscenario/
//
// A scenario runs with those before it; virtio-mem's alone:
//
//	go test -count=1 -v -run 'TestScenarios/^(daemon-up|cpu-hot-add|virtio-mem)$' ./vmscenario/
//
// package hotplug's:
//
//	go test -count=1 -v -run 'TestScenarios/^(daemon-up|cpu-hot-add|virtio-mem|hotplug-cpu|hotplug-dimm)$' ./vmscenario/
//
// The binaries are built from this tree (stripped, CGO_ENABLED=0);
// NODE_RESIZED_VM_BINDIR names a folder with node-resized and
// node-resizectl to test instead, e.g. release builds.
// NODE_RESIZED_VM_ACCEL and NODE_RESIZED_VM_FETCH mean what they mean for
// test/vm.
package vmscenario
