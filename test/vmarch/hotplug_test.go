package vmarch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// dimmSize is two of pseries' 256 MiB LMBs: two memory blocks.
const dimmSize = 512 << 20

// scenario is the state the steps hand on to each other.
type scenario struct {
	g        guest
	bootMem  int64
	cpuDev   string
	newCPU   int
	dimmDev  string
	blocks   []string // the DIMM's memory blocks, in order
	memTotal int64    // MemTotal before the DIMM
}

// TestHotplug boots one guest with the daemon and walks it through the
// steps in order (see the package documentation).
func TestHotplug(t *testing.T) {
	if env.skip != "" {
		t.Skip(env.skip)
	}
	total := time.Now()
	cfg := guesttest.Machine(env.kernel, env.initramfs)
	cfg.Arch = env.arch
	// movable_node: the kernel onlines the DIMM's blocks itself, as
	// ZONE_MOVABLE with this, so that it can offline them again for the
	// unplug (in ZONE_NORMAL on node 1, beside the hot-added CPU, the
	// guest refused).
	cfg.Append = "movable_node"
	v := guesttest.Boot(t, guesttest.BootOptions{Name: "vmarch", ConsoleTail: 60, LogTail: 40, HostCPU: true}, cfg)
	s := &scenario{g: guest{guesttest.Guest{VM: v, Ctl: guestCtl}}}
	t.Logf("%s guest, kernel %s; binaries built in %v, ready with the initramfs in %v; boot to agent ready %v",
		env.arch, env.kernel.Version, env.buildTime.Round(time.Millisecond), env.prepTime.Round(time.Millisecond),
		v.BootTime().Round(time.Millisecond))

	// A step that stopped half-way, or that -run left out, leaves a
	// machine the next one does not expect: the rest are skipped.
	steps := guesttest.NewSteps(t, total, 12)
	defer steps.LogTimings(v.BootTime())
	steps.Run("daemon-up", s.daemonUp)
	steps.Run("cpu-hot-add", s.cpuHotAdd)
	steps.Run("dimm-hot-add", s.dimmHotAdd)
	steps.Run("dimm-unplug", s.dimmUnplug)
	steps.Run("cpu-unplug", s.cpuUnplug)
	for _, rec := range s.g.DaemonLog(t, "") {
		if rec["level"] == "ERROR" {
			t.Errorf("the daemon logged an error: %v", rec)
		}
	}
}

// daemonUp: the setup script ran, and the daemon answers and models the
// boot machine as cAdvisor does: one CPU, MemTotal; kubepods as the
// kubelet laid it out.
func (s *scenario) daemonUp(t *testing.T) {
	g := s.g
	g.WaitDaemon(t, guesttest.Settle)
	s.bootMem = g.MemTotal(t)
	st := g.Status(t)
	kv := g.kubeletView(t)
	t.Logf("guest: %s; cpus online %q present %q possible %q (cpuN devices %q); memory block size 0x%s; %s",
		g.Sh(t, "uname -m -r"), st.CPUs.Online.String(), st.CPUs.Present.String(), st.CPUs.Possible.String(),
		st.CPUs.Devices.String(), g.Sh(t, "cat /sys/devices/system/memory/block_size_bytes"),
		g.Sh(t, "grep -E '^(MemTotal|Hugepagesize):' /proc/meminfo | tr -s ' ' | tr '\\n' ' '"))
	t.Logf("cAdvisor: %v", kv)
	checkKubeletExact(t, st, kv)
	if st.PhysicalCPU() != 1 || st.Physical["memory"] != s.bootMem {
		t.Errorf("the daemon's physical cpu=%d memory=%d, want 1 and MemTotal %d", st.PhysicalCPU(), st.Physical["memory"], s.bootMem)
	}
	if k := g.Kubepods(t); k.MemoryMax != guesttest.WantMemoryMax(s.bootMem) || k.CPUs.String() != "0" || k.CPUWeight != guesttest.KubeletWeight(1) {
		t.Errorf("kubepods at start: %v; want memory.max=%s cpu.weight=%d cpuset.cpus=0", k, guesttest.WantMemoryMax(s.bootMem), guesttest.KubeletWeight(1))
	}
}

