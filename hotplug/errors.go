package hotplug

import (
	"errors"
	"strconv"
	"time"
)

var (
	// ErrTimeout is what a WriteError Is when the write ran for longer
	// than its timeout and was interrupted.
	ErrTimeout = errors.New("timed out")
	// ErrNotHotpluggable is the Err of a WriteError for a CPU that has no
	// online file (cpu0 on most x86 kernels): the kernel cannot take it
	// offline, and nothing was written.
	ErrNotHotpluggable = errors.New("no online file: the kernel cannot take it offline or online")
	// ErrHeld is the Err of a WriteError for an online of a CPU or memory
	// block that is held offline (see Holds); nothing was written.
	ErrHeld = errors.New("held offline")
)

// WriteError is a hotplug file the kernel did not take a value for, or
// did not take it in time. Its Err is what the write returned: the
// kernel's errno (EBUSY, EINVAL; EINTR when it was interrupted), an open's
// *fs.PathError, ErrNotHotpluggable or ErrHeld. A write that was
// interrupted Is its Cut as well: ErrTimeout, or the context's error.
type WriteError struct {
	Path  string
	Value string
	Err   error // nil when Running
	// Cut is why the write was interrupted: ErrTimeout, context.Canceled
	// or context.DeadlineExceeded; nil for a write that returned on its
	// own.
	Cut error
	// Timeout is the write's bound, set when Cut is ErrTimeout.
	Timeout time.Duration
	// Running is true when the write did not return even when
	// interrupted: it is still under way in the kernel (a CPU going
	// online or offline waits without taking signals), and its result
	// is lost. Read the state back to learn it.
	Running bool
}

func (e *WriteError) Error() string {
	s := "write " + strconv.Quote(e.Value) + " to " + e.Path + ": "
	switch {
	case errors.Is(e.Cut, ErrTimeout):
		s += "not done within " + e.Timeout.String()
	case e.Cut != nil:
		s += "cut short: " + e.Cut.Error()
	}
	switch {
	case e.Running:
		s += ", and still under way in the kernel"
	case e.Cut != nil && e.Err != nil:
		s += ": " + e.Err.Error()
	case e.Err != nil:
		s += e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *WriteError) Unwrap() error { return e.Err }

// Is reports whether target is the write's Cut (ErrTimeout, or the
// context's error).
func (e *WriteError) Is(target error) bool {
	return e.Cut != nil && errors.Is(e.Cut, target)
}

// TimedOut reports whether the write ran for longer than its timeout.
func (e *WriteError) TimedOut() bool { return errors.Is(e.Cut, ErrTimeout) }
