//go:build linux

package topology

// The reference for capacity is cAdvisor itself: the kubelet's cpu capacity
// is MachineInfo.NumCores (from sysinfo.GetNodesInfo), memory is
// machine.GetMachineMemoryCapacity(), hugepages come from
// sysinfo.GetHugePagesInfo, and the kubelet's memory and topology managers
// take the per-node split from MachineInfo.Topology (GetNodesInfo again).
// These tests run that code on the same trees as ours and require the same
// figures.
//
// cAdvisor's real SysFs reads fixed /sys paths, and its memory capacity the
// fixed /proc/meminfo. Two ways put it on a synthetic tree:
//   - rootSysFs implements the SysFs interface over a root directory; it
//     does only path plumbing, and the arithmetic stays cAdvisor's;
//   - where the test may create a mount namespace (root), the tree is
//     bind-mounted over /sys and /proc/meminfo on one locked thread, so
//     cAdvisor's unmodified realSysFs and GetMachineMemoryCapacity read it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cadvisor/lib/machine"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/internal/cpu1test"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// rootSysFs is cAdvisor's sysfs.SysFs over a sysfs tree at root. Each
// method does what cAdvisor's realSysFs does, with realSysFs's fixed
// "/sys" replaced by root. Methods the compared code does not call are
// left to the nil embedded interface (calling one panics).
type rootSysFs struct {
	sysfs.SysFs
	root string
}

var _ sysfs.SysFs = rootSysFs{}

// abs maps the fixed paths cAdvisor passes in ("/sys/devices/system/cpu",
// "/sys/kernel/mm/hugepages/") to the tree; paths that came from the tree
// (node and cpu directories) are kept.
func (s rootSysFs) abs(p string) string {
	if strings.HasPrefix(p, s.root+"/") {
		return p
	}
	if rest, ok := strings.CutPrefix(p, "/sys/"); ok {
		return s.root + "/" + rest
	}
	return p
}

func (s rootSysFs) readTrimmed(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (s rootSysFs) GetNodesPaths() ([]string, error) {
	return filepath.Glob(s.root + "/devices/system/node/node*[0-9]")
}

func (s rootSysFs) GetCPUsPaths(cpusPath string) ([]string, error) {
	return filepath.Glob(s.abs(cpusPath) + "/cpu*[0-9]")
}

func (s rootSysFs) GetCoreID(cpuPath string) (string, error) {
	return s.readTrimmed(cpuPath + "/topology/core_id")
}

func (s rootSysFs) GetCPUPhysicalPackageID(cpuPath string) (string, error) {
	return s.readTrimmed(cpuPath + "/topology/physical_package_id")
}

// GetBookID and GetDrawerID are what cAdvisor reads on s390x only.
func (s rootSysFs) GetBookID(cpuPath string) (string, error) {
	return s.readTrimmed(cpuPath + "/topology/book_id")
}

func (s rootSysFs) GetDrawerID(cpuPath string) (string, error) {
	return s.readTrimmed(cpuPath + "/topology/drawer_id")
}

func (s rootSysFs) GetMemInfo(nodePath string) (string, error) {
	return s.readTrimmed(nodePath + "/meminfo")
}

func (s rootSysFs) GetDistances(nodePath string) (string, error) {
	return s.readTrimmed(nodePath + "/distance")
}

func (s rootSysFs) GetHugePagesInfo(dir string) ([]os.FileInfo, error) {
	entries, err := os.ReadDir(s.abs(dir))
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

func (s rootSysFs) GetHugePagesNr(dir, name string) (string, error) {
	return s.readTrimmed(s.abs(dir) + name + "/" + sysfs.HugePagesNrFile)
}

// GetCaches reports no cache information, which GetNodesInfo tolerates;
// caches play no part in capacity.
func (s rootSysFs) GetCaches(int) ([]os.FileInfo, error) {
	return nil, errors.New("caches are not read through this adapter")
}

var cpuDirID = regexp.MustCompile(`cpu([0-9]+)`)

// IsCPUOnline is realSysFs.IsCPUOnline with the tree's cpu/online: no
// file means every CPU is online; ids are uint16; a list that cannot be
// parsed means offline.
func (s rootSysFs) IsCPUOnline(dir string) bool {
	online := s.root + "/devices/system/cpu/online"
	if _, err := os.Stat(online); os.IsNotExist(err) {
		return true
	}
	m := cpuDirID.FindStringSubmatch(filepath.Base(dir))
	if m == nil {
		return false
	}
	id, err := strconv.Atoi(m[1])
	if err != nil {
		return false
	}
	b, err := os.ReadFile(online)
	if err != nil || len(b) == 0 {
		return false
	}
	for _, s := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(s, "-")
		min, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return false
		}
		max := min
		if isRange {
			if max, err = strconv.ParseUint(hi, 10, 16); err != nil || min > max {
				return false
			}
		}
		if uint16(id) >= uint16(min) && uint16(id) <= uint16(max) {
			return true
		}
	}
	return false
}

