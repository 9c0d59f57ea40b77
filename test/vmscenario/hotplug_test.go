package vmscenario

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// hotplugWrite is one write hotplugtool reports.
type hotplugWrite struct {
	ID      int     `json:"id"`
	Op      string  `json:"op"`
	Seconds float64 `json:"seconds"`
	Err     string  `json:"err"`
	Errno   string  `json:"errno"`
	Timeout bool    `json:"timeout"`
	Running bool    `json:"running"`
	NoFile  bool    `json:"noOnlineFile"`
}

func (w hotplugWrite) took() time.Duration {
	return time.Duration(w.Seconds * float64(time.Second)).Round(time.Millisecond)
}

// hotplug writes the hotplug files of ids in the guest through package
// hotplug (hotplugtool), each write bounded by timeout, and returns what
// each write returned and whether all succeeded.
func (g guest) hotplug(t testing.TB, timeout time.Duration, op string, ids ...int) ([]hotplugWrite, bool) {
	t.Helper()
	cmd := fmt.Sprintf("%s write %v %s", guestHotplug, timeout, op)
	for _, id := range ids {
		cmd += " " + strconv.Itoa(id)
	}
	out, code := g.Run(t, cmd+" 2>&1")
	var ws []hotplugWrite
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var w hotplugWrite
		if json.Unmarshal([]byte(line), &w) == nil && w.Op != "" {
			ws = append(ws, w)
		}
	}
	if len(ws) != len(ids) {
		t.Fatalf("%s: %d results for %d writes (exit %d):\n%s", cmd, len(ws), len(ids), code, out)
	}
	return ws, code == 0
}

// mustHotplug is hotplug for writes that must all succeed; it returns the
// slowest.
func (g guest) mustHotplug(t testing.TB, timeout time.Duration, op string, ids ...int) time.Duration {
	t.Helper()
	ws, ok := g.hotplug(t, timeout, op, ids...)
	var slowest time.Duration
	for _, w := range ws {
		if w.Err != "" {
			t.Errorf("%s %d: %s", op, w.ID, w.Err)
		}
		slowest = max(slowest, w.took())
	}
	if !ok {
		t.FailNow()
	}
	return slowest
}

// hotplugCPU: the CPU cpu-hot-add plugged (and the daemon onlined, through
// package hotplug's auto-onliner) is taken offline and brought online again
// through package hotplug; cpu0, which has no online file on this kernel,
// is refused without a write. The daemon follows each step in kubepods.
func (s *scenario) hotplugCPU(t *testing.T) {
	g := s.g
	cpuDir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", s.newCPU)
	cpus0 := int64(g.CPUSet(t, "/sys/devices/system/cpu/online").Len())

	start := time.Now()
	off := g.mustHotplug(t, 30*time.Second, "offline-cpu", s.newCPU)
	if got := g.Sh(t, "cat "+cpuDir+"/online"); got != "0" {
		t.Fatalf("%s/online = %q after the offline", cpuDir, got)
	}
	g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus without cpu%d", s.newCPU), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return !k.CPUs.Contains(s.newCPU) && k.CPUWeight == guesttest.KubeletWeight(cpus0-1)
	})
	offAt := time.Since(start)
	// Not hot-added, so the auto-onliner leaves it offline: only the
	// writes below bring it back.
	if got := g.Sh(t, "cat "+cpuDir+"/online"); got != "0" {
		t.Fatalf("%s/online = %q: something onlined a CPU that was not hot-added", cpuDir, got)
	}

	start = time.Now()
	on := g.mustHotplug(t, 30*time.Second, "online-cpu", s.newCPU)
	if got := g.Sh(t, "cat "+cpuDir+"/online"); got != "1" {
		t.Fatalf("%s/online = %q after the online", cpuDir, got)
	}
	g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus with cpu%d", s.newCPU), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return k.CPUs.Contains(s.newCPU) && k.CPUWeight == guesttest.KubeletWeight(cpus0)
	})
	onAt := time.Since(start)

	if _, code := g.Run(t, "test -e /sys/devices/system/cpu/cpu0/online"); code == 0 {
		t.Logf("cpu0 has an online file on this kernel: not checking the refusal")
	} else {
		ws, ok := g.hotplug(t, 30*time.Second, "offline-cpu", 0)
		if ok || !ws[0].NoFile {
			t.Errorf("offline cpu0: %+v, want refused as not hotpluggable", ws[0])
		}
		if _, code := g.Run(t, "test -e /sys/devices/system/cpu/cpu0/online"); code == 0 {
			t.Errorf("cpu0/online appeared")
		}
		t.Logf("cpu0 refused: %s", ws[0].Err)
	}
	t.Logf("cpu%d: offline write %v, out of kubepods after %v; online write %v, back in kubepods after %v",
		s.newCPU, off, offAt.Round(time.Millisecond), on, onAt.Round(time.Millisecond))
}

