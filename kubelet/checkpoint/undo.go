package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/node-resized/node-resized/internal/capped"
)

// Undo puts back the checkpoint an applied plan replaced: the file Apply
// kept at Path+BackupSuffix, whose bytes the plan still holds, written
// atomically over Path. It fails, wrapping ErrChanged, when Path is no
// longer the file Apply wrote (the kubelet wrote it meanwhile), and does
// nothing for a plan that changed nothing.
func (p *Plan[S]) Undo() error {
	if !p.Changed {
		return nil
	}
	cur, err := capped.ReadFile(p.Path, maxSize)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undo the rewrite of %s: %w", p.Path, err)
	}
	if !bytes.Equal(cur, p.data) {
		return fmt.Errorf("undo the rewrite of %s: %w", p.Path, ErrChanged)
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p.Path); err == nil {
		mode = fi.Mode().Perm()
	}
	return writeAtomic(p.Path, p.old, mode)
}