// meminfoAsNode shows one meminfo file as the only NUMA node of a machine,
// so that cAdvisor's own MemTotal parser (sysinfo's getNodeMemInfo: the
// regexp `MemTotal:\s*([0-9]+) kB` times 1024, the same as machine's
// parseCapacity) reads /proc/meminfo of a tree. Used only where no mount
// namespace can be made.
type meminfoAsNode struct {
	sysfs.SysFs
	path string
}

func (m meminfoAsNode) GetNodesPaths() ([]string, error)      { return []string{"/meminfo/node/node0"}, nil }
func (m meminfoAsNode) GetCPUsPaths(string) ([]string, error) { return nil, nil }
func (m meminfoAsNode) GetMemInfo(string) (string, error) {
	b, err := os.ReadFile(m.path)
	return strings.TrimSpace(string(b)), err
}
func (m meminfoAsNode) GetHugePagesInfo(string) ([]os.FileInfo, error) {
	return nil, errors.New("none")
}
func (m meminfoAsNode) GetDistances(string) (string, error) { return "", errors.New("none") }

// errNoNamespace says the test may not make a mount namespace.
var errNoNamespace = errors.New("no private mount namespace (needs CAP_SYS_ADMIN)")

// inMountNamespace runs fn on a locked OS thread in a private mount
// namespace where sys (if not "") is bind-mounted on /sys and
// proc/meminfo on /proc/meminfo. The thread is never unlocked: it exits
// with the goroutine, and the namespace with it. Other threads, and so the
// rest of the test binary, keep the real /sys and /proc.
func inMountNamespace(sys, proc string, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("%w: unshare: %v", errNoNamespace, err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- fmt.Errorf("%w: make / private: %v", errNoNamespace, err)
			return
		}
		if sys != "" {
			if err := unix.Mount(sys, "/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				errc <- fmt.Errorf("bind %s on /sys: %w", sys, err)
				return
			}
		}
		if proc != "" {
			if err := unix.Mount(filepath.Join(proc, "meminfo"), "/proc/meminfo", "", unix.MS_BIND, ""); err != nil {
				errc <- fmt.Errorf("bind %s/meminfo on /proc/meminfo: %w", proc, err)
				return
			}
		}
		fn()
		errc <- nil
	}()
	return <-errc
}

// machineView holds the figures the kubelet takes from cAdvisor.
type machineView struct {
	NumCores  int
	Memory    uint64
	Swap      uint64 // compared only when known
	SwapKnown bool
	Hugepages map[string]uint64
	Nodes     []nodeView // nil without node directories
}

type nodeView struct {
	ID        int
	Threads   int
	Cores     []string // "drawerD/bookB/socketS/coreC:[threads]", sorted; D and B only on s390x
	Memory    uint64
	Hugepages map[string]uint64
	Distances []uint64
}

// kubeletHugepages names pools as the kubelet's CapacityFromMachineInfo
// does: v1helper.HugePageResourceName(resource.NewQuantity(size, BinarySI)).
func kubeletHugepages(pools []info.HugePagesInfo) map[string]uint64 {
	if len(pools) == 0 {
		return nil
	}
	m := make(map[string]uint64, len(pools))
	for _, p := range pools {
		pageSizeBytes := int64(p.PageSize * 1024)
		q := resource.NewQuantity(pageSizeBytes, resource.BinarySI)
		m[v1.ResourceHugePagesPrefix+q.String()] = uint64(pageSizeBytes * int64(p.NumPages))
	}
	return m
}

// cadvisorView turns cAdvisor's results into a machineView.
func cadvisorView(nodes []info.Node, numCores int, pools []info.HugePagesInfo, withNodes bool) machineView {
	v := machineView{NumCores: numCores, Hugepages: kubeletHugepages(pools)}
	if !withNodes {
		return v
	}
	for _, n := range nodes {
		nv := nodeView{ID: n.Id, Memory: n.Memory, Hugepages: kubeletHugepages(n.HugePages), Distances: n.Distances}
		for _, c := range n.Cores {
			threads := slices.Sorted(slices.Values(c.Threads))
			nv.Threads += len(threads)
			nv.Cores = append(nv.Cores, fmt.Sprintf("drawer%s/book%s/socket%d/core%d:%v", c.DrawerID, c.BookID, c.SocketID, c.Id, threads))
		}
		slices.Sort(nv.Cores)
		v.Nodes = append(v.Nodes, nv)
	}
	slices.SortFunc(v.Nodes, func(a, b nodeView) int { return a.ID - b.ID })
	return v
}

