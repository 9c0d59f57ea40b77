package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// releaseQuiet is how long, once the released machine is Accepted, the
// daemon must write nothing to the Node: twelve of the kubelet's 10 s
// status syncs, each of which would revert a capacity it disagrees with.
const releaseQuiet = 2 * time.Minute

// TestPlannedRelease is the planned release on the real node: containerd,
// the real kubelet with the static CPU manager (CPU 0 reserved), and
// node-resized installed from its deb with --release.
//
// a-cpus: 2 boot CPUs, a Guaranteed pod holding CPU 1 exclusively, 2 CPUs
// hot-added (the kubelet restarted onto 4). node-resizectl resize --cpu 2
// --release --wait: the two hot-added CPUs go offline, the pod keeps its
// CPU (in the checkpoint and in its container's cgroup), the kubelet is
// restarted onto 2 CPUs and itself publishes them, Accepted; then the
// daemon writes nothing to the Node for releaseQuiet. Last, QMP device_del
// of both CPUs ends in DEVICE_DELETED, with no Warning event, no eviction,
// and the Node's capacity unchanged.
func TestPlannedRelease(t *testing.T) {
	t.Parallel()
	needRuntime(t)
	s := relayNodeConfig(t, Config{KubeletConfig: staticCPUKubeletConfig, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir},
		"--auto-online --release "+relayPolicy)
	n, cs := s.n, s.admin
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
		restarted := waitDaemonLog(t, n, "kubelet restarted", mark, time.Second)
		for _, e := range append(append(asked, released...), restarted...) {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if len(released) != 2 || released[0].str("CPU_ID") != "3" || released[1].str("CPU_ID") != "2" {
			t.Fatalf("%d CPUs released, want cpu 3 then cpu 2", len(released))
		}
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
			if e.Type == corev1.EventTypeWarning {
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

		// The hypervisor unplugs both CPUs.
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
	})
}

// nodeEvents are the events recorded since t0 (this machine's clock) by
// node-resized about the Node, and the evictions' (NodeCapacityExceeded)
// about any pod.
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