// cpuHotAdd: a core plugged into node 1. The kernel attaches and onlines
// its CPU; the daemon counts exactly those uevents, models the CPU and
// node 1 as cAdvisor does, and grows kubepods' CPUs; its auto-onliner,
// racing the kernel, raises no error.
func (s *scenario) cpuHotAdd(t *testing.T) {
	g := s.g
	present0 := g.CPUSet(t, "/sys/devices/system/cpu/present")
	nodes0 := g.Sh(t, "cat /sys/devices/system/node/online")
	m := g.mark(t)

	start := time.Now()
	dev, err := g.HotAddCPU(guesttest.Context(t, guesttest.QMPTimeout), guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	s.cpuDev = dev
	g.WaitStatus(t, "two online CPUs", guesttest.Settle, func(st *guesttest.Status) bool { return st.CPUs.Online.Len() == 2 })
	seen := time.Since(start)
	present := g.CPUSet(t, "/sys/devices/system/cpu/present")
	added := present.Difference(present0)
	if len(added) != 1 {
		t.Fatalf("present %q (was %q): want exactly one new CPU", present.String(), present0.String())
	}
	s.newCPU = added[0]
	cpuPath := fmt.Sprintf("/devices/system/cpu/cpu%d", s.newCPU)
	if got := g.Sh(t, "cat /sys/devices/system/node/online"); nodes0 != "0" || got != "0-1" {
		t.Errorf("online nodes %q -> %q, want 0 -> 0-1", nodes0, got)
	}

	// The kernel's uevents: node 1 comes with its first CPU; the CPU
	// itself only goes online (its device was registered at boot).
	want := []string{"add /devices/system/node/node1", "online " + cpuPath}
	changes := g.follow(t, m, want)

	st := g.Status(t)
	kv := g.kubeletView(t)
	checkKubeletExact(t, st, kv)
	if !st.CPUs.Online.Contains(s.newCPU) || !st.CPUs.Present.Contains(s.newCPU) {
		t.Errorf("the daemon's CPUs: online %q present %q, want cpu%d in both", st.CPUs.Online.String(), st.CPUs.Present.String(), s.newCPU)
	}
	if n := len(st.NUMANodes); n != 2 || !st.NUMANodes[1].CPUs.Contains(s.newCPU) {
		t.Errorf("the daemon's NUMA nodes %+v, want node1 with cpu%d", st.NUMANodes, s.newCPU)
	}
	if kv.NumCores != int64(st.CPUs.Online.Len()) {
		t.Logf("cAdvisor, hence the kubelet, counts %d CPUs for %d online, and so does the daemon: %v; the kernel's node links: %s",
			kv.NumCores, st.CPUs.Online.Len(), kv, g.Sh(t, "cd /sys/devices/system/node && echo node*/cpu[0-9]*"))
	}

	// The kubelet's cpu.weight for its cpu capacity; the online CPUs.
	k := g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus with cpu%d", s.newCPU), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return k.CPUs.Contains(s.newCPU) && k.CPUWeight == guesttest.KubeletWeight(kv.NumCores)
	})
	g.checkAutoOnline(t, fmt.Sprintf("cpu%d", s.newCPU))
	t.Logf("cpu%d (%s, node %d): in the daemon's model %v after device_add; kubepods %v", s.newCPU, dev, guesttest.HotNode,
		seen.Round(time.Millisecond), k)
	logChanges(t, changes)
}

