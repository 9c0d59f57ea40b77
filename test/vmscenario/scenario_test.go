package vmscenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

const dimmSize = 256 << 20

// scenario is the state the scenarios hand on to each other.
type scenario struct {
	g        guest
	bootMem  int64 // MemTotal at boot
	cpuDev   string
	newCPU   int
	dimmDev  string
	dimm     []string // the DIMM's memory blocks
	memTotal int64    // MemTotal before the DIMM
}

// TestScenarios boots one guest with the daemon and walks it through the
// hotplug scenarios in order (see the package documentation); each needs
// the machine the one before left.
func TestScenarios(t *testing.T) {
	total := time.Now()
	cfg := guesttest.Machine(env.kernel, env.initramfs)
	// The DIMMs' 3.5 GiB of room plus the virtio-mem device's: QEMU
	// counts its backend against maxmem.
	cfg.MaxMem += virtioMemDevice.Size
	cfg.VirtioMem = []vm.VirtioMemDevice{virtioMemDevice}
	cfg.Shares = []vm.Share{
		{Tag: "ctl", Path: env.ctlDir, ReadOnly: true},
		{Tag: "tools", Path: env.toolsDir, ReadOnly: true},
	}
	// The guest's console.log and qemu.log stay when the test fails.
	v := guesttest.Boot(t, guesttest.BootOptions{Name: "vmscenario", ConsoleTail: 80, LogTail: 60}, cfg)
	s := &scenario{g: guest{guesttest.Guest{VM: v, Ctl: guestCtl, SlowCommand: slowCommand, KubepodsDetail: true}}}
	t.Logf("kernel %s; binaries and initramfs ready in %v; boot to agent ready %v",
		env.kernel.Version, env.prepTime.Round(time.Millisecond), v.BootTime().Round(time.Millisecond))

	// A scenario that failed but reached its end left the machine as the
	// next one expects it, so the next one runs; after one that stopped
	// half-way the rest are skipped. So are those after one that -run
	// left out: each starts from the machine the one before left.
	steps := guesttest.NewSteps(t, total, 18)
	defer steps.LogTimings(v.BootTime())

	steps.Run("daemon-up", s.daemonUp)
	steps.Run("cpu-hot-add", s.cpuHotAdd)
	// After cpu-hot-add, which checks the daemon's first write of
	// kubepods' pids.max: virtio-mem's memory changes make the daemon
	// write it too.
	steps.Run("virtio-mem", s.virtioMem)
	steps.Run("hotplug-cpu", s.hotplugCPU)
	steps.Run("hotplug-dimm", s.hotplugDIMM)
	steps.Run("dimm-hot-add", s.dimmHotAdd)
	steps.Run("dimm-hot-unplug", s.dimmHotUnplug)
	steps.Run("uevent-overflow", s.ueventOverflow)
	// The CPU unplug comes last: after a CPU unplug, QEMU 7.2 under TCG
	// crashes (SIGSEGV) on the next hotplug operation of any kind (CPU
	// add, DIMM add, DIMM unplug), so oom-in-kubepods, which plugs and
	// unplugs a DIMM, runs before it.
	steps.Run("oom-in-kubepods", s.oomInKubepods)
	steps.Run("cpu-hot-unplug", s.cpuHotUnplug)
	if unselected := steps.Unselected(); unselected != "" {
		t.Skipf("%s and the scenarios after it did not run: they build on each other, so run TestScenarios whole", unselected)
	}
}

// daemonUp: the setup script laid out kubepods and the daemon answers,
// sees the boot machine and has found kubepods.
func (s *scenario) daemonUp(t *testing.T) {
	g := s.g
	g.WaitDaemon(t, guesttest.Settle)
	s.bootMem = g.MemTotal(t)
	st := g.Status(t)
	k := g.Kubepods(t)
	t.Logf("boot machine: MemTotal %s, cpus online %q; kubepods: %v", guesttest.MiB(s.bootMem), st.CPUs.Online.String(), k)
	if st.PhysicalCPU() != 1 || st.PhysicalMemory() != s.bootMem {
		t.Errorf("physical cpu=%d memory=%d, want 1 and MemTotal %d", st.PhysicalCPU(), st.PhysicalMemory(), s.bootMem)
	}
	if k.MemoryMax != guesttest.WantMemoryMax(s.bootMem) || k.CPUWeight != guesttest.KubeletWeight(1) || k.CPUs.String() != "0" {
		t.Errorf("kubepods after setup and daemon start: %v; want memory.max=%s cpu.weight=%d cpuset.cpus=0",
			k, guesttest.WantMemoryMax(s.bootMem), guesttest.KubeletWeight(1))
	}
	e := st.Enforce
	if len(st.Enforcement) == 0 {
		t.Fatal("the daemon's status has no enforcement object")
	}
	if e.Mode != cgroup.ModeUnified || !e.Found || e.Kubepods != guesttest.KubepodsDir || e.Unsupported != "" {
		t.Errorf("enforcement mode=%q found=%v kubepods=%q unsupported=%q; want unified, found, %s",
			e.Mode, e.Found, e.Kubepods, e.Unsupported, guesttest.KubepodsDir)
	}
	if e.Last != nil {
		t.Logf("enforcer at start: %s", describeChange(*e.Last))
	}
	// The memory budget that scenario oom-in-kubepods depends on.
	t.Logf("guest memory: %s", g.Sh(t, "grep -E '^(MemTotal|MemFree|MemAvailable|Shmem|AnonPages|Slab):' /proc/meminfo | tr -s ' ' | tr '\\n' ' '"))
}

