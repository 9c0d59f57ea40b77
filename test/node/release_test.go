package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-resized/node-resized/test/vm"
)

// releaseKubeletConfig is the static CPU manager (CPU 0 reserved) with
// installedKubeletConfig's larger systemReserved, so that a memory hog
// that fits only with a DIMM still fits in the guest without it.
var releaseKubeletConfig = installedKubeletConfig + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"

// releaseVirtioMem is TestPlannedRelease's virtio-mem device: 1 GiB on
// node 0, QEMU's default 2 MiB block (the driver's sub-block mode), none
// of it plugged at boot.
const releaseVirtioMem = "vmem0"

// releaseQuiet is how long, once the released machine is Accepted, the
// daemon must write nothing to the Node: twelve of the kubelet's 10 s
// status syncs, each of which would revert a capacity it disagrees with.
const releaseQuiet = 2 * time.Minute

// TestPlannedRelease is the planned release on the real node: containerd,
// the real kubelet with the static CPU manager (CPU 0 reserved), and
// node-resized installed from its deb with --release.
//
// a-cpus: 2 boot CPUs, a Guaranteed pod holding CPU 1 exclusively, 2 CPUs
// hot-added (the kubelet restarted onto 4), and a second Guaranteed pod
// on one of them. node-resizectl resize --cpu 2 --release --wait: the
// second pod is evicted first (its exclusive CPU is one the release
// takes), then the two hot-added CPUs go offline, the first pod keeps its
// CPU (in the checkpoint and in its container's cgroup), the kubelet is
// restarted onto 2 CPUs and itself publishes them, Accepted; then the
// daemon writes nothing to the Node for releaseQuiet. Last, QMP device_del
// of both CPUs ends in DEVICE_DELETED, with no Warning event, no eviction,
// and the Node's capacity unchanged (after the memory scenarios, see
// unplugReleasedCPUs). Then releaseMemory's scenarios.
//
// b-dimm-control-no-release runs beside them on a node of its own
// (dimmUnplugUnderHog): the same DIMM device_del under a hog, without a
// release.
func TestPlannedRelease(t *testing.T) {
	t.Parallel()
	t.Run("release", func(t *testing.T) {
		parallelGuest(t)
		plannedRelease(t)
	})
	t.Run("b-dimm-control-no-release", func(t *testing.T) {
		parallelGuest(t)
		dimmUnplugUnderHog(t)
	})
}

