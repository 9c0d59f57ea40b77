package topology

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// statfsSize is the size of the filesystem holding dir as cAdvisor
// computes it, read here independently of the code under test.
func statfsSize(t testing.TB, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Frsize) * st.Blocks
}

func TestEphemeralStorage(t *testing.T) {
	dir := t.TempDir()
	want := statfsSize(t, dir)
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

// FS.EphemeralStorage, the filesystem watch's poll, is the snapshot's
// figure: the same statfs, the same walk up to an existing parent, 0 and
// no error when nothing is measured, an error that names the directory
// when it cannot be measured.
func TestEphemeralStorageAlone(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want := statfsSize(t, dir)
	base := newFixtureFS(t, scenarios()[0].fix)
	for _, c := range []struct {
		root    string
		want    uint64
		wantErr string
	}{
		{dir, want, ""},
		{filepath.Join(dir, "kubelet/not/yet"), want, ""},
		{"", 0, ""},
		{filepath.Join(file, "kubelet"), 0, "statfs " + filepath.Join(file, "kubelet") + ": not a directory"},
	} {
		fsys := base.WithKubeletRootDir(c.root)
		got, err := fsys.EphemeralStorage()
		if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && err.Error() != c.wantErr) {
			t.Errorf("%q: EphemeralStorage() = %d, %v; want %d, %q", c.root, got, err, c.want, c.wantErr)
		}
		s, err := fsys.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if s.EphemeralStorage != got || s.EphemeralStorageError != c.wantErr {
			t.Errorf("%q: the snapshot says %d, %q; EphemeralStorage() %d", c.root, s.EphemeralStorage, s.EphemeralStorageError, got)
		}
	}
	if _, err := (FS{}).WithKubeletRootDir(dir).EphemeralStorage(); err == nil {
		t.Error("EphemeralStorage() of an FS not made by NewFS: no error")
	}
}

// Update re-reads the kubelet root filesystem's size as one of the
// totals, with or without devices named: a filesystem grown online is in
// the incremental model the filesystem watch's rebuild makes, and so is a
// measurement that came back after a failure, or one that now fails.
// UpdateCPUs leaves it as it was (it reads only the CPUs).
func TestUpdateRereadsEphemeralStorage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	size := statfsSize(t, dir)
	base := newFixtureFS(t, scenarios()[0].fix)
	fsys := base.WithKubeletRootDir(dir)
	now := snapshotOf(t, fsys)
	failing := base.WithKubeletRootDir(filepath.Join(file, "kubelet"))
	for _, c := range []struct {
		name      string
		fsys      FS
		prevSize  uint64
		prevErr   string
		wantSize  uint64
		wantError bool
	}{
		{"grown", fsys, size / 2, "", size, false},
		{"shrunk", fsys, size * 2, "", size, false},
		{"measured again", fsys, 0, "statfs " + dir + ": permission denied", size, false},
		{"no longer measured", failing, size, "", 0, true},
	} {
		for _, devs := range [][]Device{nil, {{DeviceCPU, 0}}} {
			prev := cloneSnapshot(now)
			prev.EphemeralStorage, prev.EphemeralStorageError = c.prevSize, c.prevErr
			got, full, err := c.fsys.Update(prev, devs)
			if err != nil || full != "" {
				t.Fatalf("%s, devices %v: Update: %q, %v; want incremental", c.name, devs, full, err)
			}
			if got.EphemeralStorage != c.wantSize || (got.EphemeralStorageError != "") != c.wantError {
				t.Errorf("%s, devices %v: Update read %d, %q; want %d, error %v", c.name, devs,
					got.EphemeralStorage, got.EphemeralStorageError, c.wantSize, c.wantError)
			}
			if !hasChange(Diff(prev, got), ChangeEphemeralStorage) {
				t.Errorf("%s, devices %v: Diff %v has no %s", c.name, devs, Diff(prev, got), ChangeEphemeralStorage)
			}
			cpus, why, err := c.fsys.UpdateCPUs(prev, devs)
			if err != nil || why != "" {
				t.Fatalf("%s, devices %v: UpdateCPUs: %q, %v", c.name, devs, why, err)
			}
			if cpus.EphemeralStorage != prev.EphemeralStorage || cpus.EphemeralStorageError != prev.EphemeralStorageError {
				t.Errorf("%s, devices %v: UpdateCPUs read the filesystem: %d, %q", c.name, devs, cpus.EphemeralStorage, cpus.EphemeralStorageError)
			}
		}
	}
}

func hasChange(cs Changes, kind string) bool {
	return slices.ContainsFunc(cs, func(c Change) bool { return c.Kind == kind })
}
