package topology

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEphemeralStorage(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := uint64(st.Frsize) * st.Blocks
	base := newFixtureFS(t, scenarios()[0].fix)
	for _, root := range []string{dir, filepath.Join(dir, "kubelet/not/yet")} {
		s, err := base.WithKubeletRootDir(root).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if s.EphemeralStorage != want || capacityOf(s).EphemeralStorage != want {
			t.Errorf("%s: ephemeral storage %d, capacity %d; want %d", root, s.EphemeralStorage, capacityOf(s).EphemeralStorage, want)
		}
	}
	s, err := base.WithKubeletRootDir("").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.EphemeralStorage != 0 {
		t.Errorf("not measured: %d", s.EphemeralStorage)
	}
}