// plannedRelease is TestPlannedRelease's node with release enabled, its
// scenarios in order (see TestPlannedRelease).
func plannedRelease(t *testing.T) {
	needRuntime(t)
	bin := buildFaultDaemon(t) // e kills the daemon between two block offlines
	s := relayNodeConfig(t, Config{KubeletConfig: releaseKubeletConfig, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir,
		VirtioMem:  []vm.VirtioMemDevice{{ID: releaseVirtioMem, Node: 0, Size: 1 << 30}},
		UnplugCPUs: true}, // a-cpus-unplugged
		"--auto-online --release "+relayPolicy)
	n, cs := s.n, s.admin
	guestSh(t, n, "cp '"+bin+"' /usr/bin/node-resized.new && mv -f /usr/bin/node-resized.new /usr/bin/node-resized && systemctl restart node-resized")
	waitNode(t, cs, n.Name(), "Accepted by the fault-injecting build", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})
	ctx := context.Background()
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()
	pods := cs.CoreV1().Pods("default")
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	excl := busyboxPod("excl", "exec sleep 36000", one, one)
	excl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
	if _, err := pods.Create(ctx, excl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	excl = waitPodRunning(t, ctx, cs, excl)
	exclID := containerID(t, n, excl)
	var held string
	for deadline := time.Now().Add(30 * time.Second); held == "" && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		st, _ := readCPUState(t, n, cpuManagerState)
		held = st.Entries[string(excl.UID)]["c"]
	}
	if held != "1" {
		t.Fatalf("the Guaranteed pod holds CPUs %q, want 1 (CPU 0 is reserved)", held)
	}

	var cpuIDs []string
	s.relayUpscale(t, "two CPUs hot-added", func(ctx context.Context) error {
		for range 2 {
			id, err := n.HotAddCPU(ctx, 1)
			if err != nil {
				return err
			}
			cpuIDs = append(cpuIDs, id)
		}
		return nil
	}, func(v nodeVersion) bool { return v.cpu == 4000 }, "cpu=4,", 10*time.Second)

	// A second Guaranteed pod takes one of the hot-added CPUs: the
	// release to 2 CPUs must take it, so the pod is evicted first.
	excl2 := busyboxPod("excl2", "exec sleep 36000", one, one)
	excl2.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
	if _, err := pods.Create(ctx, excl2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	excl2 = waitPodRunning(t, ctx, cs, excl2)
	var held2 string
	for deadline := time.Now().Add(30 * time.Second); held2 == "" && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		st, _ := readCPUState(t, n, cpuManagerState)
		held2 = st.Entries[string(excl2.UID)]["c"]
	}
	if held2 != "2" && held2 != "3" {
		t.Fatalf("the second Guaranteed pod holds CPUs %q, want a hot-added one (2 or 3)", held2)
	}

	// A distribution's hot-add rule, run by the real udevd, from here
	// through a-cpus-udev-replay: the release's offline uevents pass
	// through it, and a-cpus' quiet window shows that nothing onlines
	// the released CPUs again.
	udevd := startDistroUdev(t, n)

	t.Run("a-cpus", func(t *testing.T) {
		mark := guestNow(t, n)
		off := time.Until(mark)
		r0 := time.Now()
		out, err := n.Run(ctx, "node-resizectl resize --cpu 2 --release --wait --timeout 10m 2>&1")
		took := time.Since(r0)
		t.Logf("node-resizectl resize --cpu 2 --release --wait (%v):\n%s", took.Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("resize: %v\n%s", err, journalTail(t, n, 40))
		}
		if !strings.Contains(out, "Released (remove in the hypervisor what is safe to unplug): cpus 2-3") {
			t.Errorf("resize --wait did not say that cpus 2-3 may be unplugged")
		}
		if on := guestSh(t, n, "cat /sys/devices/system/cpu/online"); on != "0-1" {
			t.Errorf("online CPUs %s after the release, want 0-1", on)
		}
		st, raw := readCPUState(t, n, cpuManagerState)
		t.Logf("after the release: %s: %s", cpuManagerState, raw)
		if got := st.Entries[string(excl.UID)]["c"]; got != held {
			t.Errorf("the Guaranteed pod holds %q after the release, want %q", got, held)
		}
		if got := guestSh(t, n, "cat "+containerCgroup(excl, exclID)+"/cpuset.cpus.effective"); got != held {
			t.Errorf("the Guaranteed container runs on CPUs %q after the release, want its exclusive %q", got, held)
		}
		p, err := pods.Get(ctx, excl.Name, metav1.GetOptions{})
		if err != nil || p.UID != excl.UID || p.DeletionTimestamp != nil || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the Guaranteed pod after the release: %v", err)
		}
		// The order, from the daemon's journal: the release asked for,
		// each CPU offline (the highest first), then the kubelet
		// restarted onto the smaller machine.
		asked := waitDaemonLog(t, n, "planned release: taking", mark, time.Second)
		released := daemonLog(t, n, "released", mark)
		restarted := waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
		for _, e := range append(append(asked, released...), restarted...) {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if len(released) != 2 || released[0].str("CPU_ID") != "3" || released[1].str("CPU_ID") != "2" {
			t.Fatalf("%d CPUs released, want cpu 3 then cpu 2", len(released))
		}
		// The pod on a CPU the release takes went first, by the
		// evictor's rule for exclusive CPUs, before any CPU went offline.
		evicted := daemonLog(t, n, "evicted pod", mark)
		for _, e := range evicted {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if len(evicted) != 1 || evicted[0].str("POD") != "default/excl2" {
			t.Fatalf("evicted %d pod(s), want only default/excl2 (CPU %s, which the release takes)", len(evicted), held2)
		}
		if why := evicted[0].str("WHY"); !strings.Contains(why, "the planned release takes offline") {
			t.Errorf("excl2's eviction says %q, want that the planned release takes its CPU", why)
		}
		if !evicted[0].Time().Before(released[0].Time()) {
			t.Errorf("excl2 evicted at %s, after the first CPU offline at %s", evicted[0].Time().Format("15:04:05.000"), released[0].Time().Format("15:04:05.000"))
		}
		s.timing("a release: excl2 (CPU %s) evicted %v before the first CPU offline (%s)", held2,
			released[0].Time().Sub(evicted[0].Time()).Round(time.Millisecond), evicted[0].str("WHY"))
		if !asked[0].Time().Before(released[0].Time()) || !released[1].Time().Before(restarted[0].Time()) {
			t.Errorf("order: release asked %s, CPUs offline %s and %s, kubelet restarted %s", asked[0].Time().Format("15:04:05.000"),
				released[0].Time().Format("15:04:05.000"), released[1].Time().Format("15:04:05.000"), restarted[0].Time().Format("15:04:05.000"))
		}
		for _, e := range released {
			s.timing("a release: cpu %s offline %v after the release was asked for (%s)", e.str("CPU_ID"), e.Time().Sub(asked[0].Time()).Round(time.Millisecond), e.str("TOOK"))
		}
		s.timing("a release: resize --wait returned after %v (kubelet restarted %v after the release was asked for)",
			took.Round(time.Millisecond), restarted[0].Time().Sub(asked[0].Time()).Round(time.Millisecond))

		nd := waitNode(t, cs, n.Name(), "Accepted at cpu 2 by the restarted kubelet", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Cpu().Value() == 2
		})
		t.Logf("after the release: %s", describeNode(nd))
		if c := capacityCondition(nd); !strings.Contains(c.Message, "released: cpus 2-3") {
			t.Errorf("the condition does not name the released CPUs: %q", c.Message)
		}
		if k := daemonStatus(t, n).Kubelet; k.Capacity["cpu"] != 2000 || k.Stale {
			t.Errorf("the kubelet's own view after the release: %v (stale %v), want cpu=2", k.Capacity, k.Stale)
		}
		evs := nodeEvents(t, s, mark.Add(-off))
		var releasedEvents int
		for _, e := range evs {
			// excl2's eviction is the one Warning (the evictor's
			// NodeCapacityExceeded, recorded on the Node).
			if e.Type == corev1.EventTypeWarning && !(e.Reason == "NodeCapacityExceeded" && strings.Contains(e.Note, "pod default/"+excl2.Name+":")) {
				t.Errorf("Warning event %s: %s", e.Reason, e.Note)
			}
			if e.Reason == "CapacityReleased" {
				releasedEvents++
				t.Logf("event %s %s: %s", e.Type, e.Reason, e.Note)
			}
		}
		if releasedEvents != 1 {
			t.Errorf("%d CapacityReleased events, want 1", releasedEvents)
		}

		// Quiet: the kubelet itself publishes the smaller machine, and
		// node-resized writes nothing.
		q0 := time.Now()
		p0 := daemonStatus(t, n).Kubernetes.Patches
		time.Sleep(releaseQuiet)
		p1 := daemonStatus(t, n).Kubernetes.Patches
		var byDaemon, byKubelet int
		for _, v := range s.hist.since(q0) {
			switch v.manager {
			case "node-resized":
				byDaemon++
				t.Errorf("node-resized wrote the Node while nothing changed: %v", v)
			case "kubelet":
				byKubelet++
			}
		}
		if p1 != p0 {
			t.Errorf("node-resized sent %d status patches in %v of a released, unchanged node, want 0", p1-p0, releaseQuiet)
		}
		s.timing("a released Path A2 for %v: %d Node status writes by node-resized (%d patches), %d by the kubelet: %d/hour by node-resized (held without release: 360/hour)",
			releaseQuiet, byDaemon, p1-p0, byKubelet, int(float64(byDaemon)*float64(time.Hour)/float64(releaseQuiet)))

	})
	if t.Failed() {
		return
	}
	if !t.Run("a-cpus-udev-replay", func(t *testing.T) { s.udevReplay(t, excl, udevd) }) {
		return
	}
	s.releaseMemory(t, excl, func(t *testing.T) { s.unplugReleasedCPUs(t, excl, cpuIDs) })
}