// plugDIMMLight hot-adds a DIMM and waits for the daemon to online its
// blocks and grow kubepods; plugDIMM checks all that follows in detail,
// this only what the scenarios after it need. It returns the device id and
// the new blocks.
func (s *scenario) plugDIMMLight(t *testing.T) (string, []string) {
	g := s.g
	blockSize, err := strconv.ParseUint(g.Sh(t, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	blocks0 := g.memoryBlocks(t)
	mem0 := g.MemTotal(t)
	dev, err := g.HotAddDIMM(guesttest.Context(t, guesttest.QMPTimeout), dimmSize, guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	g.waitFor(t, "the DIMM's blocks online (by the daemon's --auto-online)", guesttest.Settle,
		"cd /sys/devices/system/memory && for b in memory[0-9]*; do echo $b $(cat $b/state); done",
		func(out string) bool {
			blocks = blocks[:0]
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) == 2 && !blocks0[f[0]] {
					if f[1] != "online" {
						return false
					}
					blocks = append(blocks, f[0])
				}
			}
			return len(blocks) == int(dimmSize/blockSize)
		})
	g.waitFor(t, "MemTotal to grow by the DIMM", guesttest.Settle, "grep '^MemTotal:' /proc/meminfo",
		func(out string) bool { return guesttest.ParseMemTotal(t, out) == mem0+dimmSize })
	g.WaitKubepods(t, "memory.max with the DIMM", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(mem0+dimmSize) })
	return dev, blocks
}

// The bound of scenario hotplug-dimm's offline of a pinned block.
const pinnedTimeout = 2 * time.Second

