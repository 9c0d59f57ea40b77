package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomicLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := writeAtomic(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the way: the rename fails and the temporary file goes.
	if err := writeAtomic(filepath.Join(dir, "d", "g"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "keep"), nil, 0o600)
	if err := writeAtomic(filepath.Join(dir, "sub"), []byte("x"), 0o600); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want f and sub", len(entries))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
}
