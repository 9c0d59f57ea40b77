// Package vm boots a throwaway QEMU guest whose CPUs and memory can be
// hot-plugged, so that node-resized's tests can exercise real kernel
// hotplug, real uevents and a real cgroup v2 hierarchy without touching the
// host.
//
// The guest is a Debian kernel unpacked by the script test/vm/fetch (never
// installed on the host) and an initramfs built by [BuildInitramfs]: a
// static busybox, the virtio modules the kernel needs, an /init that mounts
// proc, sysfs, devtmpfs and cgroup2, and a command agent on a
// virtio-serial port. [Boot] starts qemu-system-x86_64 under TCG with a
// machine that has room to grow (spare CPU sockets, DIMM slots, two NUMA
// nodes, and virtio-mem devices when [Config.VirtioMem] asks for them), or
// with [Config.Arch] [PPC64LE] qemu-system-ppc64's pseries machine (spare
// cores, DIMM slots, two NUMA nodes), whose kernel and busybox test/vm/fetch
// takes from Debian's ppc64el packages;
// [VM.Exec] runs shell commands in the guest; the hotplug and virtio-mem
// methods drive QEMU through QMP.
//
// The package uses only the standard library. It runs QEMU as a child in
// its own process group and kills that group on [VM.Close], so a failed
// test leaves nothing running.
package vm
