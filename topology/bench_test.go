//go:build linux

package topology

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/cadvisor/lib/machine"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
	"golang.org/x/sys/unix"

	"github.com/node-resized/node-resized/topology/topologytest"
)

// The 1024-CPU tree takes seconds to write, so the tests and benchmarks
// of one run share it; TestMain removes it.
var big struct {
	once      sync.Once
	dir       string
	sys, proc string
	err       error
}

// shared1024 returns the roots of the topologytest.Machine1024 tree,
// writing it on first use.
func shared1024(tb testing.TB) (sys, proc string) {
	tb.Helper()
	big.once.Do(func() {
		// Stays set if the write below stops the test half way.
		big.err = errors.New("the tree was not written completely")
		parent := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			parent = "/dev/shm"
		}
		dir, err := os.MkdirTemp(parent, "topology-1024-")
		if err != nil {
			big.err = err
			return
		}
		big.dir = dir
		big.sys, big.proc = topologytest.Machine1024().Write(tb, dir)
		big.err = nil
	})
	if big.err != nil {
		tb.Fatalf("write the 1024-CPU tree: %v", big.err)
	}
	return big.sys, big.proc
}

// warm makes the rebuild that opens fsys's files before the timed ones,
// which find them open as the daemon's rebuilds do, and lets the cleanups
// of the FSes that earlier benchmarks dropped run first.
func warm(b *testing.B, fsys FS) {
	if _, err := fsys.Snapshot(); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
}

// reportCPU reports the CPU time the process spent (user and system,
// every thread) per operation, as cpu-ns/op beside the wall time: on a
// machine shared with other work the wall time also counts the waits for
// a CPU. Call the returned func after the loop.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() {
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestMain(m *testing.M) {
	code := m.Run()
	if big.dir != "" {
		os.RemoveAll(big.dir)
	}
	os.Exit(code)
}

// BenchmarkRebuild1024 is the full rebuild after a hotplug event on a
// machine with 1024 CPUs in 16 NUMA nodes and 4096 memory blocks.
func BenchmarkRebuild1024(b *testing.B) {
	sys, proc := shared1024(b)
	fsys, err := NewFS(sys, proc)
	if err != nil {
		b.Fatal(err)
	}
	warm(b, fsys)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		s, err := fsys.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if c := capacityOf(s); c.CPU != 1008 {
			b.Fatalf("cpu %d", c.CPU)
		}
	}
}

// BenchmarkRebuildCPUs1024 is the rebuild after a batch of CPU events on
// the same machine: everything but the memory blocks is read.
func BenchmarkRebuildCPUs1024(b *testing.B) {
	sys, proc := shared1024(b)
	fsys, err := NewFS(sys, proc)
	if err != nil {
		b.Fatal(err)
	}
	prev, err := fsys.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		s, err := fsys.SnapshotCPUs(prev)
		if err != nil {
			b.Fatal(err)
		}
		if c := capacityOf(s); c.CPU != 1008 {
			b.Fatalf("cpu %d", c.CPU)
		}
	}
}

// BenchmarkUpdate1024 is the incremental update after one uevent on the
// same machine: a CPU's, and a memory block's. The tree does not change
// between iterations, so the event is a stale one; the update reads the
// same files as for a real change (the named object, the totals, the
// block's node) and must not fall back to a full rebuild.
func BenchmarkUpdate1024(b *testing.B) {
	sys, proc := shared1024(b)
	fsys, err := NewFS(sys, proc)
	if err != nil {
		b.Fatal(err)
	}
	prev, err := fsys.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dev  Device
	}{
		{"cpu", ParseDevPath("/devices/system/cpu/cpu517")},
		{"memory", ParseDevPath("/devices/system/memory/memory2271")},
	} {
		b.Run(c.name, func(b *testing.B) {
			devs := []Device{c.dev}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				s, full, err := fsys.Update(prev, devs)
				if err != nil || full != "" {
					b.Fatalf("Update: %q, %v", full, err)
				}
				if c := capacityOf(s); c.CPU != 1008 {
					b.Fatalf("cpu %d", c.CPU)
				}
			}
		})
	}
}

