// Package hotplug writes the kernel's CPU and memory-block hotplug files:
// every online and offline node-resized does goes through it, whoever
// needs it.
//
// Today that is the auto-onliner (AutoOnliner, --auto-online), for nodes
// whose distribution ships no udev rules that do it: a hot-added CPU is
// onlined, a hot-added memory block is onlined movable, so that it can be
// unplugged again later. Only what was added since the previous model is
// touched: a CPU or block an operator took offline on purpose stays
// offline. The writes make the kernel send online uevents, so the detection
// loop sees the result as its own change.
package hotplug
