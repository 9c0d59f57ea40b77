package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

// The trees of machines other than x86 (see powerMachine and
// s390xMachine in scenarios_test.go, whose capacity TestCapacityScenarios
// and TestCAdvisorReference check). make test-cross runs these tests
// built for arm64, ppc64le and s390x, where cAdvisor reads what the
// kubelet of that architecture reads.

// cores groups a node's CPUs into cores as cAdvisor does, by every id
// they share: "drawerD/bookB/socketS/coreC" to the CPU ids.
func cores(n Node) map[string][]int {
	m := map[string][]int{}
	for _, c := range n.CPUs {
		k := fmt.Sprintf("drawer%d/book%d/socket%d/core%d", c.DrawerID, c.BookID, c.SocketID, c.CoreID)
		m[k] = append(m[k], c.ID)
	}
	return m
}

// TestPowerSMT8 reads the POWER LPAR: eight threads to a core under the
// core_id of the first, no package id, 256 MiB blocks; an update after a
// thread comes back online finds what a full read finds.
func TestPowerSMT8(t *testing.T) {
	tree := powerMachine().WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string][]int{
		{"drawer0/book0/socket-1/core0": topologytest.Ints(0, 7), "drawer0/book0/socket-1/core8": topologytest.Ints(8, 15)},
		{"drawer0/book0/socket-1/core16": topologytest.Ints(16, 23), "drawer0/book0/socket-1/core24": topologytest.Ints(24, 27)},
	}
	if len(s.Nodes) != len(want) {
		t.Fatalf("%d nodes, want %d", len(s.Nodes), len(want))
	}
	for i, n := range s.Nodes {
		if got := cores(n); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("node%d cores %v, want %v", n.ID, got, want[i])
		}
	}
	if s.MemoryBlockSize != 256*miB {
		t.Errorf("memory block size %d, want 256 MiB", s.MemoryBlockSize)
	}
	if n := len(s.MemoryBlocks); n != 72 {
		t.Errorf("%d memory blocks, want 72", n)
	}
	if got, want := s.CPUs.Offline.String(), "28-63"; got != want {
		t.Errorf("offline %s, want %s", got, want)
	}

	tree.SetCPUOnline(28, true)
	checkUpdate(t, fsys, s, []Device{{DeviceCPU, 28}})
}

// checkUpdate requires Update of devs after prev to be incremental and to
// find what a full Snapshot finds.
func checkUpdate(t *testing.T, fsys FS, prev *Snapshot, devs []Device) {
	t.Helper()
	got, full, err := fsys.Update(prev, devs)
	if err != nil {
		t.Fatal(err)
	}
	if full != "" {
		t.Errorf("Update of %v read everything: %s", devs, full)
	}
	want, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Update of %v\n got %+v\nwant %+v", devs, got, want)
	}
}

