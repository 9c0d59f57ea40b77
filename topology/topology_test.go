package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/internal/cpu1test"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology/topologytest"
)

const (
	kiB = 1024
	miB = 1024 * kiB
	giB = 1024 * miB
)

// newFixtureFS writes f under a temporary directory and opens it.
func newFixtureFS(t testing.TB, f topologytest.Machine) FS {
	t.Helper()
	sys, proc := f.Write(t, topologytest.Dir(t))
	fsys, err := NewFS(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func TestCapacityScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			s, err := newFixtureFS(t, sc.fix).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			got := capacityOf(s)
			if !reflect.DeepEqual(got, sc.want) {
				t.Errorf("capacity\n got %+v\nwant %+v", got, sc.want)
			}
		})
	}
}

func TestSnapshotOfflineCPUs(t *testing.T) {
	s, err := newFixtureFS(t, scenarios()[0].fix).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		got  CPUSet
		want string
	}{
		"online":   {s.CPUs.Online, "0-2,4-5,7"},
		"offline":  {s.CPUs.Offline, "3,6"},
		"present":  {s.CPUs.Present, "0-7"},
		"possible": {s.CPUs.Possible, "0-7"},
		"devices":  {s.CPUs.Devices, "0-7"},
	} {
		if c.got.String() != c.want {
			t.Errorf("%s = %q, want %q", name, c.got, c.want)
		}
	}
	wantNodes := []Node{
		{ID: 0, CPUs: []CPU{{ID: 0, CoreID: 0, SocketID: 0}, {ID: 1, CoreID: 0, SocketID: 0}, {ID: 2, CoreID: 1, SocketID: 0}}, MemTotal: 4000000 * 1024,
			Hugepages: []Hugepages{{2 * miB, 0}}, Distances: []int{10, 20}},
		{ID: 1, CPUs: []CPU{{ID: 4, CoreID: 0, SocketID: 1}, {ID: 5, CoreID: 0, SocketID: 1}, {ID: 7, CoreID: 1, SocketID: 1}}, MemTotal: 4100000 * 1024,
			Hugepages: []Hugepages{{2 * miB, 0}}, Distances: []int{20, 10}},
	}
	if !reflect.DeepEqual(s.Nodes, wantNodes) {
		t.Errorf("nodes\n got %+v\nwant %+v", s.Nodes, wantNodes)
	}
	if s.MemoryBlockSize != 128*miB || len(s.MemoryBlocks) != 64 {
		t.Fatalf("block size %d, %d blocks; want 128MiB, 64", s.MemoryBlockSize, len(s.MemoryBlocks))
	}
	for _, c := range []MemoryBlock{
		{ID: 0, State: "online", Zone: "DMA32", Node: 0},
		{ID: 31, State: "online", Zone: "Normal", Node: 0},
		{ID: 32, State: "online", Zone: "Normal", Node: 1},
		{ID: 60, State: "offline", Zone: "Normal", Node: 1},
	} {
		if got := s.MemoryBlocks[c.ID]; got != c {
			t.Errorf("block %d = %+v, want %+v", c.ID, got, c)
		}
	}
	if s.MemTotal != 8100000*1024 || s.SwapTotal != 0 {
		t.Errorf("MemTotal %d SwapTotal %d", s.MemTotal, s.SwapTotal)
	}
	if want := []Hugepages{{2 * miB, 0}}; !reflect.DeepEqual(s.Hugepages, want) {
		t.Errorf("hugepages %+v, want %+v", s.Hugepages, want)
	}
}

