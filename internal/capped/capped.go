// Package capped reads whole files up to a size cap, for the files
// node-resized reads from sysfs, cgroupfs and the kubelet's directory. It
// never trusts stat: sysfs and cgroup files report a size of 0 or 4096
// whatever they hold, so a file is read until its end or one byte past the
// cap. Its functions are safe for concurrent use.
package capped

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrTooLarge is wrapped by the error ReadFile returns for a file longer
// than its cap.
var ErrTooLarge = errors.New("file larger than its cap")

// tooLarge says by how much a file is too large; it is ErrTooLarge.
type tooLarge struct{ max int64 }

func (e tooLarge) Error() string        { return fmt.Sprintf("larger than %d bytes", e.max) }
func (e tooLarge) Is(target error) bool { return target == ErrTooLarge }

// ReadFile reads the whole file at path, at most max bytes. Every error is
// an *fs.PathError that names path: opening or reading failed (a missing
// file wraps fs.ErrNotExist), or the file holds more than max bytes (it
// wraps ErrTooLarge; nothing past max+1 bytes is read or allocated).
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, max)
}

// Read reads f from its current offset to its end, at most max bytes, for a
// caller that opened f itself (to choose its flags, or to check it with
// f.Stat first). It does not close f. Its errors are ReadFile's, naming
// f.Name().
func Read(f *os.File, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: tooLarge{max}}
	}
	return b, nil
}
