package uevent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A fakeMsg is what one recv of a fakeConn returns.
type fakeMsg struct {
	b   []byte
	pid uint32
	err error
}

// A fakeConn hands out queued messages, then blocks until closed.
type fakeConn struct {
	msgs   chan fakeMsg
	done   chan struct{}
	once   sync.Once
	closes atomic.Int32
}

func newFakeConn(msgs ...fakeMsg) *fakeConn {
	f := &fakeConn{msgs: make(chan fakeMsg, 100), done: make(chan struct{})}
	for _, m := range msgs {
		f.msgs <- m
	}
	return f
}

var _ conn = (*fakeConn)(nil)

func (f *fakeConn) recv(b []byte) (int, uint32, error) {
	select {
	case <-f.done:
		return 0, 0, errors.New("fake conn closed")
	default:
	}
	select {
	case m := <-f.msgs:
		if m.err != nil {
			return 0, 0, m.err
		}
		// Like recvfrom with MSG_TRUNC: copy what fits, report the full length.
		copy(b, m.b)
		return len(m.b), m.pid, nil
	case <-f.done:
		return 0, 0, errors.New("fake conn closed")
	}
}

func (f *fakeConn) close() error {
	f.closes.Add(1)
	f.once.Do(func() { close(f.done) })
	return nil
}

// kernel returns a message from the kernel.
func kernel(b []byte) fakeMsg { return fakeMsg{b: b} }

// cpuMsg returns a kernel cpu uevent for cpuN with SEQNUM seq.
func cpuMsg(action string, n int, seq uint64) fakeMsg {
	return kernel(uev(action, "/devices/system/cpu/cpu"+strconv.Itoa(n), "SUBSYSTEM=cpu", "SEQNUM="+strconv.FormatUint(seq, 10)))
}

// otherMsg returns a kernel uevent of a subsystem not delivered by default.
func otherMsg(seq uint64) fakeMsg {
	return kernel(uev("remove", "/devices/virtual/cpuid/cpu1", "SUBSYSTEM=cpuid", "SEQNUM="+strconv.FormatUint(seq, 10)))
}

// recorder records the callbacks of a Listener.
type recorder struct {
	mu     sync.Mutex
	drops  map[DropReason]int
	events []string
}

func (r *recorder) options() Options {
	return Options{
		OnDrop: func(reason DropReason, n int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.drops == nil {
				r.drops = make(map[DropReason]int)
			}
			r.drops[reason] += n
		},
		OnEvent: func(subsystem string, action Action) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, subsystem+"/"+action.String())
		},
	}
}

func (r *recorder) dropped(reason DropReason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drops[reason]
}

func (r *recorder) delivered() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// mustReceive calls Receive and fails the test unless it returns an event.
func mustReceive(t *testing.T, l *Listener) Event {
	t.Helper()
	ev, err := receiveWithin(t, l, 5*time.Second)
	if err != nil {
		t.Fatalf("Receive() error = %v", err)
	}
	return ev
}

// receiveWithin calls Receive and fails the test if it blocks for longer
// than d.
func receiveWithin(t *testing.T, l *Listener, d time.Duration) (Event, error) {
	t.Helper()
	type result struct {
		ev  Event
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ev, err := l.Receive()
		ch <- result{ev, err}
	}()
	select {
	case r := <-ch:
		return r.ev, r.err
	case <-time.After(d):
		l.Close() // unblock the goroutine
		<-ch
		t.Fatalf("Receive() blocked for more than %v", d)
		return Event{}, nil
	}
}

func wantEvent(t *testing.T, ev Event, action Action, devpath string, seq uint64) {
	t.Helper()
	if ev.Action != action || ev.DevPath != devpath || ev.Seqnum != seq {
		t.Fatalf("Receive() = %v %s SEQNUM %d, want %v %s SEQNUM %d", ev.Action, ev.DevPath, ev.Seqnum, action, devpath, seq)
	}
}

func wantLost(t *testing.T, l *Listener, reason DropReason, missed uint64) {
	t.Helper()
	_, err := receiveWithin(t, l, 5*time.Second)
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Receive() error = %v, want ErrLost", err)
	}
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("Receive() error %T is not a *LostError", err)
	}
	if lost.Reason != reason || lost.Missed != missed {
		t.Fatalf("LostError = {%s, %d}, want {%s, %d}", lost.Reason, lost.Missed, reason, missed)
	}
}