// dimmHotAdd: a 512 MiB DIMM on node 1, two LMBs the kernel adds and
// onlines one after the other; the daemon counts those uevents and grows
// the model and kubepods' memory.max by the DIMM.
func (s *scenario) dimmHotAdd(t *testing.T) {
	g := s.g
	s.memTotal = g.MemTotal(t)
	blocks0 := g.memoryBlocks(t)
	m := g.mark(t)

	start := time.Now()
	dev, err := g.HotAddDIMM(guesttest.Context(t, guesttest.QMPTimeout), dimmSize, guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	s.dimmDev = dev
	want := s.memTotal + dimmSize
	g.WaitStatus(t, "the DIMM's memory", guesttest.Settle, func(st *guesttest.Status) bool { return st.Physical["memory"] == want })
	seen := time.Since(start)
	if got := g.MemTotal(t); got != want {
		t.Errorf("MemTotal %s, want %s", guesttest.MiB(got), guesttest.MiB(want))
	}
	for _, b := range g.memoryBlocks(t) {
		if !slices.Contains(blocks0, b) {
			s.blocks = append(s.blocks, b)
		}
	}
	if len(s.blocks) != 2 {
		t.Fatalf("new memory blocks %v, want 2", s.blocks)
	}
	var wantUev []string
	for _, b := range s.blocks {
		wantUev = append(wantUev, "add /devices/system/memory/"+b, "online /devices/system/memory/"+b)
		state := g.Sh(t, "cd /sys/devices/system/memory/"+b+" && echo $(cat state) $(cat valid_zones) $(ls -d node*)")
		if state != fmt.Sprintf("online Movable node%d", guesttest.HotNode) {
			t.Errorf("%s: %q, want online Movable node%d", b, state, guesttest.HotNode)
		}
	}
	changes := g.follow(t, m, wantUev)
	st := g.Status(t)
	checkKubeletExact(t, st, g.kubeletView(t))
	if n := len(st.NUMANodes); n != 2 || st.NUMANodes[1].Memory != dimmSize {
		t.Errorf("the daemon's NUMA nodes %+v, want node1 with the DIMM's %s", st.NUMANodes, guesttest.MiB(dimmSize))
	}
	k := g.WaitKubepods(t, "memory.max with the DIMM", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(want) })
	g.checkAutoOnline(t, s.blocks...)
	t.Logf("DIMM %s (%s, blocks %v on node%d): in the daemon's model %v after device_add (physical memory %s); kubepods %v",
		dev, guesttest.MiB(dimmSize), s.blocks, guesttest.HotNode, seen.Round(time.Millisecond), guesttest.MiB(st.Physical["memory"]), k)
	logChanges(t, changes)
}

// dimmUnplug: the DIMM is taken back; the kernel offlines and removes its
// blocks, the daemon shrinks the model and clamps kubepods' memory.max.
func (s *scenario) dimmUnplug(t *testing.T) {
	g := s.g
	m := g.mark(t)
	start := time.Now()
	if err := g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), s.dimmDev); err != nil {
		t.Fatal(err)
	}
	deleted := time.Since(start)
	g.WaitStatus(t, "the memory without the DIMM", guesttest.Settle, func(st *guesttest.Status) bool { return st.Physical["memory"] == s.memTotal })
	seen := time.Since(start)
	var want []string
	for _, b := range s.blocks {
		want = append(want, "offline /devices/system/memory/"+b, "remove /devices/system/memory/"+b)
	}
	changes := g.follow(t, m, want)
	st := g.Status(t)
	checkKubeletExact(t, st, g.kubeletView(t))
	k := g.WaitKubepods(t, "memory.max without the DIMM", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(s.memTotal) })
	t.Logf("DIMM %s: DEVICE_DELETED %v after device_del, out of the daemon's model after %v (physical memory %s); kubepods %v",
		s.dimmDev, deleted.Round(time.Millisecond), seen.Round(time.Millisecond), guesttest.MiB(st.Physical["memory"]), k)
	logChanges(t, changes)
}

// cpuUnplug: the core is taken back; the kernel offlines its CPU, the
// daemon models one CPU and takes it out of kubepods' cpuset.
func (s *scenario) cpuUnplug(t *testing.T) {
	g := s.g
	m := g.mark(t)
	start := time.Now()
	if err := g.DeviceDel(guesttest.Context(t, guesttest.UnplugTimeout), s.cpuDev); err != nil {
		t.Fatal(err)
	}
	deleted := time.Since(start)
	g.WaitStatus(t, "one online CPU", guesttest.Settle, func(st *guesttest.Status) bool { return st.CPUs.Online.Len() == 1 })
	seen := time.Since(start)
	want := []string{fmt.Sprintf("offline /devices/system/cpu/cpu%d", s.newCPU)}
	changes := g.follow(t, m, want)
	st := g.Status(t)
	checkKubeletExact(t, st, g.kubeletView(t))
	if st.PhysicalCPU() != 1 || st.CPUs.Online.Contains(s.newCPU) {
		t.Errorf("the daemon's cpu=%d, online %q; want 1, without cpu%d", st.PhysicalCPU(), st.CPUs.Online.String(), s.newCPU)
	}
	// The kernel takes the CPU out of cpu/present after its offline
	// uevent, and no uevent follows: the daemon's read after the uevent
	// may come first, and then its model keeps the CPU present (not
	// counted: capacity is the online CPUs) until its next resync. A
	// requested one must correct it.
	if st.CPUs.Present.Contains(s.newCPU) {
		t.Logf("the daemon's model keeps cpu%d present (%q; the kernel's %q): its read came before the kernel cleared it, with no uevent after; a resync:\n%s",
			s.newCPU, st.CPUs.Present.String(), g.Sh(t, "cat /sys/devices/system/cpu/present"), g.Sh(t, guestCtl+" --socket "+guesttest.Socket+" resync"))
		if st = g.Status(t); st.CPUs.Present.Contains(s.newCPU) {
			t.Errorf("after a resync the daemon's present CPUs are %q, still with cpu%d", st.CPUs.Present.String(), s.newCPU)
		}
	}
	k := g.WaitKubepods(t, fmt.Sprintf("cpuset.cpus without cpu%d", s.newCPU), guesttest.Settle, func(k guesttest.Kubepods) bool {
		return !k.CPUs.Contains(s.newCPU) && k.CPUWeight == guesttest.KubeletWeight(1)
	})
	t.Logf("cpu%d (%s): DEVICE_DELETED %v after device_del, out of the daemon's model after %v; kubepods %v",
		s.newCPU, s.cpuDev, deleted.Round(time.Millisecond), seen.Round(time.Millisecond), k)
	logChanges(t, changes)
}

