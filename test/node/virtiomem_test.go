package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-resized/node-resized/test/vm"
)

// stepsVirtioMem is TestKubeletRestart's virtio-mem device: 2 GiB on node
// 0, QEMU's default 2 MiB block (the driver's Sub Block Mode, in which a
// shrink unplugs 2 MiB sub-blocks of an online block with no uevent, so
// that only MemTotal moves, before the emptied block goes with its
// offline and remove uevents), nothing plugged at boot.
var stepsVirtioMem = vm.VirtioMemDevice{ID: "vmem0", Node: 0, Size: 2 << 30}

// virtioMemRequests are the requested sizes a virtio-mem run walks
// through, from 0: two gains, then three losses, of which 512 -> 386 MiB
// takes 63 of the 64 sub-blocks (2 MiB) of one block and leaves the
// block, so that MemTotal drops by 126 MiB with no uevent at all and only
// the MemTotal watch can see it. (A smaller drop is under
// --memory-jitter, 100Mi: the model follows it, nothing is relayed.)
var virtioMemRequests = []uint64{1 << 30, 2 << 30, 512 << 20, 386 << 20, 0}

// vmemStep is what one change of the device's requested size cost.
type vmemStep struct {
	from, to uint64
	uevents  map[string]int // memory uevents the daemon received, by action
	blocks   [2]int         // the device's memory blocks in sysfs before and after
	changes  int            // "machine changed" records
	memtotal int            // ... of which the MemTotal watch found
	patches  int            // "Node status patched"
	clamps   int            // "kubepods clamped"
	restarts int            // "kubelet restarted"
	lost     float64        // uevents_dropped_total's growth, every reason
	size     time.Duration  // qom-set to the device's size (the host's view)
	model    time.Duration  // qom-set to the model's first change
	last     time.Duration  // qom-set to the model's last change
	clamp    time.Duration  // qom-set to the clamp (a loss)
	clampLat string         // the first clamp's own latency, from the change's first event
	patch    time.Duration  // qom-set to the first status patch
	ready    time.Duration  // qom-set to the Node Ready by the restarted kubelet, with the target
	accepted time.Duration  // qom-set to Accepted at the target
}

