package guesttest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm"
)

// The guest's time budgets. Under TCG on a busy two-core host a guest
// command takes up to seconds; the slowest step seen (unplugging a DIMM
// whose 300 MiB of pages the kernel migrates first) took about 3 s. The
// waits poll with deadlines of minutes and bound nothing else.
const (
	BootTimeout   = 5 * time.Minute // to the agent's first answer
	QMPTimeout    = time.Minute     // a QMP command, a device_add
	UnplugTimeout = 4 * time.Minute // a device_del, to DEVICE_DELETED
	Settle        = 2 * time.Minute // for the guest or the daemon to follow a change
)

// HotNode is the NUMA node the suites plug CPUs and DIMMs into: node 1,
// which has no CPU and no memory at boot in Machine.
const HotNode = 1

// Machine is the guest the suites boot, with kernel and initramfs: one
// CPU of four, 512 MiB of boot memory, four DIMM slots and room up to
// 4 GiB, and test/vm's two NUMA nodes (NUMA nil: node 0 = CPUs 0-1 and all
// boot memory, node 1 = CPUs 2-3 and no memory). UnplugCPUs is set: the
// suites take the CPU they hot-added back, last (QEMU 7.2's
// single-threaded TCG aborts on a vCPU unplug, on pseries too).
func Machine(kernel vm.Kernel, initramfs string) vm.Config {
	return vm.Config{
		Kernel:     kernel.Image,
		Initramfs:  initramfs,
		UnplugCPUs: true,
		CPUs:       1,
		MaxCPUs:    4,
		Mem:        512 << 20,
		Slots:      4,
		MaxMem:     4 << 30,
	}
}

// Context is a context for a guest operation: it ends after d, or with
// the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// BootOptions are what Boot needs beside the guest's vm.Config.
type BootOptions struct {
	// Name begins the name of the temporary folder of the guest's
	// console.log and qemu.log: Name-guest-*.
	Name string
	// ConsoleTail and LogTail are how many lines of the guest's console
	// and of the daemon's log a failed test shows.
	ConsoleTail, LogTail int
	// HostCPU logs the host CPU time QEMU used, when the test ends.
	HostCPU bool
}

// Boot boots the guest of cfg, whose Dir it sets to a new temporary folder
// and whose Accel to $NODE_RESIZED_VM_ACCEL, or ends the test. When the
// test ends it logs the daemon's warnings and errors and, when the test
// failed, the ends of the guest's console, the daemon's log and the uevent
// log; it closes the guest and removes the folder, which it keeps, saying
// so, when the test failed.
func Boot(t *testing.T, o BootOptions, cfg vm.Config) *vm.VM {
	t.Helper()
	dir, err := os.MkdirTemp("", o.Name+"-guest-")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	cfg.Accel = os.Getenv("NODE_RESIZED_VM_ACCEL")
	ctx, cancel := context.WithTimeout(context.Background(), BootTimeout)
	v, err := vm.Boot(ctx, cfg)
	cancel()
	if err != nil {
		t.Fatalf("boot: %v (console.log and qemu.log in %s)", err, dir)
	}
	t.Cleanup(func() {
		if out, _, err := v.Exec(context.Background(), "grep -E '\"level\":\"(WARN|ERROR)\"' "+LogFile); err == nil && out != "" {
			t.Logf("the daemon's warnings and errors:\n%s", out)
		}
		if t.Failed() {
			t.Logf("guest console (tail):\n%s", v.TailConsole(o.ConsoleTail))
			if out, _, err := v.Exec(context.Background(), fmt.Sprintf("tail -n %d %s; echo; tail -n 40 %s", o.LogTail, LogFile, vm.GuestUeventLog)); err == nil {
				t.Logf("daemon log and uevents (tail):\n%s", out)
			}
		}
		if o.HostCPU {
			if cpu, alive, err := v.HostCPU(); err == nil {
				t.Logf("QEMU used %v of host CPU over %v", cpu.Round(time.Millisecond), alive.Round(time.Millisecond))
			}
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("the guest's console.log and qemu.log are kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	return v
}

// Steps runs a suite's steps on one guest, in order, each a subtest that
// starts from the machine the one before left. A step that failed but
// reached its end left the machine as the next one expects it, so the
// next one runs; after one that stopped half-way the rest are skipped,
// and so are those after one that -run left out.
type Steps struct {
	t       *testing.T
	start   time.Time
	width   int
	timings []string
	// stopped is the step that stopped half-way, unselected the one -run
	// left out: one of them at most.
	stopped, unselected string
}

// NewSteps returns the steps of t, whose total time counts from start;
// width is that of the step names' column in the timings.
func NewSteps(t *testing.T, start time.Time, width int) *Steps {
	return &Steps{t: t, start: start, width: width}
}

// Run runs step name, unless one before stopped it.
func (s *Steps) Run(name string, f func(t *testing.T)) {
	s.t.Helper()
	switch {
	case s.stopped != "":
		s.t.Logf("skipping %s: %s stopped half-way", name, s.stopped)
		return
	case s.unselected != "":
		s.t.Logf("skipping %s: %s was not selected by -run", name, s.unselected)
		return
	}
	start := time.Now()
	ran, finished := false, false
	s.t.Run(name, func(t *testing.T) {
		ran = true
		f(t)
		finished = true
	})
	if !ran {
		s.unselected = name
		return
	}
	s.timings = append(s.timings, fmt.Sprintf("  %-*s %9v", s.width, name, time.Since(start).Round(time.Millisecond)))
	if !finished {
		s.stopped = name
	}
}

// Unselected is the step -run left out, "" when it left out none.
func (s *Steps) Unselected() string { return s.unselected }

// LogTimings logs the time of the boot, of each step that ran and the
// total.
func (s *Steps) LogTimings(boot time.Duration) {
	s.t.Helper()
	s.t.Logf("timings:\n  %-*s %9v\n%s\n  %-*s %9v", s.width, "boot", boot.Round(time.Millisecond),
		strings.Join(s.timings, "\n"), s.width, "total", time.Since(s.start).Round(time.Millisecond))
}