// cpuHotAdd: a CPU plugged into node 1 is onlined by the daemon (the test
// does not touch it), counted, and added to kubepods' CPU list and weight.
func (s *scenario) cpuHotAdd(t *testing.T) {
	g := s.g
	before := g.Kubepods(t)
	cpus0 := g.Status(t).PhysicalCPU()
	present0 := g.CPUSet(t, "/sys/devices/system/cpu/present")
	last := g.LastChangeID(t)
	metrics0 := g.metrics(t, "node_resized_auto_online_total")

	start := time.Now()
	dev, err := g.HotAddCPU(guesttest.Context(t, guesttest.QMPTimeout), guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	s.cpuDev = dev
	present := g.waitFor(t, "a new present CPU", guesttest.Settle, "cat /sys/devices/system/cpu/present", func(out string) bool {
		return guesttest.MustCPUSet(t, out).Len() > present0.Len()
	})
	added := guesttest.MustCPUSet(t, present).Difference(present0)
	if len(added) != 1 {
		t.Fatalf("present %q (was %q): want exactly one new CPU", present, present0.String())
	}
	s.newCPU = added[0]
	cpuDir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", s.newCPU)

	online := g.waitFor(t, fmt.Sprintf("cpu%d online (by the daemon's --auto-online)", s.newCPU), guesttest.Settle,
		"cat /sys/devices/system/cpu/online", func(out string) bool { return guesttest.MustCPUSet(t, out).Contains(s.newCPU) })
	onlineAt := time.Since(start)
	if got := g.Sh(t, "cat "+cpuDir+"/online"); got != "1" {
		t.Errorf("%s/online = %q", cpuDir, got)
	}
	if v, ok := onlinedBy(t, g, fmt.Sprintf("cpu%d", s.newCPU)); !ok || v != "1" {
		t.Errorf("the daemon's log has no record of it onlining cpu%d (wrote %q)", s.newCPU, v)
	}
	st := g.WaitStatus(t, "one more CPU", guesttest.Settle, func(st *guesttest.Status) bool { return st.PhysicalCPU() == cpus0+1 })
	modelAt := time.Since(start)
	if !st.CPUs.Online.Contains(s.newCPU) {
		t.Errorf("the daemon's online CPUs %q lack cpu%d", st.CPUs.Online.String(), s.newCPU)
	}
	want := guesttest.KubeletWeight(cpus0 + 1)
	k := g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus with cpu%d and cpu.weight %d", s.newCPU, want), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return k.CPUs.Contains(s.newCPU) && k.CPUWeight == want
	})
	cgroupAt := time.Since(start)
	if k.CPUs.String() != online {
		t.Errorf("kubepods cpuset.cpus = %q, want the online CPUs %q", k.CPUs.String(), online)
	}
	if k.CPUWeight <= before.CPUWeight {
		t.Errorf("cpu.weight %d did not grow from %d", k.CPUWeight, before.CPUWeight)
	}
	if !k.CPUsEff.Contains(s.newCPU) {
		t.Errorf("cpuset.cpus.effective %q lacks cpu%d", k.CPUsEff.String(), s.newCPU)
	}
	if k.MemoryMax != before.MemoryMax {
		t.Errorf("memory.max changed from %s to %s on a CPU hot-add", before.MemoryMax, k.MemoryMax)
	}
	// The kubelet limits kubepods' pids.max to the smaller of pid_max and
	// threads-max (less the pid reservations; none here); the setup left
	// it at "max", so only the daemon can have written it.
	limit := g.Sh(t, `p=$(cat /proc/sys/kernel/pid_max); m=$(cat /proc/sys/kernel/threads-max); [ "$p" -lt "$m" ] && echo $p || echo $m`)
	if before.PidsMax != "max" || k.PidsMax != limit {
		t.Errorf("pids.max %s before, %s after; want max, then min(pid_max, threads-max) = %s", before.PidsMax, k.PidsMax, limit)
	}
	t.Logf("cpu%d (%s): online after %v, in the model after %v, in kubepods after %v", s.newCPU, dev,
		onlineAt.Round(time.Millisecond), modelAt.Round(time.Millisecond), cgroupAt.Round(time.Millisecond))
	t.Logf("kubepods before: %v", before)
	t.Logf("kubepods after:  %v", k)
	logChanges(t, guesttest.ChangesSince(g.Events(t), last))
	logEnforcement(t, g.Status(t).Enforce, time.Time{})
	t.Logf("auto-online counter: %v -> %v", metrics0, g.metrics(t, "node_resized_auto_online_total"))
}