// distroOnlineRules is the hot-add rule RHEL ships (40-redhat.rules; SUSE's
// 80-hotplug-cpu-mem.rules is alike): a CPU or memory block added offline
// is onlined. The RUN records each time it fired.
const distroOnlineRules = `SUBSYSTEM=="cpu", ACTION=="add", TEST=="online", ATTR{online}=="0", ATTR{online}="1", RUN+="/bin/sh -c 'echo %k >>/run/udev-onlined'"
SUBSYSTEM=="memory", ACTION=="add", ATTR{state}=="offline", ATTR{state}="online", RUN+="/bin/sh -c 'echo %k >>/run/udev-onlined'"
`

// udevUnit is the transient unit startDistroUdev runs udevd in.
const udevUnit = "distro-udevd"

// startDistroUdev installs distroOnlineRules and starts the real
// systemd-udevd in the guest (the node's boot masks udev: see
// bootUnitsMasked). It returns the unit, for stopDistroUdev.
func startDistroUdev(t *testing.T, n *Node) string {
	t.Helper()
	if guestSh(t, n, "test -x /lib/systemd/systemd-udevd && echo yes || echo no") != "yes" {
		t.Fatal("no /lib/systemd/systemd-udevd in the guest: install the udev package on this machine (the guest's root is this machine's; .ci/run does)")
	}
	guestSh(t, n, "mkdir -p /etc/udev/rules.d && cat >/etc/udev/rules.d/40-hotplug-online.rules <<'EOF'\n"+distroOnlineRules+"EOF\n"+
		"rm -f /run/udev-onlined && systemd-run --unit="+udevUnit+" --service-type=notify /lib/systemd/systemd-udevd && udevadm control --ping")
	t.Logf("udevd started with the distribution's hot-add rule:\n%s", distroOnlineRules)
	return udevUnit
}

// udevReplay is a-cpus-udev-replay: with the two CPUs released and held,
// udevadm trigger replays their add uevents (as systemd-udev-trigger does
// at boot). The distribution's rule onlines them and node-resized's
// --auto-online, which sees the same add uevents, does not; the release,
// whose request still stands, takes them offline again: the Node stays at
// cpu 2, Accepted, the Guaranteed pod keeps its CPU, and nobody is
// evicted. Then udevd stops, so that the memory scenarios run as before.
func (s *installed) udevReplay(t *testing.T, excl *corev1.Pod, unit string) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	defer guestSh(t, n, "systemctl stop "+unit+"; rm -f /etc/udev/rules.d/40-hotplug-online.rules")
	mark := guestNow(t, n)
	r0 := time.Now()
	guestSh(t, n, "udevadm trigger --action=add --subsystem-match=cpu --settle")
	onlined := strings.Fields(guestSh(t, n, "sort /run/udev-onlined 2>/dev/null || true"))
	t.Logf("udevadm trigger --action=add (cpu): the rule fired for %v", onlined)
	if strings.Join(onlined, " ") != "cpu2 cpu3" {
		t.Errorf("the distribution's rule fired for %v, want the released cpu2 and cpu3", onlined)
	}
	again := waitDaemonLog(t, n, "released", mark, 3*time.Minute)
	for deadline := time.Now().Add(time.Minute); len(again) < 2 && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		again = daemonLog(t, n, "released", mark)
	}
	for _, e := range again {
		t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	if len(again) != 2 || again[0].str("CPU_ID") != "3" || again[1].str("CPU_ID") != "2" {
		t.Fatalf("%d CPUs released again after the replay, want cpu 3 then cpu 2", len(again))
	}
	// --auto-online saw the same add uevents and left the held CPUs alone.
	logs := daemonLogs(t, n, mark)
	for _, e := range logs("not bringing a hot-added device online") {
		t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	for _, e := range logs("brought a hot-added device online") {
		t.Errorf("--auto-online brought a released CPU online: %s", journalFields(e))
	}
	nd := waitNode(t, cs, n.Name(), "Accepted at cpu 2 after the replay", 3*time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Cpu().Value() == 2 &&
			strings.Contains(c.Message, "released: cpus 2-3")
	})
	if on := guestSh(t, n, "cat /sys/devices/system/cpu/online"); on != "0-1" {
		t.Errorf("online CPUs %s after the replay, want 0-1", on)
	}
	logs = daemonLogs(t, n, mark) // after the Accepted
	restarts := logs("kubelet restarted")
	s.timing("a udev replay: the rule onlined %v; released again %v after the trigger (%d kubelet restart(s)); Accepted at cpu 2 after %v",
		onlined, again[len(again)-1].Time().Sub(mark).Round(time.Millisecond), len(restarts), time.Since(r0).Round(time.Millisecond))
	t.Logf("after the replay: %s", describeNode(nd))
	if ev := logs("evicted pod"); len(ev) > 0 {
		t.Errorf("node-resized evicted %d pod(s) after the replay", len(ev))
	}
	for _, e := range nodeEvents(t, s, r0) {
		if e.Type == corev1.EventTypeWarning {
			t.Errorf("Warning event after the replay: %s: %s", e.Reason, e.Note)
		}
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, excl.Name, metav1.GetOptions{}); err != nil || p.UID != excl.UID || p.DeletionTimestamp != nil {
		t.Errorf("the Guaranteed pod after the replay: %v", err)
	}
}

