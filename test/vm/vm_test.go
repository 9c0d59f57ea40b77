package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests boot a real guest. They need qemu-system-x86_64 and a kernel
// unpacked by ./fetch; with NODE_RESIZED_VM_FETCH=1 they run ./fetch
// themselves when either is missing.

var (
	kernelOnce sync.Once
	kernel     Kernel
	kernelErr  error
)

func needKernel(t *testing.T) Kernel {
	t.Helper()
	kernelOnce.Do(func() {
		_, qerr := exec.LookPath("qemu-system-x86_64")
		k, kerr := FindKernel("")
		if qerr != nil || kerr != nil {
			if os.Getenv("NODE_RESIZED_VM_FETCH") != "1" {
				kernelErr = fmt.Errorf("no qemu-system-x86_64 or no cached kernel: run test/vm/fetch (or set NODE_RESIZED_VM_FETCH=1)")
				return
			}
			start := time.Now()
			out, err := exec.Command("./fetch").CombinedOutput()
			if err != nil {
				kernelErr = fmt.Errorf("./fetch: %v\n%s", err, out)
				return
			}
			t.Logf("fetch took %v", time.Since(start).Round(time.Millisecond))
			k, kerr = FindKernel("")
		}
		kernel, kernelErr = k, kerr
	})
	if kernelErr != nil {
		t.Fatal(kernelErr)
	}
	return kernel
}

// buildProbe compiles testdata/probe as a static binary.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "probe")
	// go test puts the go command of its own GOROOT first on $PATH.
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	return out
}

