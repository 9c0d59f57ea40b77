package cases

import (
	"embed"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// The starting checkpoints of the kubelets a downgrade comes from:
// testdata/<kubelet>/<checkpoint file>/<case>, each written by that
// kubelet's own state package (CheckStarting).
//
//go:embed testdata
var testdata embed.FS

func readStarting(t *testing.T, k Kubelet, file, name string) []byte {
	t.Helper()
	b, err := testdata.ReadFile(path.Join("testdata", k.dir(), file, name))
	if err != nil {
		t.Fatalf("the starting checkpoint %s wrote for %s: %v (made by CheckStarting in %s's parity module)", k, name, err, k.Version)
	}
	return b
}

// CheckStarting writes the starting checkpoint of every case k can hold
// with k's own code (kubelet cpu and mem), checks each as RunCPU and
// RunMemory do, and holds it against the file committed under testdata/,
// which the downgrade tests of the next older kubelet rewrite and load:
// they must be byte for byte what k writes. With update, it writes them
// there instead (go test -run TestStartingCheckpoints -update in k's
// parity module), having removed k's old files.
func CheckStarting(t *testing.T, k Kubelet, cpu CPUKubelet, mem MemoryKubelet, update bool) {
	t.Helper()
	if err := k.check(); err != nil {
		t.Fatal(err)
	}
	root := path.Join("testdata", k.dir())
	if update {
		_, src, _, ok := runtime.Caller(0)
		if !ok {
			t.Fatal("no source directory to update")
		}
		if err := os.RemoveAll(filepath.Join(filepath.Dir(src), filepath.FromSlash(root))); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	check := func(file, name string, write func(dir string)) {
		want = append(want, path.Join(root, file, name))
		t.Run(file+"/"+name, func(t *testing.T) {
			dir := t.TempDir()
			write(dir)
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			rel := path.Join(root, file, name)
			if update {
				_, src, _, _ := runtime.Caller(0)
				dst := filepath.Join(filepath.Dir(src), filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			old, err := testdata.ReadFile(rel)
			if err != nil {
				t.Fatalf("%v: run go test -run TestStartingCheckpoints -update in %s's parity module", err, k.Version)
			}
			if string(old) != string(b) {
				t.Errorf("%s now writes\n%s\nnot, as %s holds,\n%s\nrun go test -run TestStartingCheckpoints -update in its parity module", k, b, rel, old)
			}
		})
	}
	for _, c := range CPUCases() {
		if c.runsOn(k) {
			check(CPUFile, c.Name, func(dir string) { writeCPUStart(t, k, cpu, dir, c) })
		}
	}
	for _, c := range MemoryCases() {
		if c.runsOn(k) && !c.Infeasible {
			check(MemoryFile, c.Name, func(dir string) { writeMemoryStart(t, k, mem, dir, c) })
		}
	}
	if update {
		return
	}
	// No file a case no longer writes.
	var have []string
	_ = fs.WalkDir(testdata, root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			have = append(have, p)
		}
		return nil
	})
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Errorf("testdata holds %v for %s, the cases write %v: run go test -run TestStartingCheckpoints -update in its parity module", have, k, want)
	}
}

func dumpJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