// unplugReleasedCPUs is a-cpus' end: QMP device_del of both released
// CPUs ends in DEVICE_DELETED, with no Warning event, no eviction and the
// Node's capacity unchanged. (It runs after the memory scenarios: QEMU 7.2
// aborts, "double free or corruption", on a pc-dimm device_add that
// follows a CPU's device_del.)
func (s *installed) unplugReleasedCPUs(t *testing.T, excl *corev1.Pod, cpuIDs []string) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	var nd *corev1.Node
	var err error
	mark := guestNow(t, n)
	del0 := time.Now()
	for _, id := range cpuIDs {
		d0 := time.Now()
		if err := n.DeviceDel(ctx, id); err != nil {
			t.Fatalf("device_del %s: %v", id, err)
		}
		s.timing("a device_del %s: DEVICE_DELETED after %v", id, time.Since(d0).Round(time.Millisecond))
	}
	time.Sleep(15 * time.Second) // the removal uevents, a pass, a status sync of the kubelet
	if pr := guestSh(t, n, "cat /sys/devices/system/cpu/present"); pr != "0-1" {
		t.Errorf("present CPUs %s after device_del, want 0-1", pr)
	}
	nd, err = cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := capacityCondition(nd); c == nil || c.Reason != "Accepted" || nd.Status.Capacity.Cpu().Value() != 2 || !nodeReady(nd) {
		t.Errorf("the Node after device_del: %s", describeNode(nd))
	}
	for _, e := range nodeEvents(t, s, del0) {
		if e.Type == corev1.EventTypeWarning || e.Reason == "NodeCapacityExceeded" {
			t.Errorf("event after device_del: %s %s: %s", e.Type, e.Reason, e.Note)
		}
	}
	if p, err := pods.Get(ctx, excl.Name, metav1.GetOptions{}); err != nil || p.UID != excl.UID || p.DeletionTimestamp != nil {
		t.Errorf("the Guaranteed pod after device_del: %v", err)
	}
	if ev := daemonLog(t, n, "evicted pod", mark); len(ev) > 0 {
		t.Errorf("node-resized evicted %d pod(s)", len(ev))
	}
	t.Logf("after device_del: %s", describeNode(nd))
}

