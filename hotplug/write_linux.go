package hotplug

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// interruptEvery is how often a write that is over its time is signalled
// again: the first signal may land before the thread enters write(2), or
// between two of the kernel's checks.
const interruptEvery = 10 * time.Millisecond

// openSysfs opens a hotplug file for writing. Never O_CREAT: a missing
// file (a CPU that cannot go offline, a block gone) must not be made.
func openSysfs(path string) (int, error) {
	return unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
}

// call is one write(2) of a value on an OS thread of its own.
type call struct {
	tid  chan int   // the thread's id, sent once it is locked
	done chan error // the write's result
	// stop is set once the caller interrupts the write: an EINTR is
	// final from then on; before, it is a stray signal (the profiler's
	// SIGPROF) and the write is tried again.
	stop atomic.Bool
}

// write writes value to path in one write(2), bounded by timeout and ctx:
// past either, the thread doing it is sent SIGURG until the write returns,
// or for w.grace at most. It returns nil or a *WriteError.
func (w *Writer) write(ctx context.Context, timeout time.Duration, path, value string) error {
	c := &call{tid: make(chan int, 1), done: make(chan error, 1)}
	go c.run(w.open, path, value)
	tid := <-c.tid
	if w.started != nil {
		w.started(tid)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	werr := &WriteError{Path: path, Value: value}
	select {
	case err := <-c.done:
		if err == nil {
			return nil
		}
		werr.Err = err
		return werr
	case <-timer.C:
		werr.Cut, werr.Timeout = ErrTimeout, timeout
	case <-ctx.Done():
		werr.Cut = ctx.Err()
	}
	c.stop.Store(true)
	pid := unix.Getpid()
	grace := time.NewTimer(w.grace)
	defer grace.Stop()
	tick := time.NewTicker(interruptEvery)
	defer tick.Stop()
	for {
		// SIGURG is the Go runtime's own preemption signal: its handler
		// (installed with SA_RESTART) does nothing harmful to a thread
		// in a system call, and the kernel sees a pending signal. A
		// memory block's offline_pages() then returns -EINTR, which no
		// SA_RESTART restarts.
		if err := unix.Tgkill(pid, tid, unix.SIGURG); err != nil && !errors.Is(err, unix.ESRCH) {
			werr.Err = err
			werr.Running = true
			return werr
		}
		select {
		case err := <-c.done:
			if err == nil {
				return nil // it was done as the time ran out
			}
			werr.Err = err
			return werr
		case <-grace.C:
			werr.Running = true
			return werr
		case <-tick.C:
		}
	}
}

// run opens path and writes value on its locked thread. It uses the
// system calls directly: os.File retries EINTR, which would restart an
// interrupted offline from scratch.
func (c *call) run(open func(string) (int, error), path, value string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.tid <- unix.Gettid()
	c.done <- c.openWrite(open, path, value)
}

func (c *call) openWrite(open func(string) (int, error), path, value string) error {
	var fd int
	var err error
	for {
		fd, err = open(path)
		if !errors.Is(err, unix.EINTR) || c.stop.Load() {
			break
		}
	}
	if err != nil {
		// errors.Is(err, fs.ErrNotExist) holds for a missing file, as
		// for os.Open's
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := []byte(value)
	for {
		n, err := unix.Write(fd, b)
		switch {
		case errors.Is(err, unix.EINTR) && !c.stop.Load():
			continue
		case err != nil:
			return err
		case n < len(b):
			return io.ErrShortWrite
		}
		return nil
	}
}
