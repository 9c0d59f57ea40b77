// Package monitor is the detection loop: it turns kernel uevents, a cheap
// MemTotal watch, a filesystem watch and a periodic full resync into an
// up-to-date machine model.
//
// Every input feeds one serial loop (loop.go): a select over its steps, each
// of which takes an input into the pending batch. An input that comes after
// a quiet window without any, or a quarter of one while no burst is under
// way, is rebuilt at once (the leading edge), and so is every loss: a uevent
// that takes away a CPU or memory block the model holds online, a MemTotal
// or a kubelet root filesystem that shrank, lost events. A single event,
// such as a CPU going offline, is in the model within the rebuild's time.
// The inputs that follow the leading edge closer than that (a DIMM's
// hundreds of memory blocks, each added and then onlined) are a burst,
// coalesced into one trailing rebuild, which runs once no input has come
// for the quiet window, and at the latest MaxWait after its first input; so
// a burst at the kernel's pace is two changes, a leading and a trailing
// one, while each loss in it is a change of its own. A rebuild takes along
// the inputs that already wait in the queue. A resync runs at once.
//
// The model is always re-read from sysfs and procfs (rebuild.go); a uevent
// only says that something may have changed, so a forged or stale message
// cannot change what the daemon believes. A batch of uevents alone re-reads
// only the devices they named and the totals (topology.FS.Update, which
// reads the whole machine itself when the rest does not add up), and so do
// a SEQNUM gap and the filesystem watch, which name no device; lost
// events, the MemTotal watch and resyncs re-read the whole machine. Every
// Config.VerifyEvery-th incremental rebuild and every periodic resync
// compare the incremental model with a full rebuild of the same moment
// (verify.go): a disagreement is a bug, counted, logged, and the full model
// installed. Each change says which it was (Change.Rebuild). A rebuild that
// fails is retried with a doubling backoff. Each change records the kernel
// SEQNUMs that caused it and the time from the first event's arrival to the
// new model.
//
// The filesystem watch (fswatch.go) follows the size of the filesystem that
// holds the kubelet's root directory, the ephemeral-storage capacity, which
// grows online with no uevent of its own: one statfs every Config.FSPoll,
// and every Config.MemPoll for Config.FSWatchAfterResize after a block
// device's change uevent with RESIZE=1 (a disk resized: its partition and
// filesystem are grown next). Block uevents do nothing else: they open no
// batch and are not the model's uevents.
//
// The loop's time comes from Config.Clock (the real clock by default), so
// tests step a fake one; uevents carry their arrival time as the listener
// stamped it, on the same clock.
package monitor