// releaseMemory runs the memory scenarios of TestPlannedRelease on its
// node, in order:
//
// b-dimm: a DIMM hot-added (onlined movable) and adopted; a Burstable pod
// whose container touches memory that fits only with the DIMM; the
// configured memory at the boot size with release: the pod is evicted
// first (the kubelet's memory-pressure order: its working set is above its
// request), then every block of the DIMM goes offline, the status names
// the DIMM safe to unplug, the kubelet is restarted onto the boot memory,
// and device_del ends in DEVICE_DELETED with no guest error.
//
// e-kill-between-block-offlines: the request held, a second DIMM
// hot-added, and node-resized killed (SIGKILL, the faultinject build)
// right after the release's first block offline: systemd starts it again,
// it resumes from its record, and the release ends where one run ends:
// every block of the DIMM offline, the machine at the boot memory.
//
// f-not-enough-movable: a request 512Mi below the boot memory: nothing
// movable is left online (the boot memory is in a kernel zone: DMA32 on
// this 2 GiB guest), so the
// release falls short at once: Accepted at the target, the condition says
// what could not be released, the kubelet is not restarted (it would
// publish the larger machine), as a configured capacity below the hardware
// is without release.
//
// a-cpus-unplugged: the released CPUs unplugged (see unplugReleasedCPUs).
//
// d-give-back: the configured capacity removed: the second DIMM's blocks,
// still present, come back online, and the kubelet is restarted onto them;
// the released CPUs and the first DIMM, which the hypervisor removed, are
// simply gone.
func (s *installed) releaseMemory(t *testing.T, excl *corev1.Pod, unplugCPUs func(*testing.T)) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	mem0 := memTotal(t, n)
	blockSize, err := strconv.ParseInt(guestSh(t, n, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil || blockSize <= 0 {
		t.Fatalf("block_size_bytes: %v", err)
	}
	resize := func(t *testing.T, args string) (string, time.Duration) {
		t.Helper()
		r0 := time.Now()
		out, err := n.Run(ctx, "node-resizectl resize "+args+" --wait --timeout 10m 2>&1")
		took := time.Since(r0)
		t.Logf("node-resizectl resize %s (%v):\n%s", args, took.Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("resize %s: %v\n%s", args, err, journalTail(t, n, 40))
		}
		return out, took
	}
	releasedBlocks := func(since time.Time) []JournalEntry {
		var out []JournalEntry
		for _, e := range daemonLog(t, n, "released", since) {
			if e.str("BLOCK") != "-1" {
				out = append(out, e)
			}
		}
		return out
	}
	offlineBlocks := func() int {
		k, _ := strconv.Atoi(guestSh(t, n, "grep -l offline /sys/devices/system/memory/memory*/state | wc -l"))
		return k
	}

	ok := t.Run("b-dimm", func(t *testing.T) {
		want := mem0 + installedDIMM
		var dimm string
		s.relayUpscale(t, "b DIMM hot-add", func(ctx context.Context) error {
			var err error
			dimm, err = hotAddDIMM(ctx, t, n, 0, want)
			return err
		}, func(v nodeVersion) bool { return v.mem == want }, fmt.Sprintf("memory=%dKi,", want>>10), 10*time.Second)
		// The hog: above the allocatable without the DIMM, below
		// kubepods' limit without it.
		allocAfter := mem0 - installedReserved - evictionHardMemory
		clampTo := mem0 - installedReserved
		target := (allocAfter + clampTo) / 2
		// Burstable with a memory request only: the one allocatable CPU
		// (CPU 0 reserved) is the Guaranteed pod's.
		startHog(t, ctx, n, cs, "hog", target, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})
		t.Logf("the hog holds %s: above the allocatable without the DIMM (%s), below kubepods' limit without it (%s)", mibs(target), mibs(allocAfter), mibs(clampTo))

		mark := guestNow(t, n)
		off := time.Until(mark)
		out, took := resize(t, fmt.Sprintf("--memory %d --release", mem0))
		if !strings.Contains(out, "8/8 blocks offline, safe to unplug") {
			t.Errorf("resize --wait did not name the DIMM safe to unplug")
		}
		evicted := daemonLog(t, n, "evicted pod", mark)
		blocks := releasedBlocks(mark)
		restarted := waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
		for _, e := range append(append(evicted, blocks...), restarted...) {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if len(evicted) != 1 || !strings.Contains(evicted[0].str("POD"), "default/hog") {
			t.Fatalf("evicted %d pod(s), want only default/hog", len(evicted))
		}
		if len(blocks) != int(installedDIMM/blockSize) {
			t.Fatalf("%d blocks released, want the DIMM's %d", len(blocks), installedDIMM/blockSize)
		}
		if !evicted[0].Time().Before(blocks[0].Time()) || !blocks[len(blocks)-1].Time().Before(restarted[0].Time()) {
			t.Errorf("order: eviction %s, blocks offline %s to %s, kubelet restarted %s; want in that order", evicted[0].Time().Format("15:04:05.000"),
				blocks[0].Time().Format("15:04:05.000"), blocks[len(blocks)-1].Time().Format("15:04:05.000"), restarted[0].Time().Format("15:04:05.000"))
		}
		if got := memTotal(t, n); got != mem0 {
			t.Errorf("MemTotal %s after the release, want the boot memory %s", mibs(got), mibs(mem0))
		}
		st := daemonStatus(t, n)
		if r := st.Release; r == nil || len(r.Devices) != 1 || !r.Devices[0].SafeToUnplug || r.Devices[0].Offline != len(blocks) {
			t.Errorf("the status's release: %+v", r)
		} else {
			t.Logf("status: %s", r.Summary())
		}
		nd := waitNode(t, cs, n.Name(), "Accepted at the boot memory by the restarted kubelet", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Memory().Value() == mem0
		})
		t.Logf("after the release: %s", describeNode(nd))
		for _, e := range nodeEvents(t, s, mark.Add(-off)) {
			t.Logf("event %s %s %s/%s: %s", e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
			// The hog's eviction is the one Warning (the evictor's
			// NodeCapacityExceeded): no loss, no EmergencyCapacityReduced.
			if e.Type == corev1.EventTypeWarning && e.Reason != "NodeCapacityExceeded" {
				t.Errorf("Warning event %s: %s", e.Reason, e.Note)
			}
		}
		u0 := time.Now()
		if err := n.DeviceDel(ctx, dimm); err != nil {
			t.Fatalf("device_del of the released DIMM: %v", err)
		}
		unplug := time.Since(u0)
		s.timing("b release of a DIMM under a hog: resize --wait %v; eviction->first block offline %v, %d blocks offline in %v, ->kubelet restarted %v; device_del->DEVICE_DELETED %v",
			took.Round(time.Millisecond), blocks[0].Time().Sub(evicted[0].Time()).Round(time.Millisecond), len(blocks),
			blocks[len(blocks)-1].Time().Sub(blocks[0].Time()).Round(time.Millisecond), restarted[0].Time().Sub(blocks[len(blocks)-1].Time()).Round(time.Millisecond),
			unplug.Round(time.Millisecond))
		time.Sleep(5 * time.Second)
		if got := memTotal(t, n); got != mem0 {
			t.Errorf("MemTotal %s after device_del, want %s", mibs(got), mibs(mem0))
		}
		if p, err := pods.Get(ctx, excl.Name, metav1.GetOptions{}); err != nil || p.UID != excl.UID || p.DeletionTimestamp != nil {
			t.Errorf("the Guaranteed pod after the DIMM's release: %v", err)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("e-kill-between-block-offlines", func(t *testing.T) {
		guestSh(t, n, `rm -f /var/lib/node-resized/fault-* && sed -i '/^NODE_RESIZED_FAULT=/d' /etc/default/node-resized && echo 'NODE_RESIZED_FAULT=release-block-offlined=kill' >>/etc/default/node-resized && systemctl restart node-resized`)
		waitNode(t, cs, n.Name(), "Accepted before the fault", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd)
		})
		restarts0 := guestSh(t, n, "systemctl show node-resized -p NRestarts --value")
		kubelet0 := kubeletPID(t, n)
		mark := guestNow(t, n)
		if _, err := n.HotAddDIMM(ctx, installedDIMM, 0); err != nil {
			t.Fatal(err)
		}
		// The request (the boot memory, with release) holds: the DIMM's
		// blocks, onlined by --auto-online, are released again, across
		// the kill.
		var blocks []JournalEntry
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			blocks = releasedBlocks(mark)
			if len(blocks) >= int(installedDIMM/blockSize) && memTotal(t, n) == mem0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d blocks released, MemTotal %s, 3 min after the DIMM: want its %d blocks and %s\n%s", len(blocks), mibs(memTotal(t, n)),
					installedDIMM/blockSize, mibs(mem0), journalTail(t, n, 40))
			}
		}
		if _, err := n.Run(ctx, "test -e /var/lib/node-resized/fault-release-block-offlined"); err != nil {
			t.Fatalf("the fault never fired")
		}
		restarts1 := guestSh(t, n, "systemctl show node-resized -p NRestarts --value")
		resumed := daemonLog(t, n, "resumed the record of the planned release", mark)
		for _, e := range append(resumed, blocks...) {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if restarts1 == restarts0 || len(resumed) == 0 {
			t.Errorf("node-resized restarts %s -> %s, %d resumptions: want the kill and a resumption", restarts0, restarts1, len(resumed))
		}
		if len(resumed) > 0 && !(blocks[0].Time().Before(resumed[0].Time()) && resumed[0].Time().Before(blocks[len(blocks)-1].Time())) {
			t.Errorf("the resumption at %s is not between the first and the last block offline", resumed[0].Time().Format("15:04:05.000"))
		}
		nd := waitNode(t, cs, n.Name(), "Accepted at the boot memory after the kill", 2*time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Memory().Value() == mem0
		})
		t.Logf("after the kill and the resumption: %s", describeNode(nd))
		if r := daemonStatus(t, n).Release; r == nil || len(r.Devices) != 1 || !r.Devices[0].SafeToUnplug {
			t.Errorf("the status's release after the resumption: %+v", r)
		}
		if st := guestSh(t, n, "systemctl show kubelet -p ActiveState --value"); st != "active" || kubeletPID(t, n) == "0" {
			t.Errorf("kubelet.service %s after the kill", st)
		}
		s.timing("e kill between two block offlines: first block %s, resumed %s, last block %s; node-resized restarts %s -> %s; kubelet %s -> %s",
			blocks[0].Time().Format("15:04:05.000"), func() string {
				if len(resumed) > 0 {
					return resumed[0].Time().Format("15:04:05.000")
				}
				return "never"
			}(), blocks[len(blocks)-1].Time().Format("15:04:05.000"), restarts0, restarts1, kubelet0, kubeletPID(t, n))
		guestSh(t, n, `sed -i '/^NODE_RESIZED_FAULT=/d' /etc/default/node-resized`)
	})
	if !ok {
		return
	}

	ok = t.Run("f-not-enough-movable", func(t *testing.T) {
		kubelet0 := kubeletPID(t, n)
		mark := guestNow(t, n)
		out, _ := resize(t, fmt.Sprintf("--memory %d --release", mem0-512<<20))
		if !strings.Contains(out, "release incomplete: memory: 512Mi more to take offline") {
			t.Errorf("resize --wait did not say what could not be released")
		}
		nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := capacityCondition(nd)
		t.Logf("short: %s", describeNode(nd))
		if c == nil || c.Reason != "Accepted" || !strings.Contains(c.Message, "(kernel memory") {
			t.Errorf("condition %+v: want Accepted, naming the kernel zone that holds the rest", c)
		}
		if got := memTotal(t, n); got != mem0 {
			t.Errorf("MemTotal %s, want %s: nothing more could go", mibs(got), mibs(mem0))
		}
		if rs := daemonLog(t, n, "kubelet restarted", mark); len(rs) > 0 || kubeletPID(t, n) != kubelet0 {
			t.Errorf("the kubelet was restarted onto a machine that is not the target")
		}
	})
	if !ok {
		return
	}

	if !t.Run("a-cpus-unplugged", unplugCPUs) {
		return
	}

	ok = t.Run("d-give-back", func(t *testing.T) {
		mark := guestNow(t, n)
		before := offlineBlocks()
		resize(t, "--clear")
		want := mem0 + installedDIMM
		nd := waitNode(t, cs, n.Name(), "Accepted at the hardware given back", 2*time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Memory().Value() == want
		})
		t.Logf("given back: %s", describeNode(nd))
		if got := memTotal(t, n); got != want {
			t.Errorf("MemTotal %s after the give back, want %s", mibs(got), mibs(want))
		}
		if after := offlineBlocks(); after != before-int(installedDIMM/blockSize) {
			t.Errorf("%d offline blocks after the give back, %d before: want the DIMM's %d back online", after, before, installedDIMM/blockSize)
		}
		if on := guestSh(t, n, "cat /sys/devices/system/cpu/online"); on != "0-1" {
			t.Errorf("online CPUs %s: the released CPUs were unplugged", on)
		}
		if rs := waitDaemonLog(t, n, "kubelet restarted", mark, time.Minute); len(rs) != 1 {
			t.Errorf("%d kubelet restarts for the give back, want 1", len(rs))
		}
		if r := daemonStatus(t, n).Release; r != nil && !r.Released.Empty() {
			t.Errorf("still released after the give back: %+v", r)
		}
	})
	if !ok {
		return
	}
	s.releaseVirtioMem(t, blockSize)
}