func TestSnapshotOptionalParts(t *testing.T) {
	byName := map[string]scenario{}
	for _, sc := range scenarios() {
		byName[sc.name] = sc
	}

	s, err := newFixtureFS(t, byName["no-node-dirs"].fix).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.Nodes != nil {
		t.Errorf("nodes = %+v, want nil", s.Nodes)
	}
	if s.CPUs.Possible.String() != "0-7" || s.CPUs.Devices.String() != "0-3" || s.CPUs.Offline.String() != "3-7" {
		t.Errorf("cpus %+v", s.CPUs)
	}
	for _, b := range s.MemoryBlocks {
		if b.Node != -1 {
			t.Fatalf("block %d node %d, want -1 without node directories", b.ID, b.Node)
		}
	}

	s, err = newFixtureFS(t, byName["swap-no-memory-dir"].fix).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.SwapTotal != 2*giB {
		t.Errorf("SwapTotal = %d, want 2GiB", s.SwapTotal)
	}
	if s.MemoryBlockSize != 0 || s.MemoryBlocks != nil {
		t.Errorf("memory blocks %d/%v, want none", s.MemoryBlockSize, s.MemoryBlocks)
	}
	if n := s.Nodes[0]; n.MemTotal != 0 || n.Distances != nil || n.Hugepages != nil {
		t.Errorf("node %+v, want no memory, distances or pools", n)
	}

	s, err = newFixtureFS(t, byName["memoryless-node"].fix).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.Hugepages != nil {
		t.Errorf("hugepages %+v, want nil without a hugepages directory", s.Hugepages)
	}
	if n := s.Nodes[2]; len(n.CPUs) != 0 || n.MemTotal != 8*giB {
		t.Errorf("node2 %+v, want no CPUs and 8GiB", n)
	}
	if b := s.MemoryBlocks[70]; b.Node != 2 || b.Zone != "Movable" {
		t.Errorf("block 70 %+v, want node 2 Movable", b)
	}
}

// A block that no node directory links is found through its own nodeN link.
func TestBlockNodeFromBlockLink(t *testing.T) {
	f := scenarios()[0].fix
	f.Extra = func(sys string) {
		if err := os.Remove(filepath.Join(sys, "devices/system/node/node1/memory40")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := newFixtureFS(t, f).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if b := s.MemoryBlocks[40]; b.Node != 1 {
		t.Errorf("block 40 node %d, want 1 from memory40/node1", b.Node)
	}
}

func TestSnapshotRequiredFiles(t *testing.T) {
	for _, c := range []struct {
		name, remove, want string
	}{
		{"cpu online", "sys/devices/system/cpu/online", "devices/system/cpu/online"},
		{"meminfo", "proc/meminfo", "proc/meminfo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := topologytest.Dir(t)
			sys, proc := scenarios()[0].fix.Write(t, root)
			fsys, err := NewFS(sys, proc)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(root, c.remove)); err != nil {
				t.Fatal(err)
			}
			_, err = fsys.Snapshot()
			if err == nil || !strings.Contains(err.Error(), filepath.Join(root, c.remove)) {
				t.Fatalf("Snapshot() error = %v, want one naming %s", err, c.want)
			}
		})
	}
}

func TestSnapshotBadFiles(t *testing.T) {
	for _, c := range []struct{ file, content string }{
		{"sys/devices/system/cpu/online", "0-x\n"},
		{"sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n"},
		{"sys/devices/system/cpu/cpu1/topology/core_id", "one\n"},
		{"sys/devices/system/memory/block_size_bytes", "zz\n"},
		{"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "-1\n"},
		{"proc/meminfo", "MemFree: 1 kB\n"},
	} {
		t.Run(c.file, func(t *testing.T) {
			root := topologytest.Dir(t)
			sys, proc := scenarios()[0].fix.Write(t, root)
			fsys, err := NewFS(sys, proc)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, c.file), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Snapshot(); err == nil || !strings.Contains(err.Error(), filepath.Join(root, c.file)) {
				t.Fatalf("Snapshot() error = %v, want one naming the file", err)
			}
		})
	}
}