func TestListenerDeliversDefaultSubsystems(t *testing.T) {
	var rec recorder
	fc := newFakeConn(
		kernel([]byte(msgCPUIDRemove)),
		kernel([]byte(msgCPUOffline)),
		kernel(uev("add", "/devices/system/memory/memory9", "SUBSYSTEM=memory", "SEQNUM=824")),
		kernel(uev("add", "/devices/virtual/net/lo", "SUBSYSTEM=net", "SEQNUM=825")),
		kernel(uev("online", "/devices/system/node/node1", "SUBSYSTEM=node", "SEQNUM=826")),
	)
	l := newListener(fc, rec.options())
	defer l.Close()

	before := time.Now()
	ev := mustReceive(t, l)
	wantEvent(t, ev, ActionOffline, "/devices/system/cpu/cpu1", 823)
	if ev.Subsystem != "cpu" || ev.Env["SUBSYSTEM"] != "cpu" {
		t.Errorf("Subsystem = %q, Env[SUBSYSTEM] = %q, want cpu", ev.Subsystem, ev.Env["SUBSYSTEM"])
	}
	if ev.Received.Before(before) || ev.Received.After(time.Now()) {
		t.Errorf("Received = %v, not set by Receive", ev.Received)
	}
	wantEvent(t, mustReceive(t, l), ActionAdd, "/devices/system/memory/memory9", 824)
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/node/node1", 826)

	want := []string{"cpu/offline", "memory/add", "node/online"}
	if got := rec.delivered(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OnEvent saw %v, want %v", got, want)
	}
	for _, r := range []DropReason{DropNotKernel, DropMalformed, DropUdev, DropOverflow, DropSeqnumGap} {
		if n := rec.dropped(r); n != 0 {
			t.Errorf("%d drops counted as %s, want none: filtered messages are not drops", n, r)
		}
	}
}

func TestListenerSubsystemsOption(t *testing.T) {
	fc := newFakeConn(
		kernel([]byte(msgCPUOffline)),
		kernel([]byte(msgCPUIDRemove)),
	)
	l := newListener(fc, Options{Subsystems: []string{"cpuid"}})
	defer l.Close()
	ev := mustReceive(t, l)
	if ev.Subsystem != "cpuid" {
		t.Fatalf("Receive() subsystem = %q, want cpuid only", ev.Subsystem)
	}
}

func TestListenerDropsNotKernel(t *testing.T) {
	var rec recorder
	forged := cpuMsg("offline", 1, 10)
	forged.pid = 4242
	fc := newFakeConn(forged, cpuMsg("online", 1, 11))
	l := newListener(fc, rec.options())
	defer l.Close()

	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 11)
	if n := rec.dropped(DropNotKernel); n != 1 {
		t.Errorf("not_kernel drops = %d, want 1", n)
	}
	if got := rec.delivered(); len(got) != 1 {
		t.Errorf("OnEvent saw %v, want only the kernel's event", got)
	}
}

func TestListenerDropsMalformedUdevTruncated(t *testing.T) {
	var rec recorder
	huge := make([]byte, receiveBufferSize+1)
	copy(huge, cpuMsg("offline", 1, 2).b)
	fc := newFakeConn(
		kernel(uev("offline", "/devices/system/cpu/cpu1", "SUBSYSTEM=cpu", "JUNK", "SEQNUM=1")),
		kernel([]byte("libudev\x00\xfe\xed\xca\xfeACTION=offline\x00SUBSYSTEM=cpu\x00")),
		kernel(huge),
		kernel(uev("offline", "/devices/system/cpu/cpu1", "SEQNUM=3")), // no SUBSYSTEM
		kernel([]byte{}),
		cpuMsg("online", 1, 4),
	)
	l := newListener(fc, rec.options())
	defer l.Close()

	// The truncated message's SEQNUM (2) was never read, so 4 after 3 is
	// no gap but 3 after 1 is one: the truncated event is reported lost.
	wantLost(t, l, DropSeqnumGap, 1)
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 4)
	if n := rec.dropped(DropMalformed); n != 4 {
		t.Errorf("malformed drops = %d, want 4 (bad entry, truncated, no SUBSYSTEM, empty)", n)
	}
	if n := rec.dropped(DropUdev); n != 1 {
		t.Errorf("udev drops = %d, want 1", n)
	}
}