// releaseVirtioMem is c-virtio-mem: the virtio-mem device grown to 512 MiB
// (its blocks onlined movable by --auto-online, the kubelet restarted onto
// them), then a request 512Mi below the machine with release: the release
// takes the device's blocks (not a part of the DIMM, which would not leave
// the DIMM unpluggable), and the host's lowering of requested-size to 0
// then reaches size 0 (QMP qom-get), within a bound reported, with no
// Warning and the Node unchanged. The control: grown again, the request
// removed, a hog holding about the free movable memory, and requested-size
// lowered to 0 without a release: what the driver did (it migrates the
// hog's pages out of the device, reported with its time against the
// release's), and what node-resized did (a loss of hardware it follows:
// the clamp, the Node at the smaller memory, the hog, which still fits,
// left alone).
func (s *installed) releaseVirtioMem(t *testing.T, blockSize int64) bool {
	n, cs := s.n, s.admin
	ctx := context.Background()
	const half = 512 << 20
	grow := func(t *testing.T) int64 {
		t.Helper()
		mem0 := memTotal(t, n)
		mark := guestNow(t, n)
		if err := n.SetVirtioMemRequested(ctx, releaseVirtioMem, half); err != nil {
			t.Fatal(err)
		}
		took, sizes, err := n.WaitVirtioMemSize(ctx, releaseVirtioMem, half, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want := mem0 + half
		for deadline := time.Now().Add(time.Minute); memTotal(t, n) != want; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("MemTotal %s a minute after virtio-mem's 512 MiB, want %s", mibs(memTotal(t, n)), mibs(want))
			}
		}
		waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
		waitNode(t, cs, n.Name(), "Accepted with the virtio-mem memory", 2*time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Memory().Value() == want
		})
		t.Logf("virtio-mem requested-size 512 MiB: size reached after %v (sizes seen %s); MemTotal %s", took.Round(time.Millisecond), vm.FormatSizes(sizes), mibs(want))
		return want
	}
	ok := t.Run("c-virtio-mem", func(t *testing.T) {
		mem1 := grow(t)
		info, err := n.VirtioMemInfo(ctx, releaseVirtioMem)
		if err != nil {
			t.Fatal(err)
		}
		first := info.FirstBlock(uint64(blockSize))
		mark := guestNow(t, n)
		off := time.Until(mark)
		out, _ := func() (string, error) {
			r0 := time.Now()
			out, err := n.Run(ctx, fmt.Sprintf("node-resizectl resize --memory %d --release --wait --timeout 10m 2>&1", mem1-half))
			t.Logf("node-resizectl resize --memory %d --release --wait (%v):\n%s", mem1-half, time.Since(r0).Round(time.Millisecond), out)
			if err != nil {
				t.Fatalf("resize: %v\n%s", err, journalTail(t, n, 40))
			}
			return out, err
		}()
		if !strings.Contains(out, "virtio_mem:") {
			t.Errorf("resize --wait did not name virtio-mem's memory as released")
		}
		var blocks []int
		for _, e := range daemonLog(t, n, "released", mark) {
			b, _ := strconv.Atoi(e.str("BLOCK"))
			if b >= 0 {
				blocks = append(blocks, b)
			}
		}
		for _, b := range blocks {
			if b < first || int64(b-first) >= int64(info.MaxSize)/blockSize {
				t.Errorf("released block %d is not the virtio-mem device's (blocks %d to %d)", b, first, first+int(int64(info.MaxSize)/blockSize)-1)
			}
		}
		if len(blocks) != half/int(blockSize) {
			t.Fatalf("released blocks %v, want %d of virtio-mem's", blocks, half/blockSize)
		}
		if got := memTotal(t, n); got != mem1-half {
			t.Errorf("MemTotal %s after the release, want %s", mibs(got), mibs(mem1-half))
		}
		waitNode(t, cs, n.Name(), "Accepted without virtio-mem's memory", 2*time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Memory().Value() == mem1-half
		})
		// The host lowers the device: its driver gives the offline
		// blocks back.
		u0 := time.Now()
		if err := n.SetVirtioMemRequested(ctx, releaseVirtioMem, 0); err != nil {
			t.Fatal(err)
		}
		took, sizes, err := n.WaitVirtioMemSize(ctx, releaseVirtioMem, 0, 2*time.Minute)
		if err != nil {
			t.Fatalf("virtio-mem never reached size 0: %v", err)
		}
		s.timing("c virtio-mem: %d released blocks; requested-size 0 reached size 0 after %v (sizes seen %s)", len(blocks), took.Round(time.Millisecond), vm.FormatSizes(sizes))
		time.Sleep(5 * time.Second)
		nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := capacityCondition(nd); c == nil || c.Reason != "Accepted" || nd.Status.Capacity.Memory().Value() != mem1-half {
			t.Errorf("the Node after the host took virtio-mem's memory back: %s", describeNode(nd))
		}
		for _, e := range nodeEvents(t, s, u0.Add(-time.Second)) {
			if e.Type == corev1.EventTypeWarning || e.Reason == "NodeCapacityExceeded" {
				t.Errorf("event after the host lowered virtio-mem: %s %s: %s", e.Type, e.Reason, e.Note)
			}
		}
		for _, e := range nodeEvents(t, s, mark.Add(-off)) {
			t.Logf("event %s %s: %s", e.Type, e.Reason, e.Note)
		}
	})
	if !ok {
		return false
	}
	return t.Run("c-virtio-mem-control-no-release", func(t *testing.T) {
		resizeOut, err := n.Run(ctx, "node-resizectl resize --clear --wait --timeout 10m 2>&1")
		if err != nil {
			t.Fatalf("resize --clear: %v\n%s", err, resizeOut)
		}
		mem1 := grow(t)
		// The hog: about as much as the free movable memory (the given
		// back DIMM's and the device's), so that part of it lies in the
		// device's (ZONE_MOVABLE is filled first, the kernel zones after
		// it), and 512Mi less than what is left without the device, so
		// that it can move there and still fits the smaller machine.
		avail := memInfoBytes(t, n, "MemAvailable")
		target := avail - half - 512*mib
		if limit := kubepodsMax(t, n) - half - 512*mib; target > limit {
			target = limit
		}
		if target < 256*mib {
			t.Fatalf("no room for a hog: MemAvailable %s", mibs(avail))
		}
		pods := cs.CoreV1().Pods("default")
		hog, _ := startHog(t, ctx, n, cs, "vhog", target, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})
		t.Logf("the hog holds %s (MemAvailable was %s with the device's %s)", mibs(target), mibs(avail), mibs(half))
		mark := guestNow(t, n)
		if err := n.SetVirtioMemRequested(ctx, releaseVirtioMem, 0); err != nil {
			t.Fatal(err)
		}
		took, sizes, err := n.WaitVirtioMemSize(ctx, releaseVirtioMem, 0, 3*time.Minute)
		t.Logf("without a release, a hog of %s: requested-size 0: %v after %v (sizes seen %s); MemTotal %s (was %s)",
			mibs(target), err, took.Round(time.Millisecond), vm.FormatSizes(sizes), mibs(memTotal(t, n)), mibs(mem1))
		s.timing("c control, no release, a hog of %s: requested-size 0 reached size 0: %v after %v (sizes seen %s)", mibs(target), err == nil, took.Round(time.Millisecond), vm.FormatSizes(sizes))
		if dm := guestSh(t, n, "dmesg | grep -i virtio_mem | tail -5 || true"); dm != "" {
			t.Logf("the guest's kernel:\n%s", dm)
		}
		// node-resized follows what the driver took as a loss: the
		// kubepods clamp, the Node at the smaller memory; the hog, which
		// still fits, is left alone.
		clamps := waitDaemonLog(t, n, "kubepods clamped", mark, time.Minute)
		for _, e := range clamps {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		now := memTotal(t, n)
		waitNode(t, cs, n.Name(), "the Node at the memory the driver left", 2*time.Minute, func(nd *corev1.Node) bool {
			return nd.Status.Capacity.Memory().Value() == now
		})
		if ev := daemonLog(t, n, "evicted pod", mark); len(ev) > 0 {
			t.Errorf("node-resized evicted %d pod(s); the hog fits the smaller machine", len(ev))
		}
		if p, err := pods.Get(ctx, hog.Name, metav1.GetOptions{}); err != nil || p.UID != hog.UID || p.DeletionTimestamp != nil || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the hog after the host took the device's memory: %v", err)
		}
	})
}