// ourView turns a snapshot and its capacity into a machineView. A core is
// the CPUs with the same ids, books and drawers too where the FS reads
// them (s390x), as cAdvisor has them.
func ourView(s *Snapshot) machineView {
	books := runtime.GOARCH == "s390x"
	c := capacityOf(s)
	v := machineView{NumCores: int(c.CPU), Memory: c.Memory, Swap: s.SwapTotal, SwapKnown: true, Hugepages: c.Hugepages}
	for i, n := range s.Nodes {
		nc := c.Nodes[i]
		nv := nodeView{ID: nc.ID, Threads: int(nc.CPU), Memory: nc.Memory, Hugepages: nc.Hugepages}
		if n.Distances != nil {
			nv.Distances = []uint64{}
		}
		for _, d := range n.Distances {
			nv.Distances = append(nv.Distances, uint64(d))
		}
		type core struct {
			drawer, book string
			socket, id   int
		}
		cores := map[core][]int{}
		for _, cpu := range n.CPUs {
			k := core{socket: cpu.SocketID, id: cpu.CoreID}
			if books {
				k.drawer, k.book = strconv.Itoa(cpu.DrawerID), strconv.Itoa(cpu.BookID)
			}
			cores[k] = append(cores[k], cpu.ID)
		}
		for k, threads := range cores {
			nv.Cores = append(nv.Cores, fmt.Sprintf("drawer%s/book%s/socket%d/core%d:%v", k.drawer, k.book, k.socket, k.id, threads))
		}
		slices.Sort(nv.Cores)
		v.Nodes = append(v.Nodes, nv)
	}
	return v
}

// cadvisorThroughAdapter runs cAdvisor's machine-info code on the tree
// through rootSysFs. Memory comes from machine.GetMachineMemoryCapacity
// in a mount namespace, or from cAdvisor's node meminfo parser without one.
func cadvisorThroughAdapter(sys, proc string) (machineView, error) {
	fs := rootSysFs{root: sys}
	nodes, numCores, err := sysinfo.GetNodesInfo(fs)
	if err != nil {
		return machineView{}, fmt.Errorf("GetNodesInfo: %w", err)
	}
	pools, err := sysinfo.GetHugePagesInfo(fs, "/sys/kernel/mm/hugepages/")
	if err != nil {
		return machineView{}, fmt.Errorf("GetHugePagesInfo: %w", err)
	}
	paths, _ := fs.GetNodesPaths()
	v := cadvisorView(nodes, numCores, pools, len(paths) > 0)

	var memErr, swapErr error
	err = inMountNamespace("", proc, func() {
		v.Memory, memErr = machine.GetMachineMemoryCapacity()
		v.Swap, swapErr = machine.GetMachineSwapCapacity()
	})
	switch {
	case err == nil:
		v.SwapKnown = true
		if err = errors.Join(memErr, swapErr); err != nil {
			return machineView{}, err
		}
	case errors.Is(err, errNoNamespace):
		memNodes, _, err := sysinfo.GetNodesInfo(meminfoAsNode{path: filepath.Join(proc, "meminfo")})
		if err != nil {
			return machineView{}, err
		}
		v.Memory = memNodes[0].Memory
	default:
		return machineView{}, err
	}
	return v, nil
}

// cadvisorReal runs cAdvisor's unmodified code on whatever /sys and /proc
// the calling thread sees.
func cadvisorReal() (machineView, error) {
	fs := sysfs.NewRealSysFs()
	nodes, numCores, err := sysinfo.GetNodesInfo(fs)
	if err != nil {
		return machineView{}, fmt.Errorf("GetNodesInfo: %w", err)
	}
	pools, err := sysinfo.GetHugePagesInfo(fs, "/sys/kernel/mm/hugepages/")
	if err != nil {
		return machineView{}, fmt.Errorf("GetHugePagesInfo: %w", err)
	}
	paths, err := fs.GetNodesPaths()
	if err != nil {
		return machineView{}, err
	}
	v := cadvisorView(nodes, numCores, pools, len(paths) > 0)
	v.SwapKnown = true
	if v.Memory, err = machine.GetMachineMemoryCapacity(); err != nil {
		return machineView{}, err
	}
	if v.Swap, err = machine.GetMachineSwapCapacity(); err != nil {
		return machineView{}, err
	}
	return v, nil
}

