// Package statefile reads and writes node-resized's own files on disk (its
// decision state, the release's record): a read trusts the file no
// further than it is checked, and a write is atomic, so that a crash
// leaves the old file or the new one, never a torn one.
package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/internal/capped"
)

// RefusedError is a file that is there but not to be used: not a regular
// file, another user's, writable by others, or too large.
type RefusedError struct{ err error }

func (e RefusedError) Error() string { return e.err.Error() }
func (e RefusedError) Unwrap() error { return e.err }

// Read reads the file at path, input from disk trusted no further than it
// is checked: it must be a regular file (opened without following a
// symlink and without blocking, so that a FIFO cannot hang the caller),
// owned by the process's user, not writable by group or others, and of at
// most max bytes. A RefusedError says why a file that is there is not to be
// used; a missing file is fs.ErrNotExist.
func Read(path string, max int64) ([]byte, error) {
	// Lstat first, so that nothing but a regular file is even opened (an
	// open can have effects on a device); the checks are made again on the
	// opened file, which is what is read.
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := checkFile(fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, RefusedError{errors.New("is a symbolic link")}
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := checkFile(fi); err != nil {
		return nil, err
	}
	b, err := capped.Read(f, max)
	if errors.Is(err, capped.ErrTooLarge) {
		return nil, RefusedError{fmt.Errorf("is larger than %d bytes", max)}
	}
	return b, err
}

// checkFile refuses a state file that is not a regular file, is not
// owned by the daemon's user or is writable by group or others.
func checkFile(fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return RefusedError{fmt.Errorf("is not a regular file (%s)", fileType(fi.Mode()))}
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return RefusedError{fmt.Errorf("is owned by uid %d, not by node-resized's uid %d", sys.Uid, os.Geteuid())}
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return RefusedError{fmt.Errorf("is writable by group or others (mode %04o)", perm)}
	}
	return nil
}

// fileType names the type of a file that is not a regular one.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}

// MoveAside moves a refused state file to PATH.corrupt-TIME and returns the
// error that says why and where it went, or, if it cannot be moved, what
// to do.
func MoveAside(path string, now time.Time, why error) error {
	aside := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405"))
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("state file %s %w, and could not be moved aside (%v): remove it; node-resized starts fresh", path, why, err)
	}
	return fmt.Errorf("state file %s %w; moved to %s, node-resized starts fresh", path, why, aside)
}

// RemoveStaleTemps removes the temporary files that a Write cut short
// (the daemon killed between its create and its rename) left beside the
// state file at path, and returns the paths it removed. It is for the
// daemon's start, before any save: it takes only the names Write makes
// (BASE.tmp- and digits), and only regular files owned by the daemon's
// user, so that nothing else in the directory is touched.
func RemoveStaleTemps(path string) ([]string, error) {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+".tmp-"
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state directory %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		suffix, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || suffix == "" || strings.Trim(suffix, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
			continue
		}
		tmp := filepath.Join(dir, e.Name())
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove temporary state file %s: %w", tmp, err))
			continue
		}
		removed = append(removed, tmp)
	}
	return removed, errors.Join(errs...)
}

// Write writes b to path atomically: a temporary file in the same
// directory (created with it, mode 0755, when missing), synced, renamed
// over the old one, and the directory synced.
func Write(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