// dimmHotAdd: a 256 MiB DIMM on node 1; the daemon onlines its blocks
// movable, counts the memory and grows kubepods' memory.max.
func (s *scenario) dimmHotAdd(t *testing.T) {
	g := s.g
	s.memTotal = g.MemTotal(t)
	s.dimmDev, s.dimm = s.plugDIMM(t)
	k := g.Kubepods(t)
	if k.CPUs.String() != g.Sh(t, "cat /sys/devices/system/cpu/online") {
		t.Errorf("kubepods cpuset.cpus %q changed on a DIMM hot-add", k.CPUs.String())
	}
}

// plugDIMM hot-adds a DIMM and checks everything that follows: its blocks
// onlined movable by the daemon, MemTotal, the daemon's capacity and
// kubepods' memory.max. It returns the device id and the new blocks.
func (s *scenario) plugDIMM(t *testing.T) (string, []string) {
	g := s.g
	blockSize, err := strconv.ParseUint(g.Sh(t, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	nblocks := int(dimmSize / blockSize)
	blocks0 := g.memoryBlocks(t)
	mem0 := g.MemTotal(t)
	before := g.Kubepods(t)
	last := g.LastChangeID(t)

	start := time.Now()
	dev, err := g.HotAddDIMM(guesttest.Context(t, guesttest.QMPTimeout), dimmSize, guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, fmt.Sprintf("%d new memory blocks", nblocks), guesttest.Settle,
		"ls -d /sys/devices/system/memory/memory[0-9]* | wc -l",
		func(out string) bool { n, _ := strconv.Atoi(out); return n >= len(blocks0)+nblocks })
	var blocks []string
	for b := range g.memoryBlocks(t) {
		if !blocks0[b] {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != nblocks {
		t.Fatalf("new blocks %v, want %d of %#x bytes", blocks, nblocks, blockSize)
	}
	stateCmd := "cd /sys/devices/system/memory && cat"
	zoneCmd := "cd /sys/devices/system/memory && cat"
	for _, b := range blocks {
		stateCmd += " " + b + "/state"
		zoneCmd += " " + b + "/valid_zones"
	}
	g.waitFor(t, fmt.Sprintf("blocks %v online (by the daemon's --auto-online)", blocks), guesttest.Settle, stateCmd,
		func(out string) bool {
			return strings.Count(out, "online") == nblocks && !strings.Contains(out, "offline")
		})
	onlineAt := time.Since(start)
	for _, b := range blocks {
		if v, ok := onlinedBy(t, g, b); !ok || v != "online_movable" {
			t.Errorf("the daemon onlined %s by writing %q to its state, want online_movable (found in its log: %v)", b, v, ok)
		}
	}
	if zones := strings.Fields(g.Sh(t, zoneCmd)); strings.Join(zones, " ") != strings.TrimSpace(strings.Repeat("Movable ", nblocks)) {
		t.Errorf("valid_zones of %v = %q, want Movable (onlined movable)", blocks, zones)
	}
	for _, b := range blocks {
		if got := g.Sh(t, "cd /sys/devices/system/memory/"+b+" && ls -d node*"); got != fmt.Sprintf("node%d", guesttest.HotNode) {
			t.Errorf("%s is on %s, want node%d", b, got, guesttest.HotNode)
		}
	}
	memLine := g.waitFor(t, "MemTotal to grow by the DIMM", guesttest.Settle, "grep '^MemTotal:' /proc/meminfo",
		func(out string) bool { return guesttest.ParseMemTotal(t, out) == mem0+dimmSize })
	mem := guesttest.ParseMemTotal(t, memLine)
	st := g.WaitStatus(t, "the DIMM's memory", guesttest.Settle, func(st *guesttest.Status) bool { return st.PhysicalMemory() == mem })
	modelAt := time.Since(start)
	want := guesttest.WantMemoryMax(mem)
	k := g.WaitKubepods(t, "memory.max = MemTotal - 96Mi", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == want })
	cgroupAt := time.Since(start)
	if k.CPUWeight != before.CPUWeight {
		t.Errorf("cpu.weight changed from %d to %d on a DIMM hot-add", before.CPUWeight, k.CPUWeight)
	}
	t.Logf("DIMM %s (%s, blocks %v on node%d): online after %v, in the model after %v (physical memory %s), in kubepods after %v",
		dev, guesttest.MiB(dimmSize), blocks, guesttest.HotNode, onlineAt.Round(time.Millisecond), modelAt.Round(time.Millisecond),
		guesttest.MiB(st.PhysicalMemory()), cgroupAt.Round(time.Millisecond))
	t.Logf("kubepods memory.max %s -> %s (MemTotal %s -> %s)", before.MemoryMax, k.MemoryMax, guesttest.MiB(mem0), guesttest.MiB(mem))
	logChanges(t, guesttest.ChangesSince(g.Events(t), last))
	logEnforcement(t, g.Status(t).Enforce, time.Time{})
	return dev, blocks
}

// dimmHotUnplug: the DIMM is unplugged the way a hypervisor does it (an
// ACPI eject request; nothing is offlined by hand). The guest kernel
// offlines its movable blocks on the eject; the daemon clamps kubepods'
// memory.max to the smaller machine.
func (s *scenario) dimmHotUnplug(t *testing.T) {
	s.unplugDIMM(t, s.dimmDev, s.dimm, s.memTotal)
}

// clampReport is what one clamp looked like.
type clampReport struct {
	changes []monitor.Change
	clamp   *cgroup.Change
	latency []time.Duration // from the daemon's "kubepods clamped" log records
	metric  time.Duration   // from the clamp latency histogram's sum and count
}

// unplugDIMM unplugs a DIMM and waits for the memory, the daemon's model
// and kubepods' memory.max to follow.
func (s *scenario) unplugDIMM(t *testing.T, dev string, blocks []string, wantMem int64) clampReport {
	g := s.g
	last := g.LastChangeID(t)
	before := g.Kubepods(t)
	clampLogs := len(g.DaemonLog(t, "kubepods clamped"))
	sum0, count0 := s.clampHistogram(t)
	uevents0 := g.Sh(t, "wc -l <"+vm.GuestUeventLog)
	mark := enforcerMark(g.Status(t).Enforce)

	start := time.Now()
	err := g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), dev)
	var eject *vm.EjectError
	if errors.As(err, &eject) {
		t.Fatalf("the guest refused to eject the DIMM: %v; blocks: %s", err,
			g.Sh(t, "cd /sys/devices/system/memory && for b in "+strings.Join(blocks, " ")+"; do echo $b $(cat $b/state $b/valid_zones); done"))
	}
	if err != nil {
		t.Fatal(err)
	}
	unplugAt := time.Since(start)
	after := g.memoryBlocks(t)
	for _, b := range blocks {
		if after[b] {
			t.Errorf("%s still present after the DIMM left", b)
		}
	}
	// What the kernel did on the eject: it offlined the blocks itself
	// (the guest's uevent log is written by a hook per event, a moment
	// later).
	g.waitFor(t, "the kernel's offline and remove uevents for the DIMM's blocks", guesttest.Settle,
		fmt.Sprintf("tail -n +%d %s", atoi(t, uevents0)+1, vm.GuestUeventLog), func(out string) bool {
			for _, b := range blocks {
				for _, action := range []string{"offline", "remove"} {
					if !strings.Contains(out, " "+action+" /devices/system/memory/"+b+" memory") {
						return false
					}
				}
			}
			return true
		})
	memLine := g.waitFor(t, "MemTotal back to the size without the DIMM", guesttest.Settle, "grep '^MemTotal:' /proc/meminfo",
		func(out string) bool { return guesttest.ParseMemTotal(t, out) == wantMem })
	mem := guesttest.ParseMemTotal(t, memLine)
	g.WaitStatus(t, "the memory without the DIMM", guesttest.Settle, func(st *guesttest.Status) bool { return st.PhysicalMemory() == mem })
	modelAt := time.Since(start)
	want := guesttest.WantMemoryMax(mem)
	k := g.WaitKubepods(t, "memory.max clamped to MemTotal - 96Mi", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == want })
	cgroupAt := time.Since(start)
	t.Logf("DIMM %s unplugged (DEVICE_DELETED) after %v; in the model after %v; kubepods clamped after %v",
		dev, unplugAt.Round(time.Millisecond), modelAt.Round(time.Millisecond), cgroupAt.Round(time.Millisecond))
	t.Logf("kubepods memory.max %s -> %s (MemTotal %s); oom_kill %d -> %d",
		before.MemoryMax, k.MemoryMax, guesttest.MiB(mem), before.OOMKills, k.OOMKills)

	var r clampReport
	r.changes = guesttest.ChangesSince(g.Events(t), last)
	logChanges(t, r.changes)
	st := g.Status(t)
	for i := len(st.Enforce.History) - 1; i >= 0; i-- {
		if c := st.Enforce.History[i]; c.Action == cgroup.KindClamp && c.Time.After(mark) {
			r.clamp = &c
			break
		}
	}
	if r.clamp == nil {
		t.Errorf("the enforcer's history has no ClampCgroups since the unplug; status.enforcement: %s", st.Enforcement)
	} else {
		if r.clamp.Result != cgroup.ResultChanged {
			t.Errorf("clamp result %q (%s), want changed", r.clamp.Result, r.clamp.Error)
		}
		if r.clamp.OOMKillsBefore == nil || r.clamp.OOMKillsAfter == nil {
			t.Errorf("the clamp does not report kubepods' OOM kills before and after")
		}
	}
	logEnforcement(t, st.Enforce, mark)
	t.Logf("status.enforcement.last: %s", lastRaw(st.Enforcement))
	if lf := latencyFields(st.Enforcement); len(lf) > 0 {
		t.Logf("status.enforcement.last latency: %v", lf)
	} else {
		t.Logf("status.enforcement.last has no latency field; the latency comes from the daemon's log and metrics")
	}
	for _, rec := range g.DaemonLog(t, "kubepods clamped")[clampLogs:] {
		if ns, ok := rec["latency"].(float64); ok {
			r.latency = append(r.latency, time.Duration(ns))
		}
	}
	sum1, count1 := s.clampHistogram(t)
	if count1 > count0 {
		r.metric = time.Duration((sum1 - sum0) / float64(count1-count0) * float64(time.Second))
	}
	if len(r.latency) == 0 {
		t.Errorf("no \"kubepods clamped\" record with a latency in the daemon's log")
	}
	if count1 <= count0 {
		t.Errorf("node_resized_clamp_latency_seconds_count did not grow (%v -> %v)", count0, count1)
	}
	t.Logf("uevent-to-clamp latency: log %v; histogram %v over %v clamp(s)", durations(r.latency), r.metric.Round(time.Microsecond), count1-count0)
	return r
}