// viewDiffs lists every figure where ours differs from cAdvisor's.
func viewDiffs(what string, ours, ref machineView) []string {
	var d []string
	add := func(format string, args ...any) { d = append(d, what+": "+fmt.Sprintf(format, args...)) }
	if ours.NumCores != ref.NumCores {
		add("cpu %d, cAdvisor NumCores %d", ours.NumCores, ref.NumCores)
	}
	if ours.Memory != ref.Memory {
		add("memory %d, cAdvisor MemoryCapacity %d", ours.Memory, ref.Memory)
	}
	if ref.SwapKnown && ours.Swap != ref.Swap {
		add("swap %d, cAdvisor SwapCapacity %d", ours.Swap, ref.Swap)
	}
	if fmt.Sprint(ours.Hugepages) != fmt.Sprint(ref.Hugepages) {
		add("hugepages %v, cAdvisor/kubelet %v", ours.Hugepages, ref.Hugepages)
	}
	if len(ours.Nodes) != len(ref.Nodes) {
		add("%d nodes, cAdvisor %d", len(ours.Nodes), len(ref.Nodes))
		return d
	}
	for i := range ours.Nodes {
		if o, r := fmt.Sprintf("%+v", ours.Nodes[i]), fmt.Sprintf("%+v", ref.Nodes[i]); o != r {
			add("node\n ours     %s\n cAdvisor %s", o, r)
		}
	}
	return d
}

// compareViews fails the test where ours differs from cAdvisor's.
func compareViews(t *testing.T, what string, ours, ref machineView) {
	t.Helper()
	for _, d := range viewDiffs(what, ours, ref) {
		t.Error(d)
	}
}

func TestCAdvisorReference(t *testing.T) {
	type tree struct {
		name, sys, proc string
	}
	var trees []tree
	for _, sc := range scenarios() {
		sys, proc := sc.fix.Write(t, topologytest.Dir(t))
		trees = append(trees, tree{sc.name, sys, proc})
	}
	if !testing.Short() {
		sys, proc := shared1024(t)
		trees = append(trees, tree{"1024-cpus-16-nodes", sys, proc})
	}
	for _, tr := range trees {
		t.Run(tr.name, func(t *testing.T) {
			fsys, err := NewFS(tr.sys, tr.proc)
			if err != nil {
				t.Fatal(err)
			}
			s, err := fsys.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			ours := ourView(s)

			ref, err := cadvisorThroughAdapter(tr.sys, tr.proc)
			if err != nil {
				t.Fatal(err)
			}
			compareViews(t, "through the adapter", ours, ref)

			var real machineView
			var realErr error
			err = inMountNamespace(tr.sys, tr.proc, func() { real, realErr = cadvisorReal() })
			if errors.Is(err, errNoNamespace) {
				t.Logf("cAdvisor's own SysFs not run: %v", err)
				return
			}
			if err = errors.Join(err, realErr); err != nil {
				t.Fatal(err)
			}
			compareViews(t, "cAdvisor's own SysFs in a mount namespace", ours, real)
		})
	}
}

// TestCAdvisorReferenceRealMachine compares with cAdvisor on this machine's
// own /sys and /proc, and checks the adapter against cAdvisor's real SysFs.
func TestCAdvisorReferenceRealMachine(t *testing.T) {
	cpu1test.Lock(t, false)
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		t.Skipf("no sysfs/procfs here: %v", err)
	}
	var ref machineView
	onRealMachine(t, func() []string {
		s, err := fsys.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if ref, err = cadvisorReal(); err != nil {
			t.Fatal(err)
		}
		viaAdapter, err := cadvisorThroughAdapter("/sys", "/proc")
		if err != nil {
			t.Fatal(err)
		}
		return append(viewDiffs("real machine", ourView(s), ref),
			viewDiffs("adapter vs cAdvisor's SysFs on the real machine", viaAdapter, ref)...)
	})
	t.Logf("cAdvisor on this machine: NumCores %d, MemoryCapacity %d, hugepages %v, %d nodes",
		ref.NumCores, ref.Memory, ref.Hugepages, len(ref.Nodes))
}

// TestCAdvisorReferenceCPUHotplug takes cpu1 offline for real (as root)
// and compares again. It holds the machine-wide cpu1 lock, so no other
// test flips cpu1 or reads the real machine meanwhile.
func TestCAdvisorReferenceCPUHotplug(t *testing.T) {
	cpu1test.Need(t)
	if err := cpu1test.Set(false); err != nil {
		t.Fatalf("offline cpu1: %v", err)
	}
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs.Online.Contains(1) || !s.CPUs.Offline.Contains(1) {
		t.Errorf("cpu1 offline, yet online %q offline %q", s.CPUs.Online, s.CPUs.Offline)
	}
	ref, err := cadvisorReal()
	if err != nil {
		t.Fatal(err)
	}
	compareViews(t, "cpu1 offline", ourView(s), ref)
}