// memoryBlocks lists the memoryN directories, in numeric order.
func (g guest) memoryBlocks(t testing.TB) []string {
	t.Helper()
	return strings.Fields(g.Sh(t, "cd /sys/devices/system/memory && ls -d memory[0-9]* | sort -t y -k 2 -n"))
}

// mark is where the guest and the daemon stood before a step.
type mark struct {
	seqnum uint64        // the kernel's newest uevent SEQNUM
	change uint64        // the daemon's newest change
	stats  monitor.Stats // the daemon's counters
}

func (g guest) mark(t testing.TB) mark {
	t.Helper()
	return mark{seqnum: g.lastSeqnum(t), change: g.LastChangeID(t), stats: g.Status(t).Stats}
}

// follow checks that the kernel sent exactly the wanted uevents ("ACTION
// DEVPATH" of the cpu, memory and node subsystems) since m, in order, and
// that the daemon took exactly those, lost none and made its model changes
// of them alone; it returns those changes.
func (g guest) follow(t testing.TB, m mark, want []string) []monitor.Change {
	t.Helper()
	deadline := time.Now().Add(guesttest.Settle)
	for len(g.uevents(t, m.seqnum)) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %d uevents after seqnum %d; got %v", guesttest.Settle, len(want), m.seqnum, g.uevents(t, m.seqnum))
		}
		time.Sleep(guesttest.Poll)
	}
	time.Sleep(time.Second) // for any uevent that should not come
	uev := g.uevents(t, m.seqnum)
	var names []string
	for _, u := range uev {
		names = append(names, u.String())
	}
	if !slices.Equal(names, want) {
		t.Errorf("uevents of cpu, memory and node:\n got  %q\n want %q", names, want)
	}

	// The daemon's count of the uevents it took, then its changes once
	// they stay as they are (the last rebuild done).
	var st *guesttest.Status
	for {
		st = g.Status(t)
		if st.Stats.Uevents-m.stats.Uevents >= uint64(len(uev)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for the daemon to take %d uevents; it took %d", guesttest.Settle, len(uev), st.Stats.Uevents-m.stats.Uevents)
		}
		time.Sleep(guesttest.Poll)
	}
	if got := st.Stats.Uevents - m.stats.Uevents; got != uint64(len(uev)) {
		t.Errorf("the daemon took %d uevents, the guest logged %d: %v", got, len(uev), uev)
	}
	if st.Stats.LostEvents != m.stats.LostEvents || st.Stats.SeqnumGaps != m.stats.SeqnumGaps {
		t.Errorf("the daemon lost uevents: lostEvents %d -> %d, seqnumGaps %d -> %d",
			m.stats.LostEvents, st.Stats.LostEvents, m.stats.SeqnumGaps, st.Stats.SeqnumGaps)
	}
	changes := guesttest.ChangesSince(g.Events(t), m.change)
	for quiet := time.Now(); time.Since(quiet) < 2*time.Second; time.Sleep(guesttest.Poll) {
		if c := guesttest.ChangesSince(g.Events(t), m.change); len(c) != len(changes) {
			changes, quiet = c, time.Now()
		}
	}
	checkChanges(t, changes, uev)
	return changes
}

