package hotplug

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/node-resized/node-resized/metrics"
)

// fullSocket returns the sending end of a unix stream socket pair whose
// send buffer is full, so that a write to it blocks, and the receiving
// end. With timeo, the sending end has SO_SNDTIMEO set (to an hour): a
// signal then ends a blocked write with EINTR, which SA_RESTART does not
// restart, as the kernel's offline_pages() ends an offline with -EINTR on
// a pending signal. Without, the kernel answers -ERESTARTSYS and
// SA_RESTART restarts the write: a write no signal can cut, as a CPU's
// online.
func fullSocket(t *testing.T, timeo bool) (send, recv int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	if timeo {
		tv := unix.Timeval{Sec: 3600}
		if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1024)
	for {
		if _, err := unix.SendmsgN(fds[0], chunk, nil, nil, unix.MSG_DONTWAIT); err != nil {
			if errors.Is(err, unix.EAGAIN) {
				return fds[0], fds[1]
			}
			t.Fatal(err)
		}
	}
}

// openFd makes w write to a duplicate of fd whatever the path.
func openFd(w *Writer, fd int) {
	w.open = func(string) (int, error) { return unix.Dup(fd) }
}

// drain reads recv until it ends with suffix.
func drain(recv int, suffix string) error {
	var got []byte
	buf := make([]byte, 1<<16)
	tv := unix.Timeval{Usec: 100000}
	if err := unix.SetsockoptTimeval(recv, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); !bytes.HasSuffix(got, []byte(suffix)); {
		if time.Now().After(deadline) {
			return fmt.Errorf("%q not received within 10s (got %d bytes)", suffix, len(got))
		}
		n, err := unix.Read(recv, buf)
		if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return err
		}
		got = append(got, buf[:max(n, 0)]...)
	}
	return nil
}

// A write that blocks in the kernel is cut at its timeout: its thread is
// signalled, the kernel ends it with EINTR, and the caller gets a
// WriteError that is ErrTimeout and EINTR, soon after the timeout.
func TestTimeoutInterruptsABlockedWrite(t *testing.T) {
	send, _ := fullSocket(t, true)
	const timeout = 200 * time.Millisecond
	w := NewWriter(t.TempDir(), Config{BlockTimeout: timeout, Grace: 5 * time.Second})
	openFd(w, send)
	start := time.Now()
	err := w.OfflineBlock(context.Background(), 42)
	took := time.Since(start)
	var werr *WriteError
	if !errors.As(err, &werr) {
		t.Fatalf("OfflineBlock = %v, want a *WriteError", err)
	}
	if !errors.Is(err, ErrTimeout) || !werr.TimedOut() || !errors.Is(err, unix.EINTR) || werr.Running || werr.Timeout != timeout {
		t.Errorf("OfflineBlock = %v (%#v); want ErrTimeout after %v, the write ended by EINTR", err, werr, timeout)
	}
	if took < timeout || took > timeout+time.Second {
		t.Errorf("OfflineBlock returned after %v, want just past its timeout %v", took, timeout)
	}
	if werr.Value != "offline" || werr.Path != blockPath(w.root, 42) {
		t.Errorf("error names %q to %s", werr.Value, werr.Path)
	}
	t.Logf("%v after %v", err, took.Round(time.Millisecond))
}

// A cancelled context cuts a write as its timeout does, and the error says
// why.
func TestCancelInterruptsABlockedWrite(t *testing.T) {
	send, _ := fullSocket(t, true)
	w := NewWriter(t.TempDir(), Config{BlockTimeout: time.Hour})
	openFd(w, send)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := w.OfflineBlock(ctx, 7)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || !errors.Is(err, unix.EINTR) {
		t.Fatalf("OfflineBlock = %v, want context.Canceled and EINTR", err)
	}
}

// A write the signal cannot end (the kernel restarts it) is given up on
// after the grace, reported as still running; it ends when the kernel lets
// it.
func TestAWriteTheSignalCannotEndIsReportedRunning(t *testing.T) {
	send, recv := fullSocket(t, false)
	w := NewWriter(t.TempDir(), Config{CPUTimeout: 100 * time.Millisecond, Grace: 200 * time.Millisecond})
	openFd(w, send)
	if err := writeFile(w.root, "devices/system/cpu/cpu3/online", "1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := w.OfflineCPU(context.Background(), 3)
	took := time.Since(start)
	var werr *WriteError
	if !errors.As(err, &werr) || !werr.Running || !errors.Is(err, ErrTimeout) || werr.Err != nil {
		t.Fatalf("OfflineCPU = %v, want a timeout still running", err)
	}
	if took < 300*time.Millisecond || took > 1300*time.Millisecond {
		t.Errorf("returned after %v, want the timeout and the grace, 300ms", took)
	}
	// The kernel lets the write go: it completes on its own thread.
	if err := drain(recv, "0"); err != nil {
		t.Fatal(err)
	}
}

// A stray signal before the timeout (the profiler's SIGPROF, the runtime's
// own SIGURG) does not cut the write: it is tried again, and done once.
func TestStraySignalsAreNotATimeout(t *testing.T) {
	send, recv := fullSocket(t, true)
	w := NewWriter(t.TempDir(), Config{BlockTimeout: time.Minute})
	openFd(w, send)
	drained := make(chan error, 1)
	w.started = func(tid int) {
		go func() {
			for range 5 {
				time.Sleep(20 * time.Millisecond)
				if err := unix.Tgkill(unix.Getpid(), tid, unix.SIGURG); err != nil {
					drained <- err
					return
				}
			}
			drained <- drain(recv, "online_movable")
		}()
	}
	if err := w.OnlineBlock(context.Background(), 9, true); err != nil {
		t.Fatalf("OnlineBlock = %v, want nil after stray signals", err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

// The kernel's errno comes back as it is, not as os wraps it.
func TestKernelErrnoIsReturned(t *testing.T) {
	w := NewWriter(t.TempDir(), Config{})
	w.open = func(string) (int, error) { return unix.Open("/dev/full", unix.O_WRONLY|unix.O_CLOEXEC, 0) }
	err := w.OfflineBlock(context.Background(), 1)
	var werr *WriteError
	if !errors.As(err, &werr) || werr.Err != unix.ENOSPC || errors.Is(err, ErrTimeout) || werr.Running {
		t.Fatalf("OfflineBlock = %#v, want the write's ENOSPC", err)
	}
	if got, want := err.Error(), `write "offline" to `+blockPath(w.root, 1)+": no space left on device"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}

// A write cut at its timeout is counted as one, and timed.
func TestTimeoutIsCounted(t *testing.T) {
	send, _ := fullSocket(t, true)
	m := metrics.New()
	w := NewWriter(t.TempDir(), Config{BlockTimeout: 50 * time.Millisecond, Metrics: m})
	openFd(w, send)
	if err := w.OfflineBlock(context.Background(), 42); !errors.Is(err, ErrTimeout) {
		t.Fatalf("OfflineBlock = %v, want a timeout", err)
	}
	if got := testutil.ToFloat64(m.HotplugWrites.WithLabelValues("memory_block", "offline", "timeout")); got != 1 {
		t.Errorf("timeouts counted %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.HotplugWriteDuration); got != 1 {
		t.Errorf("%d duration series, want 1", got)
	}
}
