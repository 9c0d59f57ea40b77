package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRestoreFromBackup(t *testing.T) {
	good, err := os.ReadFile("testdata/cpu_manager_state/v4")
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := os.ReadFile("testdata/cpu_manager_state/v4-badsum")
	current := []byte("the rewrite the kubelet refused")
	for _, tc := range []struct {
		name   string
		backup func(t *testing.T, bak string)
		ok     bool
	}{
		{"good", func(t *testing.T, bak string) { write(t, bak, good) }, true},
		{"missing", func(*testing.T, string) {}, false},
		{"corrupt", func(t *testing.T, bak string) { write(t, bak, bad) }, false},
		{"too large", func(t *testing.T, bak string) { write(t, bak, bytes.Repeat([]byte(" "), maxSize+1)) }, false},
		{"symlink", func(t *testing.T, bak string) {
			write(t, bak+".target", good)
			if err := os.Symlink(bak+".target", bak); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"fifo", func(t *testing.T, bak string) {
			if err := syscall.Mkfifo(bak, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory", func(t *testing.T, bak string) { os.Mkdir(bak, 0o755) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cpu_manager_state")
			if err := os.WriteFile(path, current, 0o600); err != nil {
				t.Fatal(err)
			}
			tc.backup(t, path+BackupSuffix)
			sum, err := RestoreCPUManager(path)
			got, _ := os.ReadFile(path)
			if !tc.ok {
				if err == nil || !bytes.Equal(got, current) {
					t.Fatalf("restored from an unusable backup: %v, file now %.40q", err, got)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := sha256.Sum256(good)
			if !bytes.Equal(got, good) || sum != hex.EncodeToString(want[:]) {
				t.Errorf("file %.40q, sum %s; want the backup", got, sum)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, %v; want the file's 0600", fi.Mode(), err)
			}
			if _, err := os.Stat(path + BackupSuffix); err != nil {
				t.Errorf("the backup went: %v", err)
			}
		})
	}
	// The memory manager's backups are checked as its checkpoints.
	path := filepath.Join(t.TempDir(), "memory_manager_state")
	write(t, path+BackupSuffix, good)
	if _, err := RestoreMemoryManager(path); err == nil {
		t.Error("a CPU manager checkpoint restored as the memory manager's")
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
