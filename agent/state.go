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
)

// DefaultStatePath is where the decision state is kept across restarts.
const DefaultStatePath = "/var/lib/node-resized/state.json"

// LoadState reads the state file. A missing file is no state (nil, nil). A
// file that cannot be decoded is moved aside (to PATH.corrupt-TIME) so that
// it is kept for inspection and not read again, and an error says so.
func LoadState(path string) (*decide.State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state file %s: %w", path, err)
	}
	var st decide.State
	if err := json.Unmarshal(b, &st); err != nil || st.Version > decide.StateVersion {
		aside := fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405"))
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("state file %s is unreadable (%v) and could not be moved aside: %w", path, err, rerr)
		}
		if err == nil {
			err = fmt.Errorf("state version %d is newer than this daemon's %d", st.Version, decide.StateVersion)
		}
		return nil, fmt.Errorf("state file %s is unreadable, moved to %s: %w", path, aside, err)
	}
	return &st, nil
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
