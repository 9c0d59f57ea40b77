package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/internal/capped"
)

// DefaultStatePath is where the decision state is kept across restarts.
const DefaultStatePath = "/var/lib/node-resized/state.json"

// maxStateSize caps what LoadState reads: a state file is a few KB.
const maxStateSize = 1 << 20

// LoadState reads the state file; now bounds the times it may hold. A
// missing file is no state (nil, nil). The file is input from disk and
// trusted no further than it is checked: it must be a regular file (not a
// symlink, FIFO, device, socket or directory; it is opened without
// following a symlink and without blocking, so that a FIFO cannot hang
// start-up), of at most maxStateSize bytes, owned by the daemon's user and
// not writable by group or others, and hold a State that decodes and
// passes decide.State.Validate. A file that fails any of these is moved
// aside (to PATH.corrupt-TIME), so that it is kept for inspection and not
// read again, and an error says why; the caller starts from a fresh state.
func LoadState(path string, now time.Time) (*decide.State, error) {
	b, err := readState(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var refused refusedError
	if errors.As(err, &refused) {
		return nil, moveAside(path, now, refused)
	}
	if err != nil {
		return nil, fmt.Errorf("read state file %s: %w", path, err)
	}
	var st decide.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, moveAside(path, now, fmt.Errorf("does not decode: %w", err))
	}
	if err := st.Validate(now); err != nil {
		return nil, moveAside(path, now, fmt.Errorf("holds a value out of range: %w", err))
	}
	return &st, nil
}

// refusedError is a state file that is there but not to be used.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

// readState opens and reads the state file at path as LoadState
// describes; a refusedError says why the file is not to be used.
func readState(path string) ([]byte, error) {
	// Lstat first, so that nothing but a regular file is even opened (an
	// open can have effects on a device); the checks are made again on the
	// opened file, which is what is read.
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := checkStateFile(fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, refusedError{errors.New("is a symbolic link")}
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := checkStateFile(fi); err != nil {
		return nil, err
	}
	b, err := capped.Read(f, maxStateSize)
	if errors.Is(err, capped.ErrTooLarge) {
		return nil, refusedError{fmt.Errorf("is larger than %d bytes", maxStateSize)}
	}
	return b, err
}

// checkStateFile refuses a state file that is not a regular file, is not
// owned by the daemon's user or is writable by group or others.
func checkStateFile(fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return refusedError{fmt.Errorf("is not a regular file (%s)", fileType(fi.Mode()))}
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return refusedError{fmt.Errorf("is owned by uid %d, not by node-resized's uid %d", sys.Uid, os.Geteuid())}
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return refusedError{fmt.Errorf("is writable by group or others (mode %04o)", perm)}
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

// moveAside moves a refused state file to PATH.corrupt-TIME and returns the
// error that says why and where it went, or, if it cannot be moved, what
// to do.
func moveAside(path string, now time.Time, why error) error {
	aside := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405"))
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("state file %s %w, and could not be moved aside (%v): remove it; node-resized starts fresh", path, why, err)
	}
	return fmt.Errorf("state file %s %w; moved to %s, node-resized starts fresh", path, why, aside)
}

// RemoveStaleTemps removes the temporary files that a SaveState cut short
// (the daemon killed between its create and its rename) left beside the
// state file at path, and returns the paths it removed. It is for the
// daemon's start, before any save: it takes only the names SaveState makes
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

// SaveState writes the state file atomically: a temporary file in the same
// directory, synced, renamed over the old one, and the directory synced, so
// that a crash leaves the old state or the new one, never a torn file.
func SaveState(path string, st decide.State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary state file in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(append(b, '\n')); err != nil {
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

// RemoveState removes the state file and the temporary files a SaveState
// cut short left beside it, so that a daemon started later (a
// reinstall) decides from scratch rather than resume a state whose clamp
// and condition an uninstall took away. It reports whether the state file
// existed. Files an unreadable state was moved aside to
// (PATH.corrupt-TIME) are kept for inspection; a package purge removes
// the directory.
func RemoveState(path string) (bool, error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read state directory %s: %w", dir, err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), base+".tmp-") {
			continue
		}
		tmp := filepath.Join(dir, e.Name())
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove temporary state file %s: %w", tmp, err)
		}
	}
	err = os.Remove(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("remove state file %s: %w", path, err)
	}
	return true, nil
}