func TestNewFSErrors(t *testing.T) {
	dir := topologytest.Dir(t)
	good := filepath.Join(dir, "good")
	sys, proc := scenarios()[0].fix.Write(t, good)
	notSys := filepath.Join(dir, "notsys")
	if err := os.MkdirAll(filepath.Join(notSys, "devices/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sys, proc, want string
		notExist              bool
	}{
		{"missing sys root", filepath.Join(dir, "nope"), proc, "sysfs root " + filepath.Join(dir, "nope") + ": ", true},
		{"sys root without cpu dir", notSys, proc, "sysfs root " + notSys + ": ", true},
		{"sys root is a file", filepath.Join(proc, "meminfo"), proc, "sysfs root ", false},
		{"missing proc root", sys, filepath.Join(dir, "nope"), "procfs root " + filepath.Join(dir, "nope") + ": ", true},
		{"proc root without meminfo", sys, notSys, "procfs root " + notSys + ": ", true},
		{"empty", "", "", "empty", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewFS(c.sys, c.proc)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) && !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewFS(%q, %q) error = %v, want %q", c.sys, c.proc, err, c.want)
			}
			if c.notExist && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %v does not wrap fs.ErrNotExist", err)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
	if _, err := NewFS(sys, proc); err != nil {
		t.Fatal(err)
	}
	if _, err := (FS{}).Snapshot(); err == nil {
		t.Error("zero FS: Snapshot() succeeded")
	}
	if _, err := (FS{}).MemTotal(); err == nil {
		t.Error("zero FS: MemTotal() succeeded")
	}
}

func TestMemTotal(t *testing.T) {
	fsys := newFixtureFS(t, scenarios()[2].fix)
	got, err := fsys.MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	if got != 16700000*1024 {
		t.Errorf("MemTotal() = %d, want %d", got, 16700000*1024)
	}

	// MemTotal not first: the whole file is read.
	if err := os.WriteFile(fsys.meminfo, []byte(strings.Repeat("Padding:   1 kB\n", 40)+"MemTotal: 77 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err = fsys.MemTotal(); err != nil || got != 77*1024 {
		t.Errorf("MemTotal() = %d, %v; want %d", got, err, 77*1024)
	}
	if err := os.WriteFile(fsys.meminfo, []byte("MemFree: 1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = fsys.MemTotal(); err == nil || !strings.Contains(err.Error(), fsys.meminfo) {
		t.Errorf("MemTotal() without MemTotal: error %v", err)
	}
	if err := os.Remove(fsys.meminfo); err != nil {
		t.Fatal(err)
	}
	if _, err = fsys.MemTotal(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), fsys.meminfo) {
		t.Errorf("MemTotal() on a missing file: error %v", err)
	}
}

func TestSnapshotJSON(t *testing.T) {
	s, err := newFixtureFS(t, scenarios()[2].fix).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"cpus":{"online":"0-7","offline":"","present":"0-7","possible":"0-7","devices":"0-7"}`,
		`"memoryBlockSizeBytes":134217728`,
		`{"id":0,"state":"online","zone":"Normal","node":0}`,
		`"hugepages":[{"pageSizeBytes":2097152,"count":768},{"pageSizeBytes":1073741824,"count":2}]`,
		`{"id":5,"coreId":2,"socketId":0}`,
		`"memTotalBytes":17100800000`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.CPUs.Offline != nil {
		t.Errorf("empty set decoded as %#v, want nil", back.CPUs.Offline)
	}
	if !reflect.DeepEqual(&back, s) {
		t.Errorf("JSON round trip differs\n got %+v\nwant %+v", back, *s)
	}
	cb, err := json.Marshal(struct {
		Capacity resources.List `json:"capacity"`
		Nodes    []NodeCapacity `json:"nodes"`
	}{s.Capacity(), s.NodeCapacities()})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"capacity":{"cpu":"8","hugepages-1Gi":"2Gi","hugepages-2Mi":"1536Mi","memory":"16700000Ki"},"nodes":[{"id":0,"capacity":{"cpu":"4","hugepages-1Gi":"2Gi","hugepages-2Mi":"1Gi","memory":"8Gi"}},{"id":1,"capacity":{"cpu":"4","hugepages-1Gi":"0","hugepages-2Mi":"512Mi","memory":"8Gi"}}]}`; string(cb) != want {
		t.Errorf("capacity JSON\n got %s\nwant %s", cb, want)
	}
}

// The machine this runs on: the model must agree with the kernel's own
// lists and with /proc/meminfo.
func TestRealMachine(t *testing.T) {
	cpu1test.Lock(t, false)
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		t.Skipf("no sysfs/procfs here: %v", err)
	}
	if _, err := os.Stat("/sys/devices/system/cpu/cpu0/topology/book_id"); fsys.books && os.IsNotExist(err) {
		t.Skip("built for s390x on a kernel that writes no book_id (another architecture's, under qemu-user): no CPU counts here, as for cAdvisor")
	}
	var s *Snapshot
	onRealMachine(t, func() []string {
		var d []string
		if s, err = fsys.Snapshot(); err != nil {
			t.Fatal(err)
		}
		mt, err := fsys.MemTotal()
		if err != nil {
			t.Fatal(err)
		}
		online, err := ParseCPUSet(readString(t, "/sys/devices/system/cpu/online"))
		if err != nil {
			t.Fatal(err)
		}
		c := capacityOf(s)
		if len(s.Nodes) > 0 && c.CPU != int64(online.Len()) {
			d = append(d, fmt.Sprintf("Capacity().CPU = %d, cpu/online %q has %d", c.CPU, online, online.Len()))
		}
		if !s.CPUs.Online.equal(online) {
			d = append(d, fmt.Sprintf("CPUs.Online = %q, cpu/online %q", s.CPUs.Online, online))
		}
		want := procMemTotal(t)
		if s.MemTotal != want || c.Memory != want || mt != want {
			d = append(d, fmt.Sprintf("MemTotal %d, Capacity().Memory %d, MemTotal() %d; /proc/meminfo says %d", s.MemTotal, c.Memory, mt, want))
		}
		return d
	})
	if s != nil {
		t.Logf("real machine: %d nodes, cpus %s, %d memory blocks of %d MiB, capacity %+v",
			len(s.Nodes), s.CPUs.Online, len(s.MemoryBlocks), s.MemoryBlockSize/miB, s.Capacity())
	}
}

// onRealMachine runs check until the machine held still while it ran
// (cpu/online and MemTotal the same before and after) and check found no
// difference, at most five times: another test may be hot-plugging cpu1
// meanwhile. It fails with the last differences only if they were seen on
// a machine that held still every time.
func onRealMachine(t *testing.T, check func() []string) {
	t.Helper()
	var last []string
	stillEveryTime := true
	for range 5 {
		before, mtBefore := readString(t, "/sys/devices/system/cpu/online"), procMemTotal(t)
		diffs := check()
		still := before == readString(t, "/sys/devices/system/cpu/online") && mtBefore == procMemTotal(t)
		if still && len(diffs) == 0 {
			return
		}
		stillEveryTime = stillEveryTime && still
		last = diffs
	}
	if !stillEveryTime {
		t.Skip("the machine kept changing while the test read it")
	}
	for _, d := range last {
		t.Error(d)
	}
}

func readString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procMemTotal reads MemTotal the plain way.
func procMemTotal(t testing.TB) uint64 {
	for _, line := range strings.Split(readString(t, "/proc/meminfo"), "\n") {
		var kb uint64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

func TestSnapshotCPUsReusesOnlyMemoryBlocks(t *testing.T) {
	f := topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 4, 0, 0),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: []int{0, 1, 2, 3}, MemKB: 1 << 20}},
		BlockSize: 128 << 20,
		Blocks:    topologytest.Blocks(0, 8, "online", "Normal", 0),
		MemKB:     1 << 20,
	}
	sys, proc := f.Write(t, topologytest.Dir(t))
	fsys, err := NewFS(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// cpu3 goes offline and block 7 too; only the CPU part is re-read.
	write := func(path, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(sys, path), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/cpu/online", "0-2\n")
	write("devices/system/memory/memory7/state", "offline\n")
	got, err := fsys.SnapshotCPUs(prev)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPUs.Online.String() != "0-2" || capacityOf(got).CPU != 3 {
		t.Errorf("SnapshotCPUs: online %s cpu %d, want 0-2 and 3", got.CPUs.Online, capacityOf(got).CPU)
	}
	if got.MemoryBlocks[7].State != BlockOnline {
		t.Errorf("SnapshotCPUs re-read memory block 7: %s", got.MemoryBlocks[7].State)
	}
	full, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if full.MemoryBlocks[7].State != BlockOffline {
		t.Errorf("Snapshot: block 7 %s, want offline", full.MemoryBlocks[7].State)
	}
	if d := Diff(got, full); len(d) != 1 || d[0].Kind != ChangeMemoryBlockOffline {
		t.Errorf("Diff(SnapshotCPUs, Snapshot) = %v, want only the block change", d)
	}
}