// clampHistogram reads the clamp latency histogram's sum and count.
func (s *scenario) clampHistogram(t *testing.T) (sum float64, count float64) {
	for _, l := range s.g.metrics(t, "node_resized_clamp_latency_seconds_") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "node_resized_clamp_latency_seconds_sum":
			sum = v
		case "node_resized_clamp_latency_seconds_count":
			count = v
		}
	}
	return sum, count
}

// cpuHotUnplug: the CPU is unplugged the way a hypervisor does it (an ACPI
// eject request); the kernel offlines it on the eject, and kubepods' CPU
// list and weight follow.
func (s *scenario) cpuHotUnplug(t *testing.T) {
	g := s.g
	before := g.Kubepods(t)
	cpus0 := g.Status(t).PhysicalCPU()
	last := g.LastChangeID(t)
	uevents0 := g.Sh(t, "wc -l <"+vm.GuestUeventLog)
	cpuDir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", s.newCPU)
	mark := enforcerMark(g.Status(t).Enforce)

	start := time.Now()
	offlinedByTest := false
	err := g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), s.cpuDev)
	var eject *vm.EjectError
	if errors.As(err, &eject) {
		// The kernel did not offline it on the eject: offline it in the
		// guest, as a hotplug agent would, and ask again.
		t.Logf("the guest refused the eject (%v): offlining cpu%d in the guest and retrying", err, s.newCPU)
		g.Sh(t, "echo 0 >"+cpuDir+"/online")
		offlinedByTest = true
		err = g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), s.cpuDev)
	}
	if err != nil {
		t.Fatal(err)
	}
	unplugAt := time.Since(start)
	g.waitFor(t, "the CPU gone from online and present", guesttest.Settle,
		"cat /sys/devices/system/cpu/online /sys/devices/system/cpu/present",
		func(out string) bool {
			for _, l := range strings.Split(out, "\n") {
				if guesttest.MustCPUSet(t, l).Contains(s.newCPU) {
					return false
				}
			}
			return true
		})
	g.Sh(t, "test ! -e "+cpuDir)
	uevents := g.waitFor(t, fmt.Sprintf("the kernel's remove uevent for cpu%d", s.newCPU), guesttest.Settle,
		fmt.Sprintf("tail -n +%d %s", atoi(t, uevents0)+1, vm.GuestUeventLog), func(out string) bool {
			return strings.Contains(out, fmt.Sprintf(" remove /devices/system/cpu/cpu%d cpu", s.newCPU))
		})
	offlinedByKernel := !offlinedByTest && strings.Contains(uevents, fmt.Sprintf(" offline /devices/system/cpu/cpu%d cpu", s.newCPU))
	st := g.WaitStatus(t, "one CPU less", guesttest.Settle, func(st *guesttest.Status) bool { return st.PhysicalCPU() == cpus0-1 })
	modelAt := time.Since(start)
	if st.CPUs.Online.Contains(s.newCPU) {
		t.Errorf("the daemon's online CPUs %q still list cpu%d", st.CPUs.Online.String(), s.newCPU)
	}
	want := guesttest.KubeletWeight(cpus0 - 1)
	online := g.Sh(t, "cat /sys/devices/system/cpu/online")
	k := g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus without cpu%d and cpu.weight %d", s.newCPU, want), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return !k.CPUs.Contains(s.newCPU) && k.CPUWeight == want
	})
	cgroupAt := time.Since(start)
	if k.CPUs.String() != online {
		t.Errorf("kubepods cpuset.cpus = %q, want the online CPUs %q", k.CPUs.String(), online)
	}
	if k.MemoryMax != before.MemoryMax {
		t.Errorf("memory.max changed from %s to %s on a CPU unplug", before.MemoryMax, k.MemoryMax)
	}
	t.Logf("cpu%d (%s) unplugged after %v (offlined by the kernel on the eject: %v); in the model after %v; out of kubepods after %v",
		s.newCPU, s.cpuDev, unplugAt.Round(time.Millisecond), offlinedByKernel, modelAt.Round(time.Millisecond), cgroupAt.Round(time.Millisecond))
	t.Logf("kubepods before: %v", before)
	t.Logf("kubepods after:  %v", k)
	logChanges(t, guesttest.ChangesSince(g.Events(t), last))
	logEnforcement(t, g.Status(t).Enforce, mark)
}

