package uevent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DropReason says why a message was not delivered.
type DropReason string

// The reasons a message is dropped. A message of a subsystem the Listener
// was not asked for is filtered, not dropped, and is not counted.
const (
	DropNotKernel DropReason = "not_kernel" // the sender was a userspace process, not the kernel
	DropMalformed DropReason = "malformed"  // not a well-formed uevent, or truncated
	DropUdev      DropReason = "udev"       // a udev monitor message
	DropOverflow  DropReason = "overflow"   // the socket's receive buffer overflowed (ENOBUFS)
	DropSeqnumGap DropReason = "seqnum_gap" // the kernel's SEQNUM jumped forward
)

// defaultSubsystems are the subsystems delivered when Options.Subsystems is
// empty: the ones whose uevents change a node's CPU and memory capacity.
var defaultSubsystems = []string{"cpu", "memory", "node"}

// SubsystemBlock is the block devices' subsystem: a disk's change uevent
// with RESIZE=1 says that its size changed.
const SubsystemBlock = "block"

// DefaultSubsystems returns the subsystems a Listener delivers when
// Options.Subsystems is empty, for a caller that adds to them.
func DefaultSubsystems() []string { return slices.Clone(defaultSubsystems) }

// defaultReceiveBuffer is the socket receive buffer asked for when
// Options.ReceiveBuffer is not positive. Hot-adding a 64 GiB DIMM raises 512
// memory block uevents at once (and as many for their onlining); 16 MiB
// holds thousands of messages even at the kernel's per-message overhead.
const defaultReceiveBuffer = 16 << 20

// Options configure a Listener. The zero value is ready to use.
type Options struct {
	// Subsystems are the subsystems whose events are delivered; empty means
	// cpu, memory and node. Everything else is filtered after a cheap scan of
	// the message, without parsing it.
	Subsystems []string

	// ReceiveBuffer is the socket receive buffer in bytes; zero or less
	// means 16 MiB. It is set with SO_RCVBUFFORCE when the
	// process may (CAP_NET_ADMIN), else with SO_RCVBUF, which the kernel
	// caps at net.core.rmem_max.
	ReceiveBuffer int

	// OnDrop, if set, is called from the goroutine calling Receive for every
	// message or run of messages not delivered, with n the number of events
	// lost when known (the size of a SEQNUM gap) and 1 otherwise.
	OnDrop func(reason DropReason, n int)

	// OnEvent, if set, is called from the goroutine calling Receive for
	// every event about to be delivered.
	OnEvent func(subsystem string, action Action)

	// Logger, if set, receives a warning for every loss of events and debug
	// lines for other drops.
	Logger *slog.Logger
}

// ErrLost is matched (errors.Is) by the error Receive returns when events
// were or may have been lost: the socket overflowed, or the kernel's SEQNUM
// jumped. The caller must rescan what it watches and keep calling Receive;
// the Listener stays usable.
var ErrLost = errors.New("uevent: events lost")

// A LostError reports that events were or may have been lost.
// errors.Is(err, ErrLost) is true for it.
type LostError struct {
	Reason DropReason // DropOverflow or DropSeqnumGap
	Missed uint64     // number of events missed; 0 if unknown
	Err    error      // the underlying error or a description of the gap
}

func (e *LostError) Error() string {
	msg := "uevent: events lost (" + string(e.Reason)
	if e.Missed > 0 {
		msg += fmt.Sprintf(", %d missed", e.Missed)
	}
	msg += ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *LostError) Unwrap() error { return e.Err }

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// A conn is the source of raw uevent datagrams: the netlink socket on Linux,
// a fake in tests.
type conn interface {
	// recv reads one datagram into b and returns its full length n, which
	// is larger than len(b) if the datagram was truncated, and the netlink
	// port id of its sender, 0 for the kernel. It blocks until a datagram
	// arrives or the conn is closed. An overflow of the receive buffer is
	// reported as an error wrapping errOverflow.
	recv(b []byte) (n int, senderPID uint32, err error)

	// close closes the conn and unblocks a blocked recv.
	close() error
}

// errOverflow is wrapped by a conn's recv error when the socket's receive
// buffer overflowed and messages were thrown away.
var errOverflow = errors.New("receive buffer overflowed")