// BenchmarkCAdvisor1024 is what cAdvisor does for the kubelet's capacity on
// the same tree: GetNodesInfo, GetHugePagesInfo and the memory capacity.
// "adapter" goes through rootSysFs (no cache information); "realsysfs" is
// cAdvisor's unmodified SysFs in a mount namespace (it also reads every
// CPU's cache attributes, as on a real node).
func BenchmarkCAdvisor1024(b *testing.B) {
	sys, proc := shared1024(b)
	run := func(b *testing.B, fs sysfs.SysFs) {
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		for range b.N {
			_, n, err := sysinfo.GetNodesInfo(fs)
			if err != nil || n != 1008 {
				b.Fatalf("GetNodesInfo: %d cores, %v", n, err)
			}
			if _, err := sysinfo.GetHugePagesInfo(fs, "/sys/kernel/mm/hugepages/"); err != nil {
				b.Fatal(err)
			}
			if _, err := machine.GetMachineMemoryCapacity(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("adapter", func(b *testing.B) {
		// In a namespace when possible, so that the memory capacity too
		// reads the tree's meminfo; the cost is the same either way.
		err := inMountNamespace("", proc, func() { run(b, rootSysFs{root: sys}) })
		if errors.Is(err, errNoNamespace) {
			run(b, rootSysFs{root: sys})
		} else if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("realsysfs", func(b *testing.B) {
		err := inMountNamespace(sys, proc, func() { run(b, sysfs.NewRealSysFs()) })
		if errors.Is(err, errNoNamespace) {
			b.Skip(err)
		} else if err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRebuildReal and BenchmarkCAdvisorReal compare the two on this
// machine's own /sys and /proc.
func BenchmarkRebuildReal(b *testing.B) {
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		b.Skip(err)
	}
	warm(b, fsys)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		s, err := fsys.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		s.Capacity()
	}
}

// BenchmarkUpdateReal is the incremental update after a cpu1 event and
// after a memory block event on this machine.
func BenchmarkUpdateReal(b *testing.B) {
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		b.Skip(err)
	}
	prev, err := fsys.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	if len(prev.MemoryBlocks) == 0 || len(prev.CPUs.Devices) < 2 {
		b.Skip("no memory blocks or a single CPU")
	}
	for _, c := range []struct {
		name string
		dev  Device
	}{
		{"cpu", Device{DeviceCPU, prev.CPUs.Devices[1]}},
		{"memory", Device{DeviceMemory, prev.MemoryBlocks[len(prev.MemoryBlocks)-1].ID}},
	} {
		b.Run(c.name, func(b *testing.B) {
			devs := []Device{c.dev}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				s, full, err := fsys.Update(prev, devs)
				if err != nil {
					b.Fatal(err)
				}
				if full != "" {
					// The machine moved (a test hot-plugging cpu1):
					// start again from the new model.
					prev = s
				}
			}
		})
	}
}

func BenchmarkCAdvisorReal(b *testing.B) {
	fs := sysfs.NewRealSysFs()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, _, err := sysinfo.GetNodesInfo(fs); err != nil {
			b.Fatal(err)
		}
		if _, err := sysinfo.GetHugePagesInfo(fs, "/sys/kernel/mm/hugepages/"); err != nil {
			b.Fatal(err)
		}
		if _, err := machine.GetMachineMemoryCapacity(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemTotal is the once-a-second MemTotal watch; it must not
// allocate.
func BenchmarkMemTotal(b *testing.B) {
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := fsys.MemTotal(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEphemeralStorage is one poll of the filesystem watch (every
// 10 s, every second for a while after a disk's resize): a statfs of the
// kubelet root directory, here a temporary directory.
func BenchmarkEphemeralStorage(b *testing.B) {
	fsys := newFixtureFS(b, scenarios()[0].fix).WithKubeletRootDir(b.TempDir())
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := fsys.EphemeralStorage(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemTotalCAdvisor is cAdvisor's way, for comparison.
func BenchmarkMemTotalCAdvisor(b *testing.B) {
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := machine.GetMachineMemoryCapacity(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMemTotalDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("coverage and race instrumentation allocate")
	}
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		t.Skip(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := fsys.MemTotal(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("MemTotal allocates %.1f times per call", n)
	}
}
