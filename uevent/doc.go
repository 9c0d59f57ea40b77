// Package uevent receives the kernel's kobject uevents, the messages Linux
// broadcasts on a NETLINK_KOBJECT_UEVENT socket (multicast group 1) whenever
// a device is added, removed, onlined or offlined, and turns the ones that
// matter for a node's capacity (by default the subsystems cpu, memory and
// node) into typed Events.
//
// That is its one job. An Event only says that something changed; callers
// re-read the truth from sysfs and procfs and never take it from the message.
//
// # Wire format
//
// A kernel uevent is one datagram, not framed by a netlink header:
//
//	ACTION@DEVPATH\0ACTION=...\0DEVPATH=...\0SUBSYSTEM=...\0...\0SEQNUM=...\0
//
// Parse reads that format into an Event. Values may contain '=' (only the
// first '=' of an entry separates key and value) and any byte but NUL.
// Messages of systemd-udevd's own monitor protocol start with "libudev\0";
// Parse refuses them with ErrUdev.
//
// # Trust
//
// The Listener delivers only datagrams whose sender port id is 0, that is,
// datagrams the kernel's uevent socket broadcast. A userspace process with
// CAP_NET_ADMIN can send to group 1 too; its messages are dropped and
// counted as DropNotKernel. A process with CAP_SYS_ADMIN can still make the
// kernel itself broadcast a uevent of its choosing; that is harmless here,
// because an Event is only a prompt to rescan.
//
// # Lost events
//
// The kernel broadcasts without waiting: when the socket's receive buffer is
// full, messages are thrown away and the next read fails with ENOBUFS. The
// Listener reports that as a *LostError (errors.Is(err, ErrLost)) and keeps
// working. It also watches the kernel's SEQNUM, which grows by one for every
// uevent the kernel sends anywhere, across every message it receives, before
// subsystem filtering; a jump forward is reported the same way. Uevents that
// belong to devices tagged with another network namespace, and uevents that a
// privileged process injects into another network namespace, consume SEQNUMs
// without ever reaching this socket, so a gap means "maybe lost", not
// "certainly lost". Either way the right answer is the same cheap one:
// rescan the machine and keep calling Receive.
package uevent