// The pod cgroup of scenario oom-in-kubepods.
const (
	podCgroup = guesttest.KubepodsDir + "/burstable/pod-test"
	hogReady  = "/run/hog.ready"
	hogLog    = "/run/hog.log"
)

// oomInKubepods: a DIMM is plugged (kubepods grows), a process in a
// burstable pod cgroup takes more memory than kubepods may hold without
// the DIMM (but less than the machine has without it), and the DIMM is
// unplugged. The clamp makes the kernel OOM-kill it inside kubepods; the
// daemon and the command agent, outside kubepods, live on.
func (s *scenario) oomInKubepods(t *testing.T) {
	g := s.g
	base := g.MemTotal(t)
	clampTo := base - guesttest.Reserved
	dev, blocks := s.plugDIMM(t)
	pid0 := g.Sh(t, "cat "+guesttest.PIDFile)

	// What the machine will have for the pod once the DIMM is gone:
	// what is available now less the DIMM (the DIMM's struct pages, which
	// the kernel took from node 0 when it was plugged, stay counted). The
	// pod takes overPod more than kubepods may hold then; between that
	// and what is available the guest needs headroom for the minutes
	// around the unplug (the kernel's allocations for the unplug, the
	// daemon's own while it reacts). The guest system (kernel, tmpfs
	// root with the binaries, the daemon) uses nearly all of the 96Mi
	// reserved for it, so there is little room here.
	const (
		overPod  = 1 << 20
		headroom = 2 << 20
	)
	availAfter := memInfo(t, g, "MemAvailable") - dimmSize
	target := clampTo + overPod
	t.Logf("once the DIMM is gone: MemTotal %s, available %s, kubepods memory.max %s; the pod will hold %s, leaving %s",
		guesttest.MiB(base), guesttest.MiB(availAfter), guesttest.MiB(clampTo), guesttest.MiB(target), guesttest.MiB(availAfter-target))
	if availAfter-target < headroom {
		t.Fatalf("no room: a pod above kubepods' clamped memory.max (%s) would not fit in the memory available without the DIMM (%s): "+
			"the guest itself uses more than the 96Mi the kubelet configuration reserves for it", guesttest.MiB(clampTo), guesttest.MiB(availAfter))
	}

	g.Sh(t, "mkdir -p "+podCgroup)
	pid := g.Sh(t, fmt.Sprintf("rm -f %s; sh -c 'echo $$ >%s/cgroup.procs && exec %s hog %s %d %s' >%s 2>&1 </dev/null & echo $!",
		hogReady, podCgroup, guestTool, podCgroup, target, hogReady, hogLog))
	ready := g.waitFor(t, fmt.Sprintf("the pod to hold %s", guesttest.MiB(target)), guesttest.Settle,
		"cat "+hogReady+" 2>/dev/null; cat "+hogLog,
		func(out string) bool { return strings.HasPrefix(out, "pid ") || strings.Contains(out, "vmtool:") })
	if !strings.HasPrefix(ready, "pid "+pid+" ") {
		t.Fatalf("the pod's process: %q (want pid %s)", ready, pid)
	}
	if got := g.Sh(t, "cat /proc/"+pid+"/cgroup"); got != "0::/kubepods/burstable/pod-test" {
		t.Fatalf("the pod's process is in %q", got)
	}
	used := g.readInt(t, podCgroup+"/memory.current")
	before := g.Kubepods(t)
	podOOM0 := g.memoryEventsOOMKill(t, podCgroup)
	maxBefore, _ := strconv.ParseInt(before.MemoryMax, 10, 64)
	t.Logf("pod-test holds %s (%s); kubepods memory.max %s, after the clamp it will be %s; MemAvailable %s",
		guesttest.MiB(used), strings.TrimSpace(ready), guesttest.MiB(maxBefore), guesttest.MiB(clampTo), guesttest.MiB(memInfo(t, g, "MemAvailable")))
	if used <= clampTo || used >= maxBefore {
		t.Fatalf("pod-test uses %s: want more than the clamped %s and less than %s", guesttest.MiB(used), guesttest.MiB(clampTo), guesttest.MiB(maxBefore))
	}
	dmesg0 := atoi(t, g.Sh(t, "dmesg | wc -l"))

	r := s.unplugDIMM(t, dev, blocks, base)

	g.waitFor(t, "the pod's process to be killed", guesttest.Settle, "test -e /proc/"+pid+" && cat /proc/"+pid+"/status | grep State || echo gone",
		func(out string) bool { return out == "gone" })
	k := g.Kubepods(t)
	podOOM := g.memoryEventsOOMKill(t, podCgroup)
	if k.OOMKills <= before.OOMKills {
		t.Errorf("kubepods memory.events oom_kill %d -> %d: no OOM kill inside kubepods", before.OOMKills, k.OOMKills)
	}
	if podOOM <= podOOM0 {
		t.Errorf("pod-test memory.events oom_kill %d -> %d", podOOM0, podOOM)
	}
	dmesg := g.Sh(t, fmt.Sprintf("dmesg | tail -n +%d | grep -E 'oom-kill:|Killed process|out of memory|Out of memory' || true", dmesg0+1))
	t.Logf("kernel:\n%s", dmesg)
	if !strings.Contains(dmesg, "Memory cgroup out of memory: Killed process "+pid+" (vmtool)") {
		t.Errorf("the kernel's log does not show a memory cgroup OOM kill of %s", pid)
	}
	for _, l := range strings.Split(dmesg, "\n") {
		if strings.Contains(l, "global_oom") || strings.Contains(l, "] Out of memory: Killed process") {
			t.Errorf("a system-wide OOM kill: %s", l)
		}
		if strings.Contains(l, "oom-kill:") && !strings.Contains(l, "oom_memcg=/kubepods") {
			t.Errorf("an OOM kill not bounded by kubepods: %s", l)
		}
	}
	// The guest's own processes are untouched: the daemon (same process,
	// still answering) and the agent (this very command).
	g.daemonAlive(t)
	if pid1 := g.Sh(t, "cat "+guesttest.PIDFile); pid1 != pid0 {
		t.Errorf("the daemon's pid changed from %s to %s", pid0, pid1)
	}
	if out := g.Sh(t, "echo agent-alive"); out != "agent-alive" {
		t.Errorf("agent: %q", out)
	}
	// Shrinking memory.max below the usage OOM-kills inside the write, so
	// the clamp's own before/after counts show the kill.
	if c := r.clamp; c != nil && c.OOMKillsBefore != nil && c.OOMKillsAfter != nil {
		t.Logf("the clamp's own count of kubepods OOM kills: %d -> %d", *c.OOMKillsBefore, *c.OOMKillsAfter)
		if *c.OOMKillsAfter <= *c.OOMKillsBefore {
			t.Errorf("the clamp reports oom_kill %d -> %d: the kill it caused is not counted", *c.OOMKillsBefore, *c.OOMKillsAfter)
		}
	}
	t.Logf("kubepods after: %v; pod-test oom_kill %d -> %d", k, podOOM0, podOOM)
}

