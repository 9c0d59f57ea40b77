//go:build linux

package uevent

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/node-resized/node-resized/internal/cpu1test"
)

// listen opens a real Listener and closes it when the test ends.
func listen(t *testing.T, opts Options) *Listener {
	t.Helper()
	l, err := Listen(opts)
	if err != nil {
		t.Fatalf("Listen() error = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// setReadDeadline sets a read deadline on a real Listener's socket, so that a
// test cannot hang waiting for an event that never comes.
func setReadDeadline(t *testing.T, l *Listener, d time.Time) {
	t.Helper()
	if err := l.c.(*sysConn).c.SetReadDeadline(d); err != nil {
		t.Fatalf("SetReadDeadline() error = %v", err)
	}
}

func TestRealListenCloseUnblocksReceive(t *testing.T) {
	l := listen(t, Options{Subsystems: []string{"no-such-subsystem"}})
	errc := make(chan error, 1)
	go func() {
		_, err := l.Receive()
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Receive block in the poller
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Receive() after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a Receive blocked on the socket")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

func TestRealReadDeadline(t *testing.T) {
	l := listen(t, Options{Subsystems: []string{"no-such-subsystem"}})
	setReadDeadline(t, l, time.Now().Add(100*time.Millisecond))
	start := time.Now()
	_, err := l.Receive()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Receive() = %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Receive() returned after %v, long after its deadline", d)
	}
	// The Listener is still usable after a timeout.
	setReadDeadline(t, l, time.Now().Add(50*time.Millisecond))
	if _, err := l.Receive(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second Receive() = %v, want os.ErrDeadlineExceeded", err)
	}
}

func TestRealReceiveBuffer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SO_RCVBUFFORCE needs root (CAP_NET_ADMIN)")
	}
	const want = 16 << 20
	l := listen(t, Options{ReceiveBuffer: want})
	got, err := l.c.(*sysConn).c.ReadBuffer()
	if err != nil {
		t.Fatalf("ReadBuffer() error = %v", err)
	}
	// The kernel reports twice the value it was given.
	if got/2 < want {
		t.Fatalf("receive buffer = %d bytes, want at least %d: SO_RCVBUFFORCE not used", got/2, want)
	}
}

// TestRealNotKernelSender sends a forged cpu uevent to group 1 from a
// userspace netlink socket and checks that it is dropped, not delivered.
func TestRealNotKernelSender(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sending to a netlink multicast group needs root (CAP_NET_ADMIN)")
	}
	var (
		mu      sync.Mutex
		dropped int
	)
	l := listen(t, Options{OnDrop: func(r DropReason, n int) {
		if r == DropNotKernel {
			mu.Lock()
			dropped += n
			mu.Unlock()
		}
	}})

	sender, err := netlink.Dial(unix.NETLINK_KOBJECT_UEVENT, nil)
	if err != nil {
		t.Fatalf("dial sender: %v", err)
	}
	defer sender.Close()
	rc, err := sender.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	forged := uev("offline", "/devices/system/cpu/cpu97", "SUBSYSTEM=cpu", "SEQNUM=1")
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Sendto(int(fd), forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: kernelGroup})
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("send forged uevent: %v", serr)
	}

	setReadDeadline(t, l, time.Now().Add(500*time.Millisecond))
	for {
		ev, err := l.Receive()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if errors.Is(err, ErrLost) {
			continue
		}
		if err != nil {
			t.Fatalf("Receive() error = %v", err)
		}
		if ev.DevPath == "/devices/system/cpu/cpu97" {
			t.Fatalf("forged uevent from a userspace sender delivered: %+v", ev)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if dropped < 1 {
		t.Fatalf("not_kernel drops = %d, want at least 1", dropped)
	}
}

// TestRealCPUHotplug offlines and onlines cpu1 and expects the kernel's
// uevents for both.
func TestRealCPUHotplug(t *testing.T) {
	cpu1test.Need(t) // whatever happens, cpu1 ends online
	setOnline := func(v string) error { return cpu1test.Set(v == "1") }

	var rec recorder
	l := listen(t, rec.options())
	setReadDeadline(t, l, time.Now().Add(30*time.Second))

	// expect reads until the event for cpu1 with action arrives.
	expect := func(action Action, after time.Time) {
		t.Helper()
		for {
			ev, err := l.Receive()
			if errors.Is(err, ErrLost) {
				t.Logf("Receive(): %v (another uevent elsewhere); reading on", err)
				continue
			}
			if err != nil {
				t.Fatalf("waiting for %v of cpu1: Receive() error = %v", action, err)
			}
			if ev.DevPath != "/devices/system/cpu/cpu1" {
				continue
			}
			if ev.Subsystem != "cpu" || ev.Action != action {
				t.Fatalf("got %v %s (subsystem %s), want %v of cpu1 (subsystem cpu)", ev.Action, ev.DevPath, ev.Subsystem, action)
			}
			if ev.Seqnum == 0 || ev.Received.Before(after) {
				t.Fatalf("event %+v: SEQNUM missing or Received %v before the write at %v", ev, ev.Received, after)
			}
			t.Logf("%v %s SEQNUM=%d %v after the write", ev.Action, ev.DevPath, ev.Seqnum, ev.Received.Sub(after))
			return
		}
	}

	start := time.Now()
	if err := setOnline("0"); err != nil {
		t.Fatalf("offline cpu1: %v", err)
	}
	expect(ActionOffline, start)

	start = time.Now()
	if err := setOnline("1"); err != nil {
		t.Fatalf("online cpu1: %v", err)
	}
	expect(ActionOnline, start)

	got := rec.delivered()
	want := map[string]bool{"cpu/offline": true, "cpu/online": true}
	for _, e := range got {
		if !want[e] {
			t.Logf("OnEvent also saw %s", e)
		}
	}
	if len(got) < 2 {
		t.Errorf("OnEvent saw %v, want cpu/offline and cpu/online", got)
	}
	// The cpuid remove/add the kernel also sends are filtered, not dropped.
	if n := rec.dropped(DropMalformed); n != 0 {
		t.Errorf("%d real kernel uevents dropped as malformed", n)
	}
}