// nodeEvents are the events recorded since t0 by node-resized about the
// Node, and the evictions' (NodeCapacityExceeded) about any pod. An event
// carries the clock of who recorded it: node-resized's, the guest's.
func nodeEvents(t *testing.T, s *installed, t0 time.Time) []eventsv1.Event {
	t.Helper()
	list, err := s.admin.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		at := e.EventTime.Time
		if at.IsZero() {
			at = e.DeprecatedLastTimestamp.Time
		}
		ours := (e.Regarding.Kind == "Node" && e.Regarding.Name == s.n.Name() && e.ReportingController == "node-resized") || e.Reason == "NodeCapacityExceeded"
		if ours && !at.Before(t0.Truncate(time.Second)) {
			out = append(out, e)
		}
	}
	return out
}

// waitWarnings waits up to timeout for a Warning event with reason that
// node-resized recorded about the Node since since (the guest's clock)
// and returns the notes of all of them.
func waitWarnings(t *testing.T, s *installed, reason string, since time.Time, timeout time.Duration) []string {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Second) {
		var notes []string
		for _, e := range nodeEvents(t, s, since) {
			if e.Reason == reason && e.Type == corev1.EventTypeWarning {
				notes = append(notes, e.Note)
			}
		}
		if len(notes) > 0 {
			return notes
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Warning %s on the Node within %v; node-resized:\n%s", reason, timeout, journalTail(t, s.n, 20))
		}
	}
}