// bootVM boots the default machine and closes it when the test ends,
// logging the console's tail if the test failed.
func bootVM(t *testing.T, files []File, setup string) *VM {
	t.Helper()
	k := needKernel(t)
	dir := t.TempDir()
	initrd, err := BuildInitramfs(InitramfsConfig{
		Kernel: k,
		Output: filepath.Join(dir, "initramfs.cpio"),
		Files:  files,
		Setup:  setup,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// NODE_RESIZED_VM_ACCEL overrides QEMU's -accel, e.g. "kvm" where
	// (nested) KVM works.
	v, err := Boot(ctx, Config{Kernel: k.Image, Initramfs: initrd, Dir: dir, Accel: os.Getenv("NODE_RESIZED_VM_ACCEL"), UnplugCPUs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console tail:\n%s", v.TailConsole(60))
		}
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("kernel %s booted to agent ready in %v", k.Version, v.BootTime().Round(time.Millisecond))
	return v
}

// sh runs a command that must succeed and returns its trimmed output.
func sh(t *testing.T, v *VM, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, code, err := v.Exec(ctx, cmd)
	if d := time.Since(start); d > 2*time.Second {
		t.Logf("slow guest command (%v): %s", d.Round(time.Millisecond), cmd)
	}
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("guest: %q exited %d: %s", cmd, code, out)
	}
	return strings.TrimSpace(out)
}

// waitFor polls cmd in the guest until cond holds for its output.
func waitFor(t *testing.T, v *VM, what string, timeout time.Duration, cmd string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _, err := v.Exec(ctx, cmd)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		last = strings.TrimSpace(out)
		if cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last output of %q: %q", timeout, what, cmd, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func qmpCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// parseCPUList parses the kernel's list format, e.g. "0-2,5".
func parseCPUList(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("cpu list %q: %v", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("cpu list %q: %v", s, err)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}

func memTotalKB(t *testing.T, v *VM) int {
	t.Helper()
	out := sh(t, v, "grep MemTotal: /proc/meminfo")
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("MemTotal line %q", out)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("MemTotal line %q: %v", out, err)
	}
	return n
}

func memoryBlocks(t *testing.T, v *VM) map[string]bool {
	t.Helper()
	out := sh(t, v, "cd /sys/devices/system/memory && ls -d memory[0-9]*")
	blocks := map[string]bool{}
	for _, b := range strings.Fields(out) {
		blocks[b] = true
	}
	return blocks
}

// TestHotplug boots one guest and walks it through the hotplug scenarios
// in order; each later step needs the earlier ones.
func TestHotplug(t *testing.T) {
	probe := buildProbe(t, t.TempDir())
	v := bootVM(t,
		[]File{{Path: "/bin/probe", Source: probe}},
		"#!/bin/sh\necho setup-ran >/run/setup-marker\n")

	var timings []string
	step := func(name string, f func(t *testing.T)) {
		if t.Failed() {
			t.Logf("skipping %s: an earlier step failed", name)
			return
		}
		start := time.Now()
		ok := t.Run(name, f)
		d := time.Since(start).Round(time.Millisecond)
		timings = append(timings, fmt.Sprintf("%-16s %8v", name, d))
		if !ok {
			t.Fail()
		}
	}
	defer func() {
		t.Logf("boot to agent ready: %v", v.BootTime().Round(time.Millisecond))
		t.Logf("step timings:\n%s", strings.Join(timings, "\n"))
	}()

	step("boot", func(t *testing.T) {
		if got := sh(t, v, "cat /sys/devices/system/cpu/online"); got != "0" {
			t.Errorf("cpu/online = %q, want 0", got)
		}
		if got := sh(t, v, "cat /sys/devices/system/cpu/present"); got != "0" {
			t.Errorf("cpu/present = %q, want 0", got)
		}
		// 0-8 rather than 0-3: see physflatPossibleCPUs.
		if got := sh(t, v, "cat /sys/devices/system/cpu/possible"); got != "0-8" {
			t.Errorf("cpu/possible = %q, want 0-8", got)
		}
		if console, err := os.ReadFile(v.ConsoleLog()); err != nil {
			t.Error(err)
		} else if !strings.Contains(string(console), "Switched APIC routing to physical flat") {
			t.Error("guest APIC routing is not physical flat")
		}
		if got := sh(t, v, "cat /sys/devices/system/node/possible"); got != "0-1" {
			t.Errorf("node/possible = %q, want 0-1", got)
		}
		if got := sh(t, v, "cat /proc/sys/kernel/osrelease"); got != kernel.Version {
			t.Errorf("guest kernel %q, want %q", got, kernel.Version)
		}
	})

	step("cgroup2", func(t *testing.T) {
		if got := sh(t, v, "grep ' /sys/fs/cgroup ' /proc/mounts | cut -d' ' -f1-3"); got != "cgroup2 /sys/fs/cgroup cgroup2" {
			t.Errorf("/sys/fs/cgroup mount: %q, want cgroup2", got)
		}
		if got := sh(t, v, "grep -c '^cgroup ' /proc/mounts || true"); got != "0" {
			t.Errorf("%s cgroup v1 mounts", got)
		}
		ctrls := strings.Fields(sh(t, v, "cat /sys/fs/cgroup/cgroup.controllers"))
		sub := strings.Fields(sh(t, v, "cat /sys/fs/cgroup/cgroup.subtree_control"))
		for _, c := range []string{"cpu", "cpuset", "memory", "pids"} {
			if !contains(ctrls, c) {
				t.Errorf("controller %s not available: %v", c, ctrls)
			}
			if !contains(sub, c) {
				t.Errorf("controller %s not enabled in subtree_control: %v", c, sub)
			}
		}
		// A child cgroup gets the memory and cpuset files the daemon clamps.
		sh(t, v, "mkdir -p /sys/fs/cgroup/kubepods.slice")
		for _, f := range []string{"memory.max", "cpuset.cpus", "cpu.max", "pids.max"} {
			sh(t, v, "test -f /sys/fs/cgroup/kubepods.slice/"+f)
		}
		sh(t, v, "echo 64M >/sys/fs/cgroup/kubepods.slice/memory.max")
		if got := sh(t, v, "cat /sys/fs/cgroup/kubepods.slice/memory.max"); got != "67108864" {
			t.Errorf("memory.max = %q after writing 64M", got)
		}
		sh(t, v, "rmdir /sys/fs/cgroup/kubepods.slice")
		if n := len(sh(t, v, "grep -c . /proc/self/cgroup")); n == 0 {
			t.Error("empty /proc/self/cgroup")
		}
		if got := sh(t, v, "cat /proc/self/cgroup"); got != "0::/" {
			t.Errorf("/proc/self/cgroup = %q, want 0::/ (v2 only)", got)
		}
	})

	step("extra-files", func(t *testing.T) {
		if got := sh(t, v, "cat /run/setup-marker "+GuestSetupStatus); got != "setup-ran\n0" {
			t.Errorf("setup script: got %q", got)
		}
		got := sh(t, v, "/bin/probe")
		if !strings.HasPrefix(got, "probe: go=") || !strings.HasSuffix(got, "online=0") {
			t.Errorf("probe: %q", got)
		}
		out, code, err := v.Exec(qmpCtx(t, time.Minute), "echo out; echo err >&2; exit 3")
		if err != nil || code != 3 || out != "out\nerr\n" {
			t.Errorf("Exec(exit 3) = %q, %d, %v; want \"out\\nerr\\n\", 3, nil", out, code, err)
		}
	})

	var cpuDev string
	var newCPU int
	step("cpu-hot-add", func(t *testing.T) {
		before := parseCPUList(t, sh(t, v, "cat /sys/devices/system/cpu/present"))
		var err error
		if cpuDev, err = v.HotAddCPU(qmpCtx(t, 30*time.Second), 1); err != nil {
			t.Fatal(err)
		}
		present := waitFor(t, v, "a new present CPU", time.Minute, "cat /sys/devices/system/cpu/present",
			func(s string) bool { return s != "0" })
		added := diffInts(parseCPUList(t, present), before)
		if len(added) != 1 {
			t.Fatalf("present %q, before %v: want one new CPU", present, before)
		}
		newCPU = added[0]
		cpu := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", newCPU)
		if got := sh(t, v, "cat "+cpu+"/online"); got != "0" {
			t.Errorf("%s/online = %q, want 0 right after hot-add", cpu, got)
		}
		if got := sh(t, v, "cat /sys/devices/system/cpu/online"); got != "0" {
			t.Errorf("cpu/online = %q, want 0 before onlining", got)
		}
		// Node 1 had neither memory nor CPUs at boot: the kernel onlines
		// it, and links the CPU to it, only when the CPU comes online.
		t.Logf("before onlining: nodes %q", sh(t, v, "cat /sys/devices/system/node/online"))
		sh(t, v, "echo 1 >"+cpu+"/online")
		if got := sh(t, v, "cd "+cpu+" && ls -d node*"); got != "node1" {
			t.Errorf("cpu%d is on %q, want node1", newCPU, got)
		}
		if got := sh(t, v, "cat /sys/devices/system/cpu/online"); got != "0-1" {
			t.Errorf("cpu/online = %q, want 0-1", got)
		}
		if got := sh(t, v, "cat /sys/devices/system/node/node1/cpulist"); got != strconv.Itoa(newCPU) {
			t.Errorf("node1/cpulist = %q, want %d", got, newCPU)
		}
		// The guest saw the kernel's uevents for it.
		waitFor(t, v, "add and online uevents", 10*time.Second, "cat "+GuestUeventLog, func(s string) bool {
			return strings.Contains(s, fmt.Sprintf(" add /devices/system/cpu/cpu%d cpu", newCPU)) &&
				strings.Contains(s, fmt.Sprintf(" online /devices/system/cpu/cpu%d cpu", newCPU))
		})
	})

	const dimmSize = 256 << 20
	var dimmDev string
	var newBlocks []string
	var memBefore int
	step("dimm-hot-add", func(t *testing.T) {
		blockSize, err := strconv.ParseUint(sh(t, v, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		want := int(dimmSize / blockSize)
		before := memoryBlocks(t, v)
		memBefore = memTotalKB(t, v)
		if dimmDev, err = v.HotAddDIMM(qmpCtx(t, 30*time.Second), dimmSize, 1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, v, fmt.Sprintf("%d new memory blocks", want), time.Minute,
			"ls -d /sys/devices/system/memory/memory[0-9]* | wc -l",
			func(s string) bool { n, _ := strconv.Atoi(s); return n >= len(before)+want })
		for b := range memoryBlocks(t, v) {
			if !before[b] {
				newBlocks = append(newBlocks, b)
			}
		}
		if len(newBlocks) != want {
			t.Fatalf("new blocks %v, want %d of %d bytes", newBlocks, want, blockSize)
		}
		t.Logf("block size %#x; new blocks %v", blockSize, newBlocks)
		for _, b := range newBlocks {
			dir := "/sys/devices/system/memory/" + b
			if got := sh(t, v, "cat "+dir+"/state"); got != "offline" {
				t.Errorf("%s/state = %q, want offline", b, got)
			}
			if got := sh(t, v, "cd "+dir+" && ls -d node*"); got != "node1" {
				t.Errorf("%s is on %q, want node1", b, got)
			}
			if got := sh(t, v, "cat "+dir+"/uevent"); !strings.Contains(got, "ONLINE=0") && got != "" {
				t.Logf("%s/uevent: %q", b, got)
			}
		}
		if got := memTotalKB(t, v); got != memBefore {
			t.Errorf("MemTotal %d kB changed to %d before onlining", memBefore, got)
		}
		for _, b := range newBlocks {
			sh(t, v, "echo online_movable >/sys/devices/system/memory/"+b+"/state")
			if got := sh(t, v, "cat /sys/devices/system/memory/"+b+"/state"); got != "online" {
				t.Errorf("%s/state = %q after online_movable", b, got)
			}
			if got := sh(t, v, "cat /sys/devices/system/memory/"+b+"/valid_zones"); got != "Movable" {
				t.Errorf("%s/valid_zones = %q, want Movable", b, got)
			}
		}
		if got := memTotalKB(t, v); got-memBefore != dimmSize>>10 {
			t.Errorf("MemTotal grew by %d kB, want %d", got-memBefore, dimmSize>>10)
		}
		node1 := sh(t, v, "grep MemTotal /sys/devices/system/node/node1/meminfo")
		if !strings.Contains(node1, strconv.Itoa(dimmSize>>10)+" kB") {
			t.Errorf("node1 meminfo: %q", node1)
		}
		log := sh(t, v, "cat "+GuestUeventLog)
		for _, b := range newBlocks {
			for _, action := range []string{"add", "online"} {
				if !strings.Contains(log, " "+action+" /devices/system/memory/"+b+" memory") {
					t.Errorf("no %s uevent for %s in the guest's log", action, b)
				}
			}
		}
	})

	step("dimm-hot-remove", func(t *testing.T) {
		for _, b := range newBlocks {
			sh(t, v, "echo offline >/sys/devices/system/memory/"+b+"/state")
		}
		if got := memTotalKB(t, v); got != memBefore {
			t.Errorf("MemTotal %d kB after offlining, want %d", got, memBefore)
		}
		if err := v.DeviceDel(qmpCtx(t, 2*time.Minute), dimmDev); err != nil {
			t.Fatal(err)
		}
		after := memoryBlocks(t, v)
		for _, b := range newBlocks {
			if after[b] {
				t.Errorf("%s still present after DEVICE_DELETED", b)
			}
		}
		if got := memTotalKB(t, v); got != memBefore {
			t.Errorf("MemTotal %d kB after unplug, want %d", got, memBefore)
		}
		log := sh(t, v, "cat "+GuestUeventLog)
		for _, b := range newBlocks {
			for _, action := range []string{"offline", "remove"} {
				if !strings.Contains(log, " "+action+" /devices/system/memory/"+b+" memory") {
					t.Errorf("no %s uevent for %s in the guest's log", action, b)
				}
			}
		}
	})

	step("cpu-hot-remove", func(t *testing.T) {
		cpu := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", newCPU)
		sh(t, v, "echo 0 >"+cpu+"/online")
		if got := sh(t, v, "cat /sys/devices/system/cpu/online"); got != "0" {
			t.Errorf("cpu/online = %q after offlining, want 0", got)
		}
		if err := v.DeviceDel(qmpCtx(t, 2*time.Minute), cpuDev); err != nil {
			t.Fatal(err)
		}
		if got := sh(t, v, "cat /sys/devices/system/cpu/present"); got != "0" {
			t.Errorf("cpu/present = %q after unplug, want 0", got)
		}
		sh(t, v, "test ! -e "+cpu)
		if log := sh(t, v, "cat "+GuestUeventLog); !strings.Contains(log, fmt.Sprintf(" remove /devices/system/cpu/cpu%d cpu", newCPU)) {
			t.Errorf("no remove uevent for cpu%d", newCPU)
		}
		cpus, err := v.QueryHotpluggableCPUs(qmpCtx(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if slot := freeCPUSlot(cpus, 1); slot == nil {
			t.Error("node 1 has no free CPU slot after unplug")
		}
	})
}

// TestCloseStopsQEMU checks that Close leaves no process behind and is
// safe twice, and that a VM whose QEMU is gone reports it.
func TestCloseStopsQEMU(t *testing.T) {
	v := bootVM(t, nil, "")
	pid := v.cmd.Process.Pid
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("qemu pid %d still exists after Close", pid)
	}
	if _, _, err := v.Exec(context.Background(), "true"); err == nil {
		t.Error("Exec after Close succeeded")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// diffInts returns the members of a missing from b.
func diffInts(a, b []int) []int {
	seen := map[int]bool{}
	for _, x := range b {
		seen[x] = true
	}
	var out []int
	for _, x := range a {
		if !seen[x] {
			out = append(out, x)
		}
	}
	return out
}

// TestBootFailsFast: a QEMU that cannot start the guest makes Boot fail at
// once, with QEMU's own words in the error.
func TestBootFailsFast(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("no qemu-system-x86_64: run test/vm/fetch")
	}
	dir := t.TempDir()
	initrd := filepath.Join(dir, "empty.cpio")
	os.WriteFile(initrd, nil, 0o644)
	start := time.Now()
	_, err := Boot(context.Background(), Config{Kernel: filepath.Join(dir, "no-such-kernel"), Initramfs: initrd, Dir: dir})
	if err == nil {
		t.Fatal("Boot succeeded without a kernel")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Boot took %v to fail", d)
	}
	if !strings.Contains(err.Error(), "no-such-kernel") {
		t.Errorf("error does not show QEMU's complaint: %v", err)
	}
}

// TestBootEarlyStall: a guest whose initramfs stops printing before it
// says it is done ends the boot with ErrEarlyStall after EarlyStall, not
// after the boot timeout; and one that prints the marker is not stopped
// by a later silence (the default initramfs prints nothing while its
// agent starts).
func TestBootEarlyStall(t *testing.T) {
	k := needKernel(t)
	dir := t.TempDir()
	initrd, err := BuildInitramfs(InitramfsConfig{
		Kernel: k,
		Output: filepath.Join(dir, "initramfs.cpio"),
		Init:   "#!/bin/sh\necho 'init: waiting' >/dev/console\nexec sleep 600\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	v, err := Boot(ctx, Config{Kernel: k.Image, Initramfs: initrd, Dir: dir, EarlyStall: 10 * time.Second, EarlyDone: "init: done"})
	if err == nil {
		v.Close()
		t.Fatal("Boot succeeded with an init that never starts the agent")
	}
	if !errors.Is(err, ErrEarlyStall) {
		t.Fatalf("Boot failed without ErrEarlyStall: %v", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Boot ran into the boot timeout: %v", err)
	}
	t.Logf("stalled boot ended after %v: %.200s", time.Since(start).Round(time.Second), err)

	dir = t.TempDir()
	// The default initramfs, silent for longer than EarlyStall right
	// after it says it is done.
	init := strings.Replace(initScript, "\n", "\necho 'init: done' >/dev/console\nsleep 15\n", 1)
	initrd, err = BuildInitramfs(InitramfsConfig{Kernel: k, Output: filepath.Join(dir, "initramfs.cpio"), Init: init})
	if err != nil {
		t.Fatal(err)
	}
	v, err = Boot(ctx, Config{Kernel: k.Image, Initramfs: initrd, Dir: dir, EarlyStall: 10 * time.Second, EarlyDone: "init: done"})
	if err != nil {
		t.Fatalf("Boot stopped after the early stage ended: %v", err)
	}
	v.Close()
}