func TestListenerSeqnumGap(t *testing.T) {
	var rec recorder
	fc := newFakeConn(
		cpuMsg("offline", 1, 10), // baseline
		otherMsg(11),             // filtered, but its SEQNUM counts
		cpuMsg("online", 1, 14),  // 12 and 13 missed
		cpuMsg("offline", 1, 15),
		otherMsg(18),            // a gap seen on a filtered message
		cpuMsg("online", 1, 19), // no gap after 18
		cpuMsg("offline", 1, 3), // backwards: new baseline, no error
		cpuMsg("online", 1, 4),
	)
	l := newListener(fc, rec.options())
	defer l.Close()

	wantEvent(t, mustReceive(t, l), ActionOffline, "/devices/system/cpu/cpu1", 10)
	wantLost(t, l, DropSeqnumGap, 2)
	// The event that revealed the gap is not lost: it comes next.
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 14)
	wantEvent(t, mustReceive(t, l), ActionOffline, "/devices/system/cpu/cpu1", 15)
	wantLost(t, l, DropSeqnumGap, 2)
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 19)
	wantEvent(t, mustReceive(t, l), ActionOffline, "/devices/system/cpu/cpu1", 3)
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 4)

	if n := rec.dropped(DropSeqnumGap); n != 4 {
		t.Errorf("seqnum_gap drops = %d, want 4 (2 + 2 missed events)", n)
	}
	if got := len(rec.delivered()); got != 6 {
		t.Errorf("OnEvent called %d times, want 6", got)
	}
}

func TestListenerOverflow(t *testing.T) {
	var rec recorder
	fc := newFakeConn(
		cpuMsg("offline", 1, 10),
		fakeMsg{err: fmt.Errorf("%w: recvfrom: no buffer space available", errOverflow)},
		cpuMsg("online", 1, 50), // after an overflow, a new baseline
		cpuMsg("offline", 1, 51),
	)
	l := newListener(fc, rec.options())
	defer l.Close()

	wantEvent(t, mustReceive(t, l), ActionOffline, "/devices/system/cpu/cpu1", 10)
	wantLost(t, l, DropOverflow, 0)
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 50)
	wantEvent(t, mustReceive(t, l), ActionOffline, "/devices/system/cpu/cpu1", 51)

	if n := rec.dropped(DropOverflow); n != 1 {
		t.Errorf("overflow drops = %d, want 1", n)
	}
	if n := rec.dropped(DropSeqnumGap); n != 0 {
		t.Errorf("seqnum_gap drops = %d after an overflow, want 0: the loss is already reported", n)
	}
}

func TestListenerOtherErrorsKeepItUsable(t *testing.T) {
	boom := errors.New("boom")
	fc := newFakeConn(fakeMsg{err: boom}, cpuMsg("online", 1, 1))
	l := newListener(fc, Options{})
	defer l.Close()

	_, err := receiveWithin(t, l, 5*time.Second)
	if !errors.Is(err, boom) || errors.Is(err, ErrLost) || errors.Is(err, net.ErrClosed) {
		t.Fatalf("Receive() error = %v, want one wrapping boom only", err)
	}
	wantEvent(t, mustReceive(t, l), ActionOnline, "/devices/system/cpu/cpu1", 1)
}

func TestListenerCloseUnblocksReceive(t *testing.T) {
	fc := newFakeConn()
	l := newListener(fc, Options{})

	errc := make(chan error, 1)
	go func() {
		_, err := l.Receive()
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Receive block
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Receive() after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Receive")
	}

	if err := l.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if n := fc.closes.Load(); n != 1 {
		t.Errorf("conn closed %d times, want 1", n)
	}
	if _, err := l.Receive(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Receive() on a closed Listener = %v, want net.ErrClosed", err)
	}
}

func TestListenerConcurrentClose(t *testing.T) {
	fc := newFakeConn()
	l := newListener(fc, Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.Close() })
	}
	wg.Go(func() { l.Receive() })
	wg.Wait()
	if n := fc.closes.Load(); n != 1 {
		t.Errorf("conn closed %d times, want 1", n)
	}
}

func TestLostError(t *testing.T) {
	cause := errors.New("cause")
	err := error(&LostError{Reason: DropSeqnumGap, Missed: 3, Err: cause})
	if !errors.Is(err, ErrLost) || !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, ErrLost / cause) = false", err)
	}
	if got, want := err.Error(), "uevent: events lost (seqnum_gap, 3 missed): cause"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&LostError{Reason: DropOverflow}).Error(), "uevent: events lost (overflow)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if errors.Is(fmt.Errorf("x: %w", cause), ErrLost) {
		t.Error("an unrelated error matches ErrLost")
	}
}
