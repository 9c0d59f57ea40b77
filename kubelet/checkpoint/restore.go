package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/node-resized/node-resized/internal/capped"
)

// RestoreCPUManager puts the CPU manager checkpoint at path back as its
// backup (path+BackupSuffix) holds it; see restore.
func RestoreCPUManager(path string) (string, error) { return cpuManager.restore(path) }

// RestoreMemoryManager puts the memory manager checkpoint at path back as
// its backup holds it; see restore.
func RestoreMemoryManager(path string) (string, error) { return memoryManager.restore(path) }

// restore replaces the checkpoint at path with its backup, atomically (a
// reader sees the file before or the backup, never a mix), and returns the
// sha256 of what it wrote, in hex. The backup is untrusted: it is used
// only when it is a regular file (a symlink or a FIFO is not followed or
// opened for reading), at most maxSize, and a checkpoint of this kind
// that the kubelet would load (its checksum matches). The backup is kept.
func (c codec[S]) restore(path string) (string, error) {
	if path == "" {
		path = c.defaultPath
	}
	bak := path + BackupSuffix
	f, err := os.OpenFile(bak, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("restore %s from its backup: %w", c.name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("restore %s from its backup: %w", c.name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("restore %s: its backup %s is not a regular file (%s)", c.name, bak, fi.Mode().Type())
	}
	b, err := capped.Read(f, maxSize)
	if err != nil {
		return "", fmt.Errorf("restore %s from its backup: %w", c.name, err)
	}
	if _, err := c.parse(b); err != nil {
		return "", fmt.Errorf("restore %s: its backup %s is not one the kubelet loads: %w", c.name, bak, err)
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := writeAtomic(path, b, mode); err != nil {
		return "", fmt.Errorf("restore %s from its backup: %w", c.name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
