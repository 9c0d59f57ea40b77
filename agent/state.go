package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/internal/statefile"
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
	b, err := statefile.Read(path, maxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var refused statefile.RefusedError
	if errors.As(err, &refused) {
		return nil, statefile.MoveAside(path, now, refused)
	}
	if err != nil {
		return nil, fmt.Errorf("read state file %s: %w", path, err)
	}
	var st decide.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, statefile.MoveAside(path, now, fmt.Errorf("does not decode: %w", err))
	}
	if err := st.Validate(now); err != nil {
		return nil, statefile.MoveAside(path, now, fmt.Errorf("holds a value out of range: %w", err))
	}
	return &st, nil
}

// RemoveStaleTemps removes the temporary files that a SaveState cut short
// (the daemon killed between its create and its rename) left beside the
// state file at path, and returns the paths it removed (see
// statefile.RemoveStaleTemps).
func RemoveStaleTemps(path string) ([]string, error) { return statefile.RemoveStaleTemps(path) }

// SaveState writes the state file atomically: a temporary file in the same
// directory, synced, renamed over the old one, and the directory synced, so
// that a crash leaves the old state or the new one, never a torn file.
func SaveState(path string, st decide.State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := statefile.Write(path, append(b, '\n')); err != nil {
		return fmt.Errorf("save state: %w", err)
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