// virtioMemSteps is #d of TestKubeletRestart: a virtio-mem device's
// requested size raised 0 -> 1 GiB -> 2 GiB and lowered -> 512 MiB ->
// 386 MiB (part of a block: no uevent) -> 0,
// the way KubeVirt changes a VM's memory. Who onlines the driver's blocks
// is guestOnlines: the guest's kernel (auto_online_blocks online_movable,
// what memhp_default_state or a distribution's udev rule sets; the daemon
// without --auto-online), or node-resized (the kernel's default, offline,
// and --auto-online). For each step: the device reaches its size; the
// daemon's model follows with no event lost; a gain ends with the kubelet
// restarted into it and Accepted; a loss is clamped before anything else
// (the first status patch, the restart) and then takes the same path;
// the Node ends at the boot memory plus the device's size. The uevents,
// changes (and of them the MemTotal watch's), patches, clamps, restarts
// and each step's times are logged as a table.
func (s *installed) virtioMemSteps(t *testing.T, guestOnlines bool) {
	n := s.n
	ctx := context.Background()
	policy, args := "offline", "--auto-online "+relayPolicy
	if guestOnlines {
		policy, args = "online_movable", relayPolicy
	}
	guestSh(t, n, "echo "+policy+" >/sys/devices/system/memory/auto_online_blocks")
	setDaemonArgs(t, n, args)
	restartAt := guestNow(t, n)
	guestSh(t, n, "systemctl restart node-resized")
	waitDaemonLog(t, n, "machine model built", restartAt, time.Minute)
	waitNode(t, s.admin, n.Name(), "Accepted by node-resized "+args, time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})

	info, err := n.VirtioMemInfo(ctx, stepsVirtioMem.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 0 {
		t.Fatalf("%s has %d bytes plugged before the run, want 0", info.ID, info.Size)
	}
	blockSize, err := strconv.ParseUint(guestSh(t, n, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	first, last := info.FirstBlock(blockSize), info.FirstBlock(blockSize)+int(info.MaxSize/blockSize)-1
	t.Logf("%s: %d MiB at %#x (blocks memory%d-memory%d), device block %d KiB; auto_online_blocks %s; node-resized %s",
		info.ID, info.MaxSize>>20, info.MemAddr, first, last, info.BlockSize>>10, policy, args)
	deviceBlocks := func() int {
		out := guestSh(t, n, "cd /sys/devices/system/memory && ls -d memory[0-9]*")
		c := 0
		for _, b := range strings.Fields(out) {
			if id, err := strconv.Atoi(strings.TrimPrefix(b, "memory")); err == nil && id >= first && id <= last {
				c++
			}
		}
		return c
	}

	mem0 := memTotal(t, n)
	var steps []vmemStep
	from := uint64(0)
	for _, to := range virtioMemRequests {
		st := s.virtioMemStep(t, from, to, mem0, blockSize, info.BlockSize, deviceBlocks)
		steps = append(steps, st)
		from = to
		if t.Failed() {
			break
		}
	}
	mode := "the guest onlines (" + policy + ")"
	if !guestOnlines {
		mode = "node-resized onlines (--auto-online)"
	}
	for _, st := range steps {
		var acts []string
		for _, a := range []string{"add", "online", "offline", "remove"} {
			acts = append(acts, fmt.Sprintf("%s %d", a, st.uevents[a]))
		}
		s.timing("virtio-mem, %s, %d -> %d MiB: uevents %s; blocks %d -> %d; changes %d (MemTotal watch %d); patches %d; clamps %d; kubelet restarts %d; "+
			"requested-size -> size %v, -> model %v (last change %v), -> clamp %v (its latency %s), -> first patch %v, -> kubelet Ready %v, -> Accepted %v",
			mode, st.from>>20, st.to>>20, strings.Join(acts, ", "), st.blocks[0], st.blocks[1], st.changes, st.memtotal, st.patches, st.clamps, st.restarts,
			st.size.Round(time.Millisecond), st.model.Round(time.Millisecond), st.last.Round(time.Millisecond), st.clamp.Round(time.Millisecond), st.clampLat,
			st.patch.Round(time.Millisecond), st.ready.Round(time.Millisecond), st.accepted.Round(time.Millisecond))
	}
}

// virtioMemStep changes the device's requested size from from to to and
// checks what must follow (virtioMemSteps). mem0 is MemTotal with nothing
// of the device plugged; memBlock is the guest's memory block size and
// subBlock the device's block size, the most the driver plugs or unplugs
// of a block with no uevent; blocks counts the device's memory blocks.
func (s *installed) virtioMemStep(t *testing.T, from, to uint64, mem0 int64, memBlock, subBlock uint64, blocks func() int) vmemStep {
	t.Helper()
	n, cs := s.n, s.admin
	ctx := context.Background()
	what := fmt.Sprintf("virtio-mem %d -> %d MiB", from>>20, to>>20)
	st := vmemStep{from: from, to: to, uevents: map[string]int{}}
	want := mem0 + int64(to)
	loss := to < from

	uevents := func() map[string]float64 {
		m := map[string]float64{}
		for _, a := range []string{"add", "online", "offline", "remove"} {
			m[a] = daemonMetric(t, n, `node_resized_uevents_total{action="`+a+`",subsystem="memory"}`)
		}
		return m
	}
	u0, lost0 := uevents(), daemonMetricSum(t, n, "node_resized_uevents_dropped_total")
	st.blocks[0] = blocks()
	pid0 := kubeletPID(t, n)
	mark := guestNow(t, n)
	start := time.Now()
	if err := n.SetVirtioMemRequested(ctx, stepsVirtioMem.ID, to); err != nil {
		t.Fatal(err)
	}
	took, sizes, err := n.WaitVirtioMemSize(ctx, stepsVirtioMem.ID, to, 3*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, guestSh(t, n, "dmesg | grep -i virtio_mem | tail -5 || true"))
	}
	st.size = took
	t.Logf("%s: the device's size reached after %v (sizes seen %s)", what, took.Round(time.Millisecond), vm.FormatSizes(sizes))

	// The clamp comes first on a loss: before the Node is patched and the
	// kubelet restarted.
	if loss {
		clamps := waitDaemonLog(t, n, "kubepods clamped", mark, time.Minute)
		st.clamp = clamps[0].Time().Sub(mark)
		st.clampLat = clamps[0].str("LATENCY")
	}
	r := s.waitDaemonRestartsKubelet(t, what, pid0, mark, 2*time.Minute, func(v nodeVersion) bool { return v.mem == want })
	st.ready = r.ready + r.uevent.Sub(mark)
	waitNode(t, cs, n.Name(), what+": Accepted at the device's size", 2*time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && c.Status == corev1.ConditionTrue && nodeReady(nd) &&
			nd.Status.Capacity.Memory().Value() == want
	})
	st.accepted = time.Since(start)
	if got := memTotal(t, n); got != want {
		t.Errorf("%s: MemTotal %s, want %s", what, mibs(got), mibs(want))
	}
	if got := kubepodsMax(t, n); got != want-DefaultSystemReservedMemory-DefaultKubeReservedMemory {
		t.Errorf("%s: kubepods.slice MemoryMax %s, want %s", what, mibs(got), mibs(want-DefaultSystemReservedMemory-DefaultKubeReservedMemory))
	}

	// What the step cost, from the daemon's journal and metrics.
	logs := daemonLogs(t, n, mark)
	changes := logs("machine changed")
	var firstPatch time.Time
	patches := logs("Node status patched")
	if len(patches) > 0 {
		firstPatch = patches[0].Time()
		st.patch = firstPatch.Sub(mark)
	}
	st.patches = len(patches)
	clamps := logs("kubepods clamped")
	st.clamps = len(clamps)
	st.restarts = len(logs("kubelet restarted"))
	var prev int64 = -1
	for _, e := range changes {
		st.changes++
		if strings.Contains(e.str("TRIGGERS"), "memtotal") {
			st.memtotal++
		}
		if st.changes == 1 {
			st.model = e.Time().Sub(mark)
		}
		st.last = e.Time().Sub(mark)
		// Each change moves towards the device's size, never back.
		if m := capacityMemory(e.str("CAPACITY")); m >= 0 {
			if prev >= 0 && (loss && m > prev || !loss && m < prev) {
				t.Errorf("%s: change %s moved the memory back: %s after %s", what, e.str("CHANGE_ID"), mibs(m), mibs(prev))
			}
			prev = m
		}
		t.Logf("%s: journal: %s %q: %s", what, e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	if prev != want {
		t.Errorf("%s: the model's last memory change is at %s, want %s", what, mibs(prev), mibs(want))
	}
	u1 := uevents()
	for a, v := range u1 {
		st.uevents[a] = int(v - u0[a])
	}
	st.lost = daemonMetricSum(t, n, "node_resized_uevents_dropped_total") - lost0
	st.blocks[1] = blocks()

	// What must hold: the kernel's whole-block changes each came as an
	// add and online (or offline and remove) pair the daemon received; no
	// uevent was lost; the changes were at least one and at most one per
	// block and sub-block step the driver took; a loss was clamped once,
	// before the first patch; one kubelet restart.
	diff := st.blocks[1] - st.blocks[0]
	if loss {
		if st.uevents["offline"] != -diff || st.uevents["remove"] != -diff || st.uevents["add"] != 0 || st.uevents["online"] != 0 {
			t.Errorf("%s: memory uevents %v for %d blocks removed, want an offline and a remove each", what, st.uevents, -diff)
		}
		if st.clamps < 1 || !firstPatch.IsZero() && clamps[0].Time().After(firstPatch) {
			t.Errorf("%s: %d clamps, the first not before the first status patch", what, st.clamps)
		}
	} else {
		if st.uevents["add"] != diff || st.uevents["online"] != diff || st.uevents["offline"] != 0 || st.uevents["remove"] != 0 {
			t.Errorf("%s: memory uevents %v for %d blocks added, want an add and an online each", what, st.uevents, diff)
		}
		if st.clamps != 0 {
			t.Errorf("%s: %d clamps on a gain", what, st.clamps)
		}
	}
	// The model's changes: at least one; at most one per batch of the
	// kernel's uevents, which is at most two per block (a block going
	// offline, then removed; added and online come together), one for a
	// change of MemTotal alone, and one per sub-block the driver took out
	// of a block it left (it unplugs them one by one, and the MemTotal
	// watch may see MemTotal at any point on the way: 512 -> 386 MiB has
	// been seen as -4 MiB, then -122 MiB, the first under the jitter and
	// not relayed); a step that adds or removes no block is the MemTotal
	// watch's alone.
	moved := max(to, from) - min(to, from)
	subBlocks := int((moved - min(moved, uint64(max(diff, -diff))*memBlock)) / max(subBlock, 1))
	if bound := 2*max(diff, -diff) + 1 + subBlocks; st.lost != 0 || st.changes < 1 || st.changes > bound {
		t.Errorf("%s: %v uevents lost, %d model changes, want 1 to %d", what, st.lost, st.changes, bound)
	}
	if diff == 0 && st.memtotal != st.changes {
		t.Errorf("%s: no block added or removed, yet %d of the %d changes were not the MemTotal watch's", what, st.changes-st.memtotal, st.changes)
	}
	if st.restarts != 1 {
		t.Errorf("%s: %d kubelet restarts, want 1", what, st.restarts)
	}
	return st
}

// capacityMemory is the memory of a "capacity" journal field
// ("cpu=4, memory=3145728Ki, ..."), in bytes; -1 without one.
func capacityMemory(capac string) int64 {
	for _, f := range strings.Split(capac, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(f), "memory="); ok {
			if q, err := resource.ParseQuantity(v); err == nil {
				return q.Value()
			}
		}
	}
	return -1
}

// daemonMetricSum is the sum of every series of one metric family of the
// daemon's /metrics (all its label sets).
func daemonMetricSum(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	out := guestSh(t, n, "curl -sf --unix-socket "+daemonSocket+" http://localhost/metrics")
	var sum float64
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// enforceEvictOff is TestKubeletRestart's f: node-resized with
// --enforce=false --evict=false does what --help says of each. A loss
// (the host takes back virtio-mem's 512 MiB) under a pod whose memory
// request fits only with it: the daemon says it enforces nothing ("kubepods
// limits not enforced") and evicts nothing ("eviction is off"), kubepods'
// MemoryMax stays the larger one and the pod stays, while the Node still
// follows the hardware. A 30 s settle holds the kubelet's restart (which
// writes kubepods itself) until both are checked. The same loss with the
// defaults is d's (a clamp first); an eviction with them is
// TestInstalledPackage's c.
func (s *installed) enforceEvictOff(t *testing.T) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	const plugged = 512 << 20
	args := "--auto-online --enforce=false --evict=false " + strings.Replace(relayPolicy, "--kubelet-restart-settle 2s", "--kubelet-restart-settle 30s", 1)
	setDaemonArgs(t, n, args)
	defer func() {
		setDaemonArgs(t, n, "--auto-online "+relayPolicy)
		guestSh(t, n, "systemctl restart node-resized")
	}()
	guestSh(t, n, "systemctl restart node-resized")
	waitNode(t, cs, n.Name(), "Accepted by node-resized "+args, time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})
	if size, err := n.VirtioMemSize(ctx, stepsVirtioMem.ID); err != nil || size != 0 {
		t.Fatalf("%s has %d bytes plugged (%v), want 0: d did not end where it should", stepsVirtioMem.ID, size, err)
	}
	mem0 := memTotal(t, n)
	pid0 := kubeletPID(t, n)
	mark := guestNow(t, n)
	if err := n.SetVirtioMemRequested(ctx, stepsVirtioMem.ID, plugged); err != nil {
		t.Fatal(err)
	}
	if _, sizes, err := n.WaitVirtioMemSize(ctx, stepsVirtioMem.ID, plugged, time.Minute); err != nil {
		t.Fatalf("%v (sizes seen %s)", err, vm.FormatSizes(sizes))
	}
	s.waitDaemonRestartsKubelet(t, "f: virtio-mem 512 MiB", pid0, mark, 2*time.Minute, func(v nodeVersion) bool { return v.mem == mem0+plugged })
	nd := waitNode(t, cs, n.Name(), "Accepted with the 512 MiB", 2*time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nd.Status.Capacity.Memory().Value() == mem0+plugged
	})
	// A pod that fits only with the device's memory.
	req := nd.Status.Allocatable.Memory().Value() - 256*mib
	pod := burstablePod("f-fits-with-virtio-mem")
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(req, resource.BinarySI)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, pod.Name)
	pod = waitPodRunning(t, ctx, cs, pod)
	max0 := kubepodsMax(t, n)
	t.Logf("pod %s requests %s of the allocatable %s; kubepods.slice MemoryMax %s", pod.Name, mibs(req), nd.Status.Allocatable.Memory(), mibs(max0))

	pid1 := kubeletPID(t, n)
	mark = guestNow(t, n)
	if err := n.SetVirtioMemRequested(ctx, stepsVirtioMem.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, sizes, err := n.WaitVirtioMemSize(ctx, stepsVirtioMem.ID, 0, time.Minute); err != nil {
		t.Fatalf("%v (sizes seen %s)", err, vm.FormatSizes(sizes))
	}
	nd = waitNode(t, cs, n.Name(), "the Node at the memory without the device", time.Minute, func(nd *corev1.Node) bool {
		return nd.Status.Capacity.Memory().Value() == mem0
	})
	t.Logf("after the loss: %s", describeNode(nd))
	for _, e := range waitDaemonLog(t, n, "kubepods limits not enforced", mark, 30*time.Second) {
		t.Logf("journal: %s %q", e.Time().Format("15:04:05.000"), e.Message())
	}
	for _, e := range waitDaemonLog(t, n, "eviction is off", mark, 30*time.Second) {
		t.Logf("journal: %s %q", e.Time().Format("15:04:05.000"), e.Message())
	}
	if r := daemonLog(t, n, "restarting the kubelet", mark); len(r) > 0 {
		t.Fatalf("the kubelet was restarted within the 30 s settle: the checks below would see its own kubepods limits")
	}
	if c := daemonLog(t, n, "kubepods clamped", mark); len(c) > 0 {
		t.Errorf("--enforce=false: kubepods clamped: %s", journalFields(c[0]))
	}
	if got := kubepodsMax(t, n); got != max0 {
		t.Errorf("--enforce=false: kubepods.slice MemoryMax %s after the loss, was %s", mibs(got), mibs(max0))
	}
	if e := daemonLog(t, n, "evicted pod", mark); len(e) > 0 {
		t.Errorf("--evict=false: %s", journalFields(e[0]))
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Errorf("--evict=false: the pod that no longer fits is not the one it was: %v", err)
	}
	// Then the usual path: the kubelet restarted onto the smaller machine.
	s.waitDaemonRestartsKubelet(t, "f: the loss", pid1, mark, 2*time.Minute, func(v nodeVersion) bool { return v.mem == mem0 })
	if p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		t.Logf("the pod after the kubelet's restart onto the smaller machine: phase %s, reason %q: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
}