// checkChanges requires the daemon's model changes for a step to be made
// of the step's uevents: each triggered by uevents or the MemTotal watch
// (which may see the same change first, or beside them), each with
// seqnums of the step (a uevent whose effect an earlier rebuild already
// read makes no change of its own), each batch of uevents in one change,
// or two when its CPUs' part is published first (monitor's cpusFirst: the
// same seqnums, the CPUs first, the rest of the machine after), and each
// incremental model equal to a full rebuild where it was compared.
func checkChanges(t testing.TB, changes []monitor.Change, uev []uevent) {
	t.Helper()
	seqs := map[uint64]bool{}
	for _, u := range uev {
		seqs[u.Seqnum] = true
	}
	if len(changes) == 0 {
		t.Errorf("no model change for the uevents %v", uev)
	}
	for i, c := range changes {
		// The MemTotal watch polls: when its poll lands between a
		// block's onlining and the online uevent's batch, the change
		// carries both triggers; when it lands between a DIMM's last
		// block leaving and that block's offline and remove uevents
		// reaching the daemon (a loaded machine), the change is the
		// watch's alone, with no seqnum, and those uevents then make
		// none (the daemon took every one of them: checked above).
		// Anything else is not the step's.
		others := slices.DeleteFunc(slices.Clone(c.Triggers), func(tr monitor.Trigger) bool {
			return tr == monitor.TriggerUevent || tr == monitor.TriggerMemTotal
		})
		if len(c.Triggers) == 0 || len(others) > 0 || !slices.Contains(c.Triggers, monitor.TriggerUevent) && c.Events != 0 {
			t.Errorf("change #%d triggered by %v, want uevents or the MemTotal watch", c.ID, c.Triggers)
		}
		if c.Rebuild.Mismatch != "" {
			t.Errorf("change #%d: the incremental model differed from a full rebuild: %s", c.ID, c.Rebuild.Mismatch)
		}
		if c.Events != c.Seqnums.Count {
			t.Errorf("change #%d counts %d uevents and %d seqnums (%v)", c.ID, c.Events, c.Seqnums.Count, c.Seqnums)
		}
		for _, r := range c.Seqnums.Ranges {
			for n := r.First; n <= r.Last; n++ {
				if !seqs[n] {
					t.Errorf("change #%d has seqnum %d, not one of the step's uevents %v", c.ID, n, uev)
				}
			}
		}
		if i > 0 && c.Seqnums.String() == changes[i-1].Seqnums.String() {
			if i > 1 && changes[i-2].Seqnums.String() == c.Seqnums.String() {
				t.Errorf("changes #%d to #%d: three changes of one batch (%v)", changes[i-2].ID, c.ID, c.Seqnums)
			}
			continue
		}
		for _, p := range changes[:i] {
			if overlaps(p.Seqnums, c.Seqnums) {
				t.Errorf("changes #%d (%v) and #%d (%v) share uevents", p.ID, p.Seqnums, c.ID, c.Seqnums)
			}
		}
	}
}

func overlaps(a, b monitor.Seqnums) bool {
	for _, x := range a.Ranges {
		for _, y := range b.Ranges {
			if x.First <= y.Last && y.First <= x.Last {
				return true
			}
		}
	}
	return false
}

// checkAutoOnline requires the auto-onliner to have raised no error for
// the devices: it races the kernel's own onlining, and either wins
// (onlined) or finds the device online (already). It logs which.
func (g guest) checkAutoOnline(t testing.TB, devices ...string) {
	t.Helper()
	for _, d := range devices {
		var outcome []string
		for _, msg := range []string{"brought a hot-added device online", "online before the daemon came to it", "bring a hot-added device online"} {
			for _, rec := range g.DaemonLog(t, msg) {
				if rec["device"] != d {
					continue
				}
				outcome = append(outcome, fmt.Sprint(rec["msg"]))
				if rec["level"] == "ERROR" {
					t.Errorf("the auto-onliner failed on %s: %v", d, rec)
				}
			}
		}
		if len(outcome) == 0 {
			outcome = []string{"the kernel was first, no add uevent left the device offline in a model"}
		}
		t.Logf("auto-online of %s: %s", d, strings.Join(outcome, "; "))
	}
}

func logChanges(t testing.TB, changes []monitor.Change) {
	t.Helper()
	for _, c := range changes {
		t.Logf("model change #%d: %d uevent(s) (seqnums %v), latency %v, %s rebuild, capacity cpu=%d memory=%s: %s",
			c.ID, c.Events, c.Seqnums, c.Latency().Round(time.Microsecond), c.Rebuild.Kind,
			c.Capacity["cpu"]/1000, guesttest.MiB(c.Capacity["memory"]), c.Changes)
	}
}
