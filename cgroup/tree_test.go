package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tree is a synthetic cgroup v2 hierarchy in a temporary directory, laid
// out as the kernel lays out a node whose kubelet has started: the root
// with its controllers, kubepods with the kubelet's limits, burstable and
// besteffort below it, and pod cgroups.
type tree struct {
	root  string
	paths Paths
}

// Values the kubelet wrote at start on a 4-CPU, 8 GiB machine with 1 GiB
// reserved.
const (
	bootMemoryMax = "7516192768"
	bootWeight    = "157" // 4 CPUs: 4096 shares
	bootPids      = "4194304"
)

const gib = int64(1) << 30

// v2Controllers is cgroup.controllers of a kernel with every controller.
const v2Controllers = "cpuset cpu io memory hugetlb pids rdma misc"

func newTree(t *testing.T, driver, cgroupRoot string) *tree {
	t.Helper()
	root := t.TempDir()
	p, err := ResolvePaths(root, driver, cgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{root: root, paths: p}
	tr.writeGroup(t, root, map[string]string{
		"cgroup.subtree_control": v2Controllers,
		"cpuset.cpus.effective":  "0-3",
		"cpuset.mems.effective":  "0",
	})
	// Directories between the root and kubepods (a custom cgroupRoot, the
	// systemd slices above kubepods.slice).
	for dir := filepath.Dir(p.Kubepods.Dir); len(dir) > len(root); dir = filepath.Dir(dir) {
		tr.writeGroup(t, dir, map[string]string{"cgroup.subtree_control": v2Controllers})
	}
	tr.writeGroup(t, p.Kubepods.Dir, map[string]string{
		"cgroup.subtree_control": v2Controllers,
		"memory.max":             bootMemoryMax,
		"memory.swap.max":        "0",
		"memory.events":          "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\noom_group_kill 0\n",
		"cpu.weight":             bootWeight,
		"cpu.max":                "max 100000",
		"pids.max":               bootPids,
		"hugetlb.2MB.max":        "0",
		"hugetlb.2MB.rsvd.max":   "0",
		"hugetlb.1GB.max":        "0",
		"hugetlb.1GB.rsvd.max":   "0",
		"cgroup.freeze":          "0",
	})
	for _, g := range []Group{p.Burstable, p.BestEffort} {
		tr.writeGroup(t, g.Dir, map[string]string{
			"cgroup.subtree_control": v2Controllers,
			"memory.max":             "max",
			"cpu.weight":             "1",
			"pids.max":               "max",
		})
	}
	return tr
}

// writeGroup makes a cgroup directory with the files every cgroup has.
func (tr *tree) writeGroup(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	base := map[string]string{
		"cgroup.controllers":    v2Controllers,
		"cgroup.procs":          "",
		"cpuset.cpus":           "",
		"cpuset.cpus.effective": "0-3",
		"memory.current":        "0",
		"memory.stat":           "anon 0\nfile 0\nactive_file 0\ninactive_file 0\n",
	}
	for k, v := range files {
		base[k] = v
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range base {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// set writes one file of the tree (dir absolute).
func (tr *tree) set(t *testing.T, dir, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// get reads one file of the tree, without its trailing newline.
func (tr *tree) get(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// addPod makes the cgroup of one pod with its memory usage.
func (tr *tree) addPod(t *testing.T, uid, qos string, current, inactiveFile uint64) string {
	t.Helper()
	g, err := tr.paths.Pod(uid, qos)
	if err != nil {
		t.Fatal(err)
	}
	tr.writeGroup(t, g.Dir, map[string]string{
		"memory.current": itoa(current),
		"memory.stat":    "anon 1\nfile 2\nactive_file 3\ninactive_file " + itoa(inactiveFile) + "\nunevictable 0\n",
	})
	return g.Dir
}

var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// age sets every file's modification time to epoch, so that a later write
// shows.
func (tr *tree) age(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(tr.root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, epoch, epoch)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// touched lists the files written since age.
func (tr *tree) touched(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(tr.root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.ModTime().Equal(epoch) {
			rel, _ := filepath.Rel(tr.root, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
