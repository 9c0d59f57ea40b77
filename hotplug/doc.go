// Package hotplug writes the kernel's CPU and memory-block hotplug files
// (cpuN/online, memoryN/state): every online and offline node-resized
// does goes through it, for the auto-onliner and for the planned release,
// which takes surplus CPUs and blocks offline so that the hypervisor can
// unplug them.
//
// The Writer does one write(2) per call, on a sysfs root (the same code
// writes /sys and a synthetic tree), and reports only what the write
// returned; the caller reads the state back.
//
// # Every write is bounded in time
//
// The kernel's memory-hotplug.rst warns that an offline may retry for a
// long time, or forever, and that a signal aborts it: offline_pages()
// returns -EINTR when a signal is pending. SA_RESTART restarts only the
// -ERESTART* codes, so -EINTR reaches user space; but os.File.Write
// retries EINTR, so the Writer calls write(2) itself (x/sys/unix). Each
// write runs on an OS thread of its own (runtime.LockOSThread); past its
// timeout, or when its context is done, that thread is sent SIGURG with
// tgkill(2) every 10ms until the write returns. SIGURG is the Go
// runtime's own preemption signal: its handler is always installed and
// does nothing harmful to a thread in a system call. An EINTR before the
// time is up (a profiler's SIGPROF) is a stray signal and the write is
// tried again.
//
// This is done in the process rather than in a child that is killed
// (re-executing the daemon's binary): no fork and no second Go runtime in
// a node whose memory may be short, nothing to find on disk in a
// distroless image, and the mechanism is testable in a unit test (a write
// to a full socket with SO_SNDTIMEO ends in EINTR on a signal exactly as
// an offline does). A write no signal can end (a CPU coming up waits
// uninterruptibly) is given up on after a grace and reported as still
// running; a killed child would have been left in the kernel the same way.
//
// # The auto-onliner
//
// AutoOnliner is for nodes whose distribution ships no udev rules that
// online hot-added devices (--auto-online): a hot-added CPU is onlined, a
// hot-added memory block is onlined movable, so that it can be unplugged
// again later. Only what was added since the previous model is touched: a
// CPU or block an operator took offline on purpose stays offline. The
// writes make the kernel send online uevents, so the detection loop sees
// the result as its own change.
package hotplug
