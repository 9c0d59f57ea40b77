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

// replace replaces the checkpoint at path, whose contents must still be
// old, with data: old is first kept at path+BackupSuffix, then data written
// to a temporary file in the same directory, synced, and renamed over
// path, and the directory synced. A reader sees the old file or the new
// one, never a mix.
func replace(path string, old, data []byte) error {
	cur, err := capped.ReadFile(path, maxSize)
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

// WriteFileAtomic writes data to path as a checkpoint is written: through
// a synced temporary file in the same directory, a rename and a synced
// directory. It is for the files kept beside the checkpoints.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
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