// TestS390xBooksAndDrawers reads the s390x LPAR as the FS reads it on
// s390x (books on, whatever this test is built for): each CPU with its
// book and drawer, a core the CPUs that share every id, so that the two
// sockets 1 (in books 1 and 3) stay apart; the files only s390 has
// (polarization, dedicated, dispatching, the book and drawer siblings)
// are left alone. Off, as on every other architecture, the two ids are
// not read.
func TestS390xBooksAndDrawers(t *testing.T) {
	tree := s390xMachine(true).WriteTree(t, topologytest.Dir(t))
	fsys, err := NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	fsys.books = true
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{
		"drawer1/book1/socket1/core0":  {0, 1},
		"drawer1/book1/socket1/core1":  {2, 3},
		"drawer1/book1/socket1/core2":  {4, 5},
		"drawer1/book1/socket2/core3":  {6, 7},
		"drawer1/book1/socket2/core4":  {8, 9},
		"drawer2/book3/socket1/core8":  {10, 11},
		"drawer2/book3/socket1/core9":  {12, 13},
		"drawer2/book3/socket1/core10": {14},
	}
	if got := cores(s.Nodes[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("cores %v, want %v", got, want)
	}
	if s.MemoryBlockSize != 256*miB {
		t.Errorf("memory block size %d, want 256 MiB", s.MemoryBlockSize)
	}
	if got := s.Hugepages; !reflect.DeepEqual(got, []Hugepages{{PageSize: miB, Count: 64}}) {
		t.Errorf("hugepages %+v, want 64 of 1 MiB", got)
	}

	// cpu15 comes back: the update reads its book and drawer too.
	tree.SetCPUOnline(15, true)
	checkUpdate(t, fsys, s, []Device{{DeviceCPU, 15}})

	fsys.books = false
	s, err = fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Nodes[0].CPUs {
		if c.BookID != 0 || c.DrawerID != 0 {
			t.Fatalf("cpu%d: book %d drawer %d read with books off", c.ID, c.BookID, c.DrawerID)
		}
	}
	if n := len(s.Nodes[0].CPUs); n != 16 {
		t.Errorf("%d CPUs with books off, want 16", n)
	}
}

// TestS390xWithoutBookFiles reads an s390 tree whose kernel wrote no
// book_id and drawer_id (arch/s390/include/asm/topology.h defines
// topology_book_id only with CONFIG_SCHED_TOPOLOGY). cAdvisor built for
// s390x skips every CPU that lacks them, so the kubelet's node has no CPU;
// the FS counts what cAdvisor counts on the architecture the test is built
// for, and both agree with the CAdvisor reference there.
func TestS390xWithoutBookFiles(t *testing.T) {
	m := s390xMachine(true)
	m.NoBooks = true
	sys, proc := m.Write(t, topologytest.Dir(t))
	fsys, err := NewFS(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	for _, books := range []bool{true, false} {
		fsys.books = books
		s, err := fsys.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		want := 15
		if books {
			want = 0
		}
		if got := s.Capacity()["cpu"]; got != int64(want)*1000 {
			t.Errorf("books %v: cpu %d millicores, want %d CPUs", books, got, want)
		}
	}

	fsys, err = NewFS(sys, proc) // books as on this architecture
	if err != nil {
		t.Fatal(err)
	}
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := cadvisorThroughAdapter(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	compareViews(t, fmt.Sprintf("no book_id (books %v)", fsys.books), ourView(s), ref)
}

// TestMachineShapes checks that the trees are what their comments say:
// SMT8 threads in thread_siblings_list, no package id, the s390 files
// and levels, 256 MiB in block_size_bytes.
func TestMachineShapes(t *testing.T) {
	check := func(sys string, want map[string]string) {
		t.Helper()
		for path, w := range want {
			b, err := os.ReadFile(filepath.Join(sys, path))
			if err != nil {
				t.Error(err)
			} else if got := strings.TrimSpace(string(b)); got != w {
				t.Errorf("%s: %q, want %q", path, got, w)
			}
		}
	}
	sys, _ := powerMachine().Write(t, topologytest.Dir(t))
	check(sys, map[string]string{
		"devices/system/cpu/cpu9/topology/thread_siblings_list":  "8-15",
		"devices/system/cpu/cpu9/topology/core_id":               "8",
		"devices/system/cpu/cpu9/topology/physical_package_id":   "-1",
		"devices/system/cpu/cpu25/topology/thread_siblings_list": "24-27",
		"devices/system/cpu/cpu31/online":                        "0",
		"devices/system/cpu/possible":                            "0-63",
		"devices/system/cpu/present":                             "0-31",
		"devices/system/node/node0/cpu3/topology/core_id":        "0",
		"devices/system/node/node1/cpulist":                      "16-31",
		"devices/system/memory/block_size_bytes":                 "10000000",
		"devices/system/memory/memory71/state":                   "offline",
	})
	sys, _ = s390xMachine(false).Write(t, topologytest.Dir(t))
	check(sys, map[string]string{
		"devices/system/cpu/cpu10/topology/book_id":              "3",
		"devices/system/cpu/cpu10/topology/drawer_id":            "2",
		"devices/system/cpu/cpu10/topology/physical_package_id":  "1",
		"devices/system/cpu/cpu10/topology/core_id":              "8",
		"devices/system/cpu/cpu10/topology/thread_siblings_list": "10-11",
		"devices/system/cpu/cpu10/topology/core_siblings_list":   "10-14",
		"devices/system/cpu/cpu10/topology/book_siblings_list":   "10-14",
		"devices/system/cpu/cpu0/topology/drawer_siblings_list":  "0-9",
		"devices/system/cpu/cpu15/polarization":                  "horizontal",
		"devices/system/cpu/dispatching":                         "0",
		"devices/system/memory/block_size_bytes":                 "10000000",
		"kernel/mm/hugepages/hugepages-1024kB/nr_hugepages":      "64",
	})
	if _, err := os.Stat(filepath.Join(sys, "devices/system/node")); !os.IsNotExist(err) {
		t.Errorf("the s390x tree without NUMA has node directories (%v)", err)
	}
}
