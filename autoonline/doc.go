// Package autoonline brings hot-added CPUs and memory blocks online, for
// nodes whose distribution ships no udev rules that do it: a hot-added CPU
// is onlined, a hot-added memory block is onlined movable, so that it can be
// unplugged again later.
//
// Only what was added since the previous model is touched: a CPU or block an
// operator took offline on purpose stays offline. The writes make the kernel
// send online uevents, so the detection loop sees the result as its own
// change.
package autoonline