// receiveBufferSize is the size of the one buffer a Listener reads into.
// The kernel caps a uevent's entries at 2 KiB (UEVENT_BUFFER_SIZE) plus its
// header, so 64 KiB is ample; a longer datagram is dropped as malformed.
const receiveBufferSize = 64 << 10

// A Listener receives kernel uevents. Listen makes one.
//
// A Listener is safe for one goroutine calling Receive while any goroutines
// call Close; Receive itself must not be called concurrently.
type Listener struct {
	c          conn
	subsystems map[string]struct{} // read-only after newListener
	onDrop     func(DropReason, int)
	onEvent    func(string, Action)
	log        *slog.Logger

	// Reader state, touched only by the goroutine calling Receive.
	buf        []byte // reused for every datagram
	lastSeqnum uint64 // SEQNUM of the last kernel message, if haveSeqnum
	haveSeqnum bool   // false until the first SEQNUM and after an overflow
	pending    Event  // an event held back while a LostError is returned, if hasPending
	hasPending bool

	closed    atomic.Bool // set by Close before the conn is closed
	closeOnce sync.Once   // guards closeErr and the conn's close
	closeErr  error
}

// Listen opens a NETLINK_KOBJECT_UEVENT socket, joins the kernel's
// multicast group 1 and returns a Listener on it. It needs no privilege;
// CAP_NET_ADMIN lets it raise the receive buffer above net.core.rmem_max.
// On anything but Linux it returns an error wrapping errors.ErrUnsupported.
func Listen(opts Options) (*Listener, error) {
	size := opts.ReceiveBuffer
	if size <= 0 {
		size = defaultReceiveBuffer
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := dial(size, opts.Logger)
	if err != nil {
		return nil, err
	}
	return newListener(c, opts), nil
}

// newListener returns a Listener reading from c.
func newListener(c conn, opts Options) *Listener {
	subs := opts.Subsystems
	if len(subs) == 0 {
		subs = defaultSubsystems
	}
	l := &Listener{
		c:          c,
		subsystems: make(map[string]struct{}, len(subs)),
		onDrop:     opts.OnDrop,
		onEvent:    opts.OnEvent,
		log:        opts.Logger,
		buf:        make([]byte, receiveBufferSize),
	}
	for _, s := range subs {
		l.subsystems[s] = struct{}{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l
}

// Receive blocks until the next event of a wanted subsystem arrives and
// returns it.
//
// Messages not sent by the kernel, malformed messages and udev messages are
// counted through Options.OnDrop and skipped. When events were or may have
// been lost, Receive returns a *LostError (errors.Is(err, ErrLost)); the
// caller should rescan and call Receive again, which goes on with the next
// event. After Close, Receive returns an error matched by
// errors.Is(err, net.ErrClosed). Other errors come from the socket; the
// Listener stays usable after them too.
func (l *Listener) Receive() (Event, error) {
	if l.closed.Load() {
		return Event{}, errClosed
	}
	if l.hasPending {
		ev := l.pending
		l.pending, l.hasPending = Event{}, false
		l.deliver(ev)
		return ev, nil
	}
	for {
		if l.closed.Load() {
			return Event{}, errClosed
		}
		n, pid, err := l.c.recv(l.buf)
		now := time.Now()
		if err != nil {
			if l.closed.Load() {
				return Event{}, errClosed
			}
			if errors.Is(err, errOverflow) {
				return Event{}, l.overflow(err)
			}
			return Event{}, fmt.Errorf("uevent: receive: %w", err)
		}
		ev, ok, err := l.handle(l.buf, n, pid, now)
		if err != nil {
			return Event{}, err
		}
		if ok {
			l.deliver(ev)
			return ev, nil
		}
	}
}

// errClosed is what Receive returns once the Listener is closed.
var errClosed = fmt.Errorf("uevent: receive: %w", net.ErrClosed)

// Close closes the socket and unblocks a blocked Receive. It is safe to call
// more than once, from any goroutine; calls after the first return nil.
func (l *Listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		l.closed.Store(true)
		if err := l.c.close(); err != nil {
			l.closeErr = fmt.Errorf("uevent: close: %w", err)
		}
	})
	if !first {
		return nil
	}
	return l.closeErr
}

// handle decides what to do with one datagram of full length n in b, read at
// now from sender pid. It returns the event to deliver and true, or false to
// read on, or a *LostError to return.
func (l *Listener) handle(b []byte, n int, pid uint32, now time.Time) (Event, bool, error) {
	if pid != 0 {
		l.drop(DropNotKernel, 1, slog.LevelDebug, "uevent from a userspace sender dropped", "sender_pid", pid)
		return Event{}, false, nil
	}
	if n > len(b) {
		l.drop(DropMalformed, 1, slog.LevelWarn, "truncated uevent dropped", "bytes", n, "buffer", len(b))
		return Event{}, false, nil
	}
	msg := b[:n]
	if isUdev(msg) {
		l.drop(DropUdev, 1, slog.LevelDebug, "udev monitor message dropped")
		return Event{}, false, nil
	}

	sub, seqnum, hasSeqnum := scan(msg)
	var lost *LostError
	if hasSeqnum {
		lost = l.checkSeqnum(seqnum)
	}
	if sub == nil {
		l.drop(DropMalformed, 1, slog.LevelDebug, "uevent without SUBSYSTEM dropped", "seqnum", seqnum)
		return Event{}, false, lostOrNil(lost)
	}
	if _, want := l.subsystems[string(sub)]; !want {
		return Event{}, false, lostOrNil(lost)
	}

	ev, err := Parse(msg)
	if err != nil {
		l.drop(DropMalformed, 1, slog.LevelWarn, "malformed uevent dropped", "error", err)
		return Event{}, false, lostOrNil(lost)
	}
	ev.Received = now
	if lost != nil {
		// Report the loss first; this event comes with the next Receive.
		l.pending, l.hasPending = ev, true
		return Event{}, false, lost
	}
	return ev, true, nil
}

// lostOrNil turns a nil *LostError into a nil error.
func lostOrNil(lost *LostError) error {
	if lost == nil {
		return nil
	}
	return lost
}

// checkSeqnum records seqnum, the SEQNUM of a kernel message, and returns a
// *LostError if it jumped forward from the last one. The first SEQNUM only
// sets the baseline, and so does one that went backwards (a replayed or
// injected message) or repeated.
func (l *Listener) checkSeqnum(seqnum uint64) *LostError {
	last, have := l.lastSeqnum, l.haveSeqnum
	l.lastSeqnum, l.haveSeqnum = seqnum, true
	if !have || seqnum <= last {
		if have && seqnum < last && l.log.Enabled(context.Background(), slog.LevelDebug) {
			l.log.Debug("uevent SEQNUM went backwards; new baseline", "from", last, "to", seqnum)
		}
		return nil
	}
	missed := seqnum - last - 1
	if missed == 0 {
		return nil
	}
	l.drop(DropSeqnumGap, int(min(missed, math.MaxInt)), slog.LevelDebug,
		"uevent SEQNUM gap: events may have been lost", "from", last, "to", seqnum, "missed", missed)
	return &LostError{
		Reason: DropSeqnumGap,
		Missed: missed,
		Err:    fmt.Errorf("SEQNUM jumped from %d to %d", last, seqnum),
	}
}

// overflow handles an overflowed receive buffer: the next SEQNUM starts a
// new baseline, since the gap it will show is already reported.
func (l *Listener) overflow(err error) *LostError {
	l.haveSeqnum = false
	l.drop(DropOverflow, 1, slog.LevelWarn, "uevent receive buffer overflowed: events lost", "error", err)
	return &LostError{Reason: DropOverflow, Err: err}
}

// drop counts a drop and logs it at level.
func (l *Listener) drop(reason DropReason, n int, level slog.Level, msg string, args ...any) {
	if l.onDrop != nil {
		l.onDrop(reason, n)
	}
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, msg, append(args, "reason", string(reason))...)
	}
}

// deliver reports ev to OnEvent.
func (l *Listener) deliver(ev Event) {
	if l.onEvent != nil {
		l.onEvent(ev.Subsystem, ev.Action)
	}
}
