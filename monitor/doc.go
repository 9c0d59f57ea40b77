// Package monitor is the detection loop: it turns kernel uevents, a cheap
// MemTotal watch and a periodic full resync into an up-to-date machine model.
//
// Every input feeds one serial loop. Inputs that arrive close together (a
// DIMM's hundreds of memory blocks, each added and then onlined) are
// coalesced into one rebuild, delayed by at most a configurable window. The
// model is always re-read from sysfs and procfs; a uevent only says that
// something may have changed, so a forged or stale message cannot change
// what the daemon believes. Each change records the kernel SEQNUMs that
// caused it and the time from the first event's arrival to the new model.
package monitor
