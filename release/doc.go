// Package release chooses what a planned release takes offline and what it
// gives back, and says which devices are then safe to unplug.
//
// When a Node's configured capacity is lowered below the hardware, the
// agent evicts the pods that no longer fit and then takes the surplus
// offline, so that a restarted kubelet finds the smaller machine itself.
// [Choose] picks the CPUs and memory blocks to take offline, in the order
// to offline them one at a time; [GiveBack] picks which of those released
// before to bring back online when the configured capacity rises or goes
// away; [Unpluggable] says, per ACPI memory device, virtio-mem device and
// CPU, what the hypervisor may now unplug.
//
// The package is pure: it reads no file, keeps no clock and changes
// nothing. Its input is a [topology.Snapshot], the on-demand
// [topology.Hotplug] reads, the kubelet's reserved and exclusive CPUs and
// the agent's record of what it released; others write to sysfs. Its
// functions are safe for concurrent use and never modify their input.
//
// # What may go, and in which order
//
// CPUs: never a reserved CPU, never one without an online file, never one
// that failed before (Input.Skip). Among the rest, CPUs that hold no
// exclusive assignment go first: whole cores (every online SMT sibling
// together) with the highest CPU ids first, since hot-added CPUs take the
// highest ids; then single CPUs of cores that cannot go whole; then, when
// the count is odd, one CPU of a whole core. Only when those are not
// enough do exclusive CPUs go, and then whole pods: the pod that covers
// what is missing with the fewest CPUs, else the largest, until it is
// covered. Those pods are named in Plan.EvictFirst and their CPUs come
// last, each step naming the pod to evict before it.
//
// Memory: only online blocks in zone Movable, not marked not removable
// and not skipped; never a block in a kernel zone (Normal, DMA32, ...),
// which holds unmovable allocations. The plan takes ceil(need / block
// size) blocks, need = MemTotal − TargetMemory, so MemTotal ends at the
// target or up to one block below it (Plan.MemTotal). In order:
//
//  1. Whole ACPI memory devices (DIMMs) whose remaining online blocks all
//     fit the need: a device partly offline already first (one more block
//     frees a whole device), then the largest, then the highest address.
//     These are what the hypervisor can unplug as a unit.
//  2. virtio-mem blocks, highest block first: when the host lowers the
//     device's requested size, the virtio-mem driver gives back offline
//     blocks before online ones, the highest first, so the blocks taken
//     offline here are exactly the ones it returns. They come after whole
//     DIMMs and before partial ones because each block is a unit the host
//     can take back, while a DIMM's block is of no use to it until the
//     whole DIMM is offline.
//  3. Blocks of DIMMs that cannot go whole: the DIMM closest to whole
//     first, its highest block first, so a later release can finish it.
//  4. Other Movable blocks (boot memory given to ZONE_MOVABLE with
//     movablecore=, or memory of a device that could not be identified):
//     they lower MemTotal but no hypervisor can take them; highest first.
//
// A plan assumes each block takes block-size bytes out of MemTotal; the
// executor offlines one block at a time, re-reads the machine and calls
// Choose again, with a block that would not go in Input.Skip, so the plan
// corrects itself as it goes.
//
// GiveBack brings back only what Input.Released names, and in the reverse
// of that order (so what the hypervisor could unplug stays unpluggable
// longest); a released CPU or block that is no longer present was taken
// by the hypervisor, which is the point of the release and not a loss.
package release