// hotplugDIMM: a DIMM is plugged (the daemon onlines its blocks movable);
// one page on it is pinned, so that its block's offline retries for ever,
// and the offline through package hotplug is cut at its bound; then every
// block is offlined, onlined movable and offlined again through the
// package, and the unplug ends in DEVICE_DELETED. The machine is then the
// one before the DIMM.
func (s *scenario) hotplugDIMM(t *testing.T) {
	g := s.g
	mem0 := g.MemTotal(t)
	blockSize, err := strconv.ParseUint(g.Sh(t, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	dev, names := s.plugDIMMLight(t)
	var ids []int
	for _, n := range names {
		id, err := strconv.Atoi(strings.TrimPrefix(n, "memory"))
		if err != nil {
			t.Fatalf("block %q", n)
		}
		ids = append(ids, id)
	}
	states := func() string {
		cmd := "cd /sys/devices/system/memory && for b in " + strings.Join(names, " ") + "; do echo $b $(cat $b/state) $(cat $b/valid_zones); done"
		return g.Sh(t, cmd)
	}

	// A page on node 1 (all of it on the DIMM) held in a pipe: its
	// block cannot go offline, and the kernel retries until a signal.
	const ready, pinLog = "/run/pin.ready", "/run/pin.log"
	g.Sh(t, fmt.Sprintf("rm -f %s; %s pin %d %s >%s 2>&1 </dev/null & echo $!", ready, guestHotplug, guesttest.HotNode, ready, pinLog))
	pinned := g.waitFor(t, "a pinned page on node 1", guesttest.Settle, "cat "+ready+" 2>/dev/null; cat "+pinLog,
		func(out string) bool { return strings.HasPrefix(out, "pid ") || strings.Contains(out, "hotplugtool:") })
	var pid int
	var pfn uint64
	if _, err := fmt.Sscanf(pinned, "pid %d pfn %d", &pid, &pfn); err != nil {
		t.Fatalf("pin: %q", pinned)
	}
	block := int(pfn * 4096 / blockSize)
	if !slices.Contains(ids, block) {
		t.Fatalf("the pinned page (pfn %d) is in memory%d, not on the DIMM %v", pfn, block, names)
	}
	ws, ok := g.hotplug(t, pinnedTimeout, "offline-block", block)
	w := ws[0]
	t.Logf("offline of memory%d with a pinned page: %v after %v", block, w.Err, w.took())
	if ok || !w.Timeout || w.Errno != "EINTR" || w.Running {
		t.Errorf("offline of the pinned memory%d: %+v; want cut at %v, the kernel ending it with EINTR", block, w, pinnedTimeout)
	}
	if w.took() < pinnedTimeout || w.took() > pinnedTimeout+3*time.Second {
		t.Errorf("the cut offline returned after %v, want just past %v", w.took(), pinnedTimeout)
	}
	if got := g.Sh(t, fmt.Sprintf("cat /sys/devices/system/memory/memory%d/state", block)); got != "online" {
		t.Errorf("memory%d is %q after the cut offline, want online (the kernel rolls back)", block, got)
	}
	g.Sh(t, fmt.Sprintf("kill %d", pid))
	g.waitFor(t, "the pinning process gone", guesttest.Settle, fmt.Sprintf("test -e /proc/%d && echo there || echo gone", pid),
		func(out string) bool { return out == "gone" })

	start := time.Now()
	off1 := g.mustHotplug(t, 30*time.Second, "offline-block", ids...)
	if st := states(); strings.Count(st, " offline ") != len(ids) {
		t.Fatalf("after the offline:\n%s", st)
	}
	on := g.mustHotplug(t, 30*time.Second, "online-block", ids...)
	if st := states(); strings.Count(st, " online Movable") != len(ids) {
		t.Fatalf("after the online movable:\n%s", st)
	}
	off2 := g.mustHotplug(t, 30*time.Second, "offline-block", ids...)
	if st := states(); strings.Count(st, " offline ") != len(ids) {
		t.Fatalf("after the second offline:\n%s", st)
	}
	writesAt := time.Since(start)

	// The blocks are offline: the guest has nothing left to do on the
	// eject, and QEMU says DEVICE_DELETED.
	deleted := g.QMP().Expect(func(ev vm.Event) bool {
		var d struct {
			Device string `json:"device"`
		}
		return ev.Name == "DEVICE_DELETED" && json.Unmarshal(ev.Data, &d) == nil && d.Device == dev
	})
	defer deleted.Cancel()
	start = time.Now()
	if err := g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), dev); err != nil {
		t.Fatal(err)
	}
	if _, err := deleted.Wait(guesttest.Context(t, guesttest.QMPTimeout)); err != nil {
		t.Fatalf("no DEVICE_DELETED for %s: %v", dev, err)
	}
	unplugAt := time.Since(start)
	after := g.memoryBlocks(t)
	for _, n := range names {
		if after[n] {
			t.Errorf("%s still present after DEVICE_DELETED", n)
		}
	}
	g.waitFor(t, "MemTotal back to the size without the DIMM", guesttest.Settle, "grep '^MemTotal:' /proc/meminfo",
		func(out string) bool { return guesttest.ParseMemTotal(t, out) == mem0 })
	g.WaitKubepods(t, "memory.max without the DIMM", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(mem0) })
	t.Logf("DIMM %s blocks %v: offline %v, online movable %v, offline %v (slowest block each; all three %v); DEVICE_DELETED after %v",
		dev, names, off1, on, off2, writesAt.Round(time.Millisecond), unplugAt.Round(time.Millisecond))
}