// onlinedBy returns what the daemon wrote to bring a hot-added device
// (cpuN, memoryN) online, from its newest log record saying so.
func onlinedBy(t testing.TB, g guest, device string) (value string, ok bool) {
	t.Helper()
	// The daemon logs the write after the kernel has done it: wait for the
	// record a while rather than read the log once.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(guesttest.Poll) {
		for _, rec := range g.DaemonLog(t, "brought a hot-added device online") {
			if rec["device"] == device {
				value, _ = rec["value"].(string)
				ok = true
			}
		}
		if ok || time.Now().After(deadline) {
			return value, ok
		}
	}
}

func memInfo(t testing.TB, g guest, field string) int64 {
	t.Helper()
	out := g.Sh(t, "grep '^"+field+":' /proc/meminfo")
	f := strings.Fields(out)
	if len(f) != 3 {
		t.Fatalf("meminfo %s: %q", field, out)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("meminfo %s: %q", field, out)
	}
	return kb << 10
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func durations(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, d.Round(time.Microsecond).String())
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// logChanges logs the daemon's model changes with their detection latency.
func logChanges(t *testing.T, changes []monitor.Change) {
	t.Helper()
	if len(changes) == 0 {
		t.Logf("the daemon recorded no model change")
	}
	for _, c := range changes {
		t.Logf("model change #%d: %d uevent(s), detection latency %v, triggers %v, capacity cpu=%d memory=%s",
			c.ID, c.Events, c.Latency().Round(time.Microsecond), triggers(c), c.Capacity["cpu"]/1000, guesttest.MiB(c.Capacity["memory"]))
	}
}

func triggers(c monitor.Change) string {
	b, _ := json.Marshal(c.Triggers)
	return string(b)
}

// enforcerMark is the time of the enforcer's newest change, by the guest's
// clock: the changes after it are the ones a step caused.
func enforcerMark(e cgroup.Status) time.Time {
	var mark time.Time
	if e.Last != nil {
		mark = e.Last.Time
	}
	for _, c := range e.History {
		if c.Time.After(mark) {
			mark = c.Time
		}
	}
	return mark
}

// logEnforcement logs the enforcer's changes after mark (see
// enforcerMark), or only its last one when mark is zero.
func logEnforcement(t *testing.T, e cgroup.Status, mark time.Time) {
	t.Helper()
	if mark.IsZero() {
		if e.Last != nil {
			t.Logf("enforcer: %s", describeChange(*e.Last))
		}
		return
	}
	for _, c := range e.History {
		if c.Time.After(mark) {
			t.Logf("enforcer: %s", describeChange(c))
		}
	}
}

func describeChange(c cgroup.Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (generation %d, %v)", c.Action, c.Result, c.Generation,
		time.Duration(c.DurationSeconds*float64(time.Second)).Round(time.Microsecond))
	if c.Reason != "" {
		fmt.Fprintf(&b, " reason %q", c.Reason)
	}
	if c.Error != "" {
		fmt.Fprintf(&b, " error %q", c.Error)
	}
	for _, f := range c.Files {
		if f.Written {
			fmt.Fprintf(&b, "; %s: %q -> %q", strings.TrimPrefix(f.Path, guesttest.CgroupRoot+"/"), f.Before, f.After)
		}
	}
	if c.OOMKillsBefore != nil && c.OOMKillsAfter != nil {
		fmt.Fprintf(&b, "; oom_kill %d -> %d", *c.OOMKillsBefore, *c.OOMKillsAfter)
	}
	return b.String()
}

// lastRaw is status.enforcement.last as the daemon sent it, compacted, to
// show fields this test does not know.
func lastRaw(raw json.RawMessage) string {
	var e struct {
		Last json.RawMessage `json:"last"`
	}
	if json.Unmarshal(raw, &e) != nil || len(e.Last) == 0 {
		return "(none)"
	}
	var b bytes.Buffer
	if json.Compact(&b, e.Last) != nil {
		return string(e.Last)
	}
	return b.String()
}

// latencyFields returns the fields of status.enforcement.last whose name
// mentions a latency, should the daemon report one there.
func latencyFields(raw json.RawMessage) map[string]any {
	var e struct {
		Last map[string]any `json:"last"`
	}
	out := map[string]any{}
	if json.Unmarshal(raw, &e) == nil {
		for k, v := range e.Last {
			if strings.Contains(strings.ToLower(k), "latency") {
				out[k] = v
			}
		}
	}
	return out
}
