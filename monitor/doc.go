// Package monitor is the detection loop: it turns kernel uevents, a cheap
// MemTotal watch and a periodic full resync into an up-to-date machine model.
//
// Every input feeds one serial loop (loop.go): a select over its steps, each
// of which takes an input into the pending batch. Inputs that arrive close
// together (a DIMM's hundreds of memory blocks, each added and then onlined)
// are coalesced into one rebuild, which runs once no input has come for the
// quiet window, and at the latest MaxWait after the batch's first input; a
// resync runs at once. The model is always re-read from sysfs and procfs
// (rebuild.go); a uevent only says that something may have changed, so a
// forged or stale message cannot change what the daemon believes. A rebuild
// that fails is retried with a doubling backoff. Each change records the
// kernel SEQNUMs that caused it and the time from the first event's arrival
// to the new model.
//
// The loop's time comes from Config.Clock (the real clock by default), so
// tests step a fake one; uevents carry their arrival time as the listener
// stamped it, on the same clock.
package monitor
