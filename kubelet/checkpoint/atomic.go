package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/node-resized/node-resized/internal/capped"
)

// BackupSuffix names the copy of a checkpoint kept beside it when node-resized
// rewrites it: cpu_manager_state.node-resized.bak.
const BackupSuffix = ".node-resized.bak"

// ErrChanged is wrapped by the error a plan's Apply returns when
// the file is no longer the one the plan was made from (the kubelet wrote
// it meanwhile): plan again.
var ErrChanged = errors.New("checkpoint changed since it was read")

// readCheckpointFile reads a checkpoint, capped at maxSize.
func readCheckpointFile(path string) ([]byte, error) {
	return capped.ReadFile(path, maxSize)
}

// replaceCheckpoint replaces the checkpoint at path, whose contents must
// still be old, with data: old is first kept at path+BackupSuffix, then
// data written to a temporary file in the same directory, synced, and
// renamed over path, and the directory synced. A reader sees the old file
// or the new one, never a mix.
func replaceCheckpoint(path string, old, data []byte) error {
	cur, err := readCheckpointFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !bytes.Equal(cur, old) {
		return fmt.Errorf("replace %s: %w", path, ErrChanged)
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if old != nil {
		if err := writeAtomic(path+BackupSuffix, old, mode); err != nil {
			return err
		}
	}
	return writeAtomic(path, data, mode)
}

// writeAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory.
func writeAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", f.Name(), path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
