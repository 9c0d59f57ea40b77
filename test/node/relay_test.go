package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/test/vm"
)

// relayPolicy is the kubelet-restart policy of the relay scenarios: the
// defaults (settle 10s, one restart per 2m, 2m to come back, 3 restarts
// in 20m) shortened so that a scenario takes seconds, not minutes, and a
// boot that runs several restart scenarios does not wait 20 minutes for
// the budget: TestFaults makes six, and the budget counts every kubelet
// start node-resized causes, a fault's restart and its recovery's start
// each. The behaviour is the same. The budget itself is proven in agent's
// TestRestartBudgetUnderFlappingCPU and TestStartsCountAgainstTheBudget.
const relayPolicy = "--kubelet-restart-settle 2s --kubelet-restart-min-interval 10s --kubelet-restart-timeout 90s --kubelet-restart-budget 30/20m"

// relaySettle is relayPolicy's --kubelet-restart-settle: the restart waits
// until the machine has not changed for this long.
const relaySettle = 2 * time.Second

// steadyWindow is how long the daemon must send no status patch once the
// kubelet has adopted a change, in scenarios a and b: six of the kubelet's
// 10 s status syncs, each of which would revert a capacity it disagrees with.
const steadyWindow = time.Minute

// staticCPUKubeletConfig is the default node's configuration with the
// static CPU manager: CPU 0 reserved for the system, the others for
// exclusive assignment to Guaranteed pods.
const staticCPUKubeletConfig = DefaultKubeletConfig + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"

const (
	cpuManagerState = "/var/lib/kubelet/cpu_manager_state"
	daemonSocket    = "/run/node-resized/node-resized.sock"
)

// relayNode boots a node with kubeletConfig, installs node-resized from
// its deb with args in /etc/default/node-resized (plus
// $NODE_RESIZED_NODE_DAEMON_ARGS), starts it and waits until it has
// accepted the node.
func relayNode(t *testing.T, kubeletConfig, args string) *installed {
	t.Helper()
	return relayNodeConfig(t, Config{KubeletConfig: kubeletConfig}, args)
}

// relayNodeConfig is relayNode for a node booted with cfg (its Name is
// node-1).
func relayNodeConfig(t *testing.T, cfg Config, args string) *installed {
	t.Helper()
	const name = "node-1"
	needKernel(t)
	s := &installed{deb: buildPackage(t)}
	c := startCluster(t, name)
	cfg.Name = name
	s.n = bootNode(t, c, cfg)
	s.timing("boot to Node Ready: %v", s.n.ReadyTime().Round(time.Millisecond))
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	s.admin = admin
	s.hist = watchNode(t, admin, name)
	n := s.n
	// dpkg reads its database over the root share: seconds on a quiet
	// machine, over 2 min with three guests on two CPUs.
	dctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if out, err := n.Run(dctx, "mkdir -p /root/pkgs && cp '"+s.deb+"' /root/pkgs/ && dpkg -i /root/pkgs/'"+filepath.Base(s.deb)+"' 2>&1"); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	setDaemonArgs(t, n, args)
	if out, err := n.Run(context.Background(), "systemctl enable --now node-resized 2>&1"); err != nil {
		t.Fatalf("%v: %s\n%s", err, out, journalTail(t, n, 30))
	}
	t.Logf("node-resized installed and running as %q", guestSh(t, n, "tr '\\0' ' ' </proc/$(systemctl show node-resized -p MainPID --value)/cmdline"))
	waitNode(t, admin, name, "CapacityConfigured Accepted and Ready", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})
	return s
}

// setDaemonArgs writes NODE_RESIZED_ARGS (and $NODE_RESIZED_NODE_DAEMON_ARGS)
// into /etc/default/node-resized; the daemon reads it at its next start.
func setDaemonArgs(t *testing.T, n *Node, args string) {
	t.Helper()
	args = strings.TrimSpace(args + " " + os.Getenv(EnvDaemonArgs))
	guestSh(t, n, `sed -i 's|^NODE_RESIZED_ARGS=.*|NODE_RESIZED_ARGS="`+args+`"|' /etc/default/node-resized`)
}

// daemonStatus is `node-resizectl -o json status`.
func daemonStatus(t *testing.T, n *Node) api.Status {
	t.Helper()
	var st api.Status
	out := guestSh(t, n, "node-resizectl -o json status")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("node-resizectl -o json status: %v\n%s", err, out)
	}
	if st.Kubernetes == nil || st.Kubelet == nil {
		t.Fatalf("node-resizectl -o json status has no kubernetes or kubelet section:\n%s", out)
	}
	return st
}

// daemonMetric is the value of one series of the daemon's /metrics (on
// its socket), e.g. `node_resized_kubelet_restarts_total{result="done"}`;
// 0 when the series is absent.
func daemonMetric(t *testing.T, n *Node, series string) float64 {
	t.Helper()
	out := guestSh(t, n, "curl -sf --unix-socket "+daemonSocket+" http://localhost/metrics")
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %q", series, l)
			}
			return v
		}
	}
	return 0
}

const restartsDone = `node_resized_kubelet_restarts_total{result="done"}`

// kubeletPID is kubelet.service's MainPID ("0" while it is not running).
func kubeletPID(t *testing.T, n *Node) string {
	t.Helper()
	return guestSh(t, n, "systemctl show kubelet -p MainPID --value")
}

// kubeletLog returns the kubelet's journal messages since `since` that
// contain s.
func kubeletLog(t *testing.T, n *Node, s string, since time.Time) []JournalEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := n.JournalSince(ctx, "kubelet.service", since)
	if err != nil {
		t.Fatal(err)
	}
	var out []JournalEntry
	for _, e := range all {
		if !e.Time().Before(since) && strings.Contains(e.Message(), s) {
			out = append(out, e)
		}
	}
	return out
}

// readyAfter is true when the Node's Ready condition is True and was
// heartbeaten (by the guest's clock) after t0: a kubelet started after
// t0 wrote it.
func readyAfter(nd *corev1.Node, t0 time.Time) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.Time.After(t0)
		}
	}
	return false
}

// newKubeletSince is the time for readyAfter that only the running
// kubelet's own writes pass: the second its process started (systemd's
// ExecMainStartTimestamp, the guest's clock). The old kubelet may write a
// status until it is stopped, after the daemon began the restart, and the
// daemon then republishes the capacity over it: a heartbeat after the
// restart began is not yet the new kubelet's. The old one's last
// heartbeat is before the new one's start, so not after that second; the
// new one's first comes seconds after its start. Call it once the restart
// is done ("kubelet restarted").
func newKubeletSince(t *testing.T, n *Node) time.Time {
	t.Helper()
	out := guestSh(t, n, `date -d "$(systemctl show kubelet -p ExecMainStartTimestamp --value)" +%s`)
	sec, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("the kubelet's start: %q: %v", out, err)
	}
	return time.Unix(sec, 0)
}

// relayAdoption is what one change relayed to the kubelet took.
type relayAdoption struct {
	mark     time.Time     // the guest's clock just before the change
	uevent   time.Time     // the guest's clock: the patch record's time less its latency
	patch    time.Duration // uevent -> status patch with the new capacity
	restart  time.Duration // uevent -> "kubelet restarted" (systemd's job done)
	ready    time.Duration // uevent -> Node Ready by the new kubelet with the target
	accepted time.Duration // uevent -> CapacityConfigured Accepted again
	pid      string        // the new kubelet
}

// relayUpscale hot-adds something with add and checks that the change is
// relayed to the kubelet: the daemon patches the Node with the new
// capacity (want; the time from the uevent is reported), restarts the kubelet (a new
// MainPID, restarts_total{result="done"} +1, its journal records), the
// Node is Ready again by the new kubelet, whose own status writes keep
// the new capacity, the condition is Accepted, and from then on the
// daemon sends no status patch for quietWindow.
func (s *installed) relayUpscale(t *testing.T, what string, add func(ctx context.Context) error, want func(nodeVersion) bool, capField string, quietWindow time.Duration) relayAdoption {
	t.Helper()
	n, cs := s.n, s.admin
	ctx := context.Background()
	var r relayAdoption
	pid0 := kubeletPID(t, n)
	done0 := daemonMetric(t, n, restartsDone)
	mark := guestNow(t, n)
	r.mark = mark
	off := time.Until(mark) // guest clock - this machine's clock
	if err := add(ctx); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cs, n.Name(), what+": the new capacity", time.Minute, func(nd *corev1.Node) bool {
		return want(capacityVersion(nd))
	})

	// The daemon's first patch (before the kubelet's restart: it waits
	// for no settle); the one with the whole new capacity (a DIMM's blocks come online one by
	// one).
	patches := waitDaemonLog(t, n, "Node status patched", mark, 30*time.Second)
	first := patches[0]
	firstLat, ok := first.latency()
	if !ok {
		t.Fatalf("\"Node status patched\" without a LATENCY: %s", journalFields(first))
	}
	r.uevent = first.Time().Add(-firstLat)
	var patch JournalEntry
	for _, e := range patches {
		if strings.Contains(e.str("CAPACITY"), capField) {
			patch = e
			break
		}
	}
	if patch == nil {
		t.Fatalf("no \"Node status patched\" with %s since the hot-add:\n%s", capField, journalTail(t, n, 30))
	}
	r.patch = patch.Time().Sub(r.uevent)
	t.Logf("journal: %s %q: %s", first.Time().Format("15:04:05.000"), first.Message(), journalFields(first))
	if len(patches) > 1 {
		t.Logf("journal: %s %q: %s (%d patches)", patch.Time().Format("15:04:05.000"), patch.Message(), journalFields(patch), len(patches))
	}
	t.Logf("%s: the Node's capacity first patched %v after the uevent", what, firstLat)

	// The restart, by node-resized.
	restarting := waitDaemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark, time.Minute)
	if !first.Time().Before(restarting[0].Time()) {
		t.Errorf("%s: the first patch (%s) came after the kubelet's restart began (%s)", what,
			first.Time().Format("15:04:05.000"), restarting[0].Time().Format("15:04:05.000"))
	}
	restarted := waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
	for _, e := range append(restarting, restarted...) {
		t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	if len(restarting) != 1 || len(restarted) != 1 {
		t.Errorf("%s: %d restart(s) begun and %d done, want one", what, len(restarting), len(restarted))
	}
	if failed := daemonLog(t, n, "kubelet restart failed", mark); len(failed) > 0 {
		t.Errorf("%s: %q: %s", what, failed[0].Message(), journalFields(failed[0]))
	}
	r.restart = restarted[0].Time().Sub(r.uevent)
	settle := restarting[0].Time().Sub(patch.Time())
	r.pid = kubeletPID(t, n)
	if r.pid == pid0 || r.pid == "0" {
		t.Errorf("%s: kubelet MainPID %s after the restart (was %s)", what, r.pid, pid0)
	}
	began := restarting[0].Time()
	since := newKubeletSince(t, n)
	nd := waitNode(t, cs, n.Name(), what+": Ready by the restarted kubelet, with the new capacity", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, since) && want(capacityVersion(nd))
	})
	r.ready = time.Now().Add(off).Sub(r.uevent)
	t.Logf("%s: Ready by kubelet %s: %s", what, r.pid, describeNode(nd))
	nd = waitNode(t, cs, n.Name(), what+": CapacityConfigured Accepted after the restart", 2*time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && c.Status == corev1.ConditionTrue && nodeReady(nd) &&
			want(capacityVersion(nd))
	})
	r.accepted = time.Now().Add(off).Sub(r.uevent)
	t.Logf("%s: %s", what, describeNode(nd))
	for _, v := range s.hist.since(mark.Add(-off)) {
		t.Logf("%s: Node history: %v", what, v)
	}

	// The daemon's view of the kubelet and its metrics.
	st := daemonStatus(t, n)
	kb, _ := json.Marshal(st.Kubelet)
	t.Logf("%s: node-resizectl status: kubelet %s", what, kb)
	if k := st.Kubelet; k.Stale || !k.Ready || strconv.FormatUint(uint64(k.MainPID), 10) != r.pid || k.LastRestart == nil || k.LastRestart.Result != "done" {
		t.Errorf("%s: the daemon's kubelet view: stale %v ready %v mainPID %d (want %s), last restart %+v", what, k.Stale, k.Ready, k.MainPID, r.pid, k.LastRestart)
	}
	if k := st.Kubelet; k.Version != nd.Status.NodeInfo.KubeletVersion || k.Version == "" || k.VersionNote != "" {
		t.Errorf("%s: the daemon's kubelet version %q (note %q), the Node's %q", what, k.Version, k.VersionNote, nd.Status.NodeInfo.KubeletVersion)
	}
	if got := daemonMetric(t, n, restartsDone); got != done0+1 {
		t.Errorf("%s: %s = %v, want %v", what, restartsDone, got, done0+1)
	}
	if got := daemonMetric(t, n, "node_resized_kubelet_stale"); got != 0 {
		t.Errorf("%s: node_resized_kubelet_stale = %v after the restart", what, got)
	}

	// The restarted kubelet's own status writes (field manager kubelet)
	// carry the new capacity: none reverts it. (A stock kubelet whose
	// status is unchanged writes it again only every
	// nodeStatusReportFrequency, 5m; its heartbeat is the Lease.)
	// From the new kubelet's start (its MainPID's, as the daemon saw it),
	// else from the restart job's end: the old kubelet can still write a
	// status (a revert of the daemon's patch) between the restart's start
	// and its stop, and the new one may have written its only status before
	// the daemon called the restart done (v1.34 did).
	newSince := restarted[0].Time()
	if k := st.Kubelet.Started; !k.IsZero() && k.After(began) && k.Before(newSince) {
		newSince = k
	}
	kubeletWrites := s.kubeletWrites(t, what, newSince.Add(-off), want)
	// Where the time to Ready went: the kubelet's own start (from its new
	// process to its first Ready status with the target, as the Node
	// watch saw it), the settle node-resized waits on purpose (relaySettle,
	// counted from the machine's last change: the patch goes out within
	// it), and the rest, node-resized's part: the uevent to the restart
	// begun less the settle (detection, the blocks of a DIMM coming
	// online, any lateness of the restart), and the restart's stop and
	// pre-start up to the new kubelet process.
	if k := st.Kubelet.Started; !k.IsZero() && k.After(began) {
		for _, v := range s.hist.all() {
			if v.manager == "kubelet" && v.ready && want(v) && !v.at.Before(k.Add(-off)) {
				own := v.at.Add(off).Sub(k)
				total := v.at.Add(off).Sub(r.uevent)
				part := total - relaySettle - own
				s.timing("%s: uevent->first Ready status with the target %v = settle %v + the kubelet's own start %v (process start->Ready) + node-resized's part %v (of it: uevent->restart begun, less the settle, %v; restart begun->new kubelet process %v); uevent->patch %v, within the settle",
					what, total.Round(time.Millisecond), relaySettle, own.Round(time.Millisecond),
					part.Round(time.Millisecond), (began.Sub(r.uevent) - relaySettle).Round(time.Millisecond), k.Sub(began).Round(time.Millisecond),
					r.patch.Round(time.Millisecond))
				if part > time.Second {
					t.Logf("%s: node-resized's part %v is over 1 s", what, part.Round(time.Millisecond))
				}
				break
			}
		}
	}

	// No fight: node-resized patches nothing from now on.
	p0 := st.Kubernetes.Patches
	q0 := time.Now()
	time.Sleep(quietWindow)
	p1 := daemonStatus(t, n).Kubernetes.Patches
	var byKubelet, byDaemon int
	for _, v := range s.hist.all() {
		if v.at.Before(q0) {
			continue
		}
		switch v.manager {
		case "kubelet":
			byKubelet++
			if !want(v) {
				t.Errorf("%s: the restarted kubelet wrote %v: not the new capacity", what, v)
			}
		case "node-resized":
			byDaemon++
			t.Errorf("%s: node-resized wrote the Node's status in the quiet window: %v", what, v)
		}
	}
	if p1 != p0 {
		t.Errorf("%s: the daemon's status patches went %d -> %d in %v after the kubelet adopted the change, want none", what, p0, p1, quietWindow)
	}
	t.Logf("%s: %d status writes by the restarted kubelet before the quiet window, all with the new capacity; in the %v after Accepted: %d by the kubelet, %d by node-resized; its patch counter %d -> %d",
		what, kubeletWrites, quietWindow, byKubelet, byDaemon, p0, p1)
	s.timing("%s: uevent->first patch %v, ->patch with the whole capacity %v; uevent->restart begun %v (settle after the patch %v); uevent->kubelet restarted %v; uevent->Node Ready by the new kubelet with the target %v; uevent->Accepted %v; patches in the next %v: %d",
		what, firstLat, r.patch.Round(time.Millisecond), began.Sub(r.uevent).Round(time.Millisecond), settle.Round(time.Millisecond), r.restart.Round(time.Millisecond),
		r.ready.Round(time.Millisecond), r.accepted.Round(time.Millisecond), quietWindow, p1-p0)
	return r
}

// TestKubeletRestart is scenarios a and b of the real-node table: a CPU
// and then a DIMM hot-added under node-resized with kubelet restarts on
// (--kubelet-restart=auto, the relayPolicy timings). Each time the Node
// has the new capacity (the time from the uevent is reported), the daemon restarts the
// kubelet once the change settled, the restarted kubelet is Ready and
// its own status writes carry the new size, and the daemon then sends no
// status patch for a minute. Then c: the kubelet's root filesystem (ext4,
// on a disk of its own) grown online (kubeletDiskGrow); d: a virtio-mem
// device's requested size walked up and down, the guest onlining its
// blocks and then node-resized (virtioMemSteps); a2; and e: a configured
// memory refused on a node with swap on (swapInfeasible); f: a loss under
// --enforce=false --evict=false (enforceEvictOff); g: a restarted kubelet
// that never reports (restartTimeout).
func TestKubeletRestart(t *testing.T) {
	parallelGuest(t)
	s := relayNodeConfig(t, Config{KubeletDisk: &KubeletDisk{FS: "ext4", Size: kubeletDiskSize},
		VirtioMem: []vm.VirtioMemDevice{stepsVirtioMem}}, "--auto-online "+relayPolicy)
	n := s.n
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()
	// The kubelet's own start with nothing changed, to set beside the
	// restarts below: systemctl restart kubelet -> its first Ready status.
	t.Run("own-start", func(t *testing.T) {
		off := time.Until(guestNow(t, n))
		r0 := guestNow(t, n)
		guestSh(t, n, "systemctl restart kubelet")
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no Ready status from the kubelet restarted by hand within 2m")
			}
			started := daemonStatus(t, n).Kubelet.Started
			if started.Before(r0) {
				continue // the daemon has not seen the new kubelet yet
			}
			i := slices.IndexFunc(s.hist.all(), func(v nodeVersion) bool {
				return v.manager == "kubelet" && v.ready && !v.at.Add(off).Before(started)
			})
			if i < 0 {
				continue
			}
			v := s.hist.all()[i]
			s.timing("the kubelet's own start, nothing changed: systemctl restart kubelet->first Ready status %v (process start->Ready %v)",
				v.at.Add(off).Sub(r0).Round(time.Millisecond), v.at.Add(off).Sub(started).Round(time.Millisecond))
			break
		}
	})
	ok := t.Run("a-cpu-hot-add", func(t *testing.T) {
		nd, err := s.admin.CoreV1().Nodes().Get(context.Background(), n.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cpus := nd.Status.Capacity.Cpu().Value() + 1
		s.relayUpscale(t, "a CPU hot-add", func(ctx context.Context) error {
			_, err := n.HotAddCPU(ctx, 1)
			return err
		}, func(v nodeVersion) bool { return v.cpu == cpus*1000 }, fmt.Sprintf("cpu=%d,", cpus), steadyWindow)
		if on := guestSh(t, n, "cat /sys/devices/system/cpu/online"); on != fmt.Sprintf("0-%d", cpus-1) {
			t.Errorf("online CPUs %s", on)
		}
	})
	if !ok {
		return
	}
	t.Run("b-dimm-hot-add", func(t *testing.T) {
		mem0 := memTotal(t, n)
		want := mem0 + installedDIMM
		lost0 := daemonStatus(t, n).Stats.LostEvents
		r := s.relayUpscale(t, "b DIMM hot-add", func(ctx context.Context) error {
			_, err := hotAddDIMM(ctx, t, n, 1, want)
			return err
		}, func(v nodeVersion) bool { return v.mem == want }, fmt.Sprintf("memory=%dKi,", want>>10), steadyWindow)
		s.dimmBurst(t, r.mark, mem0, want, lost0)
		if got := kubepodsMax(t, n); got != want-DefaultSystemReservedMemory-DefaultKubeReservedMemory {
			t.Errorf("kubepods.slice MemoryMax %s, want %s", mibs(got), mibs(want-DefaultSystemReservedMemory-DefaultKubeReservedMemory))
		}
	})
	// Before a2, which leaves a configured memory below the hardware.
	t.Run("c-kubelet-disk-grown-ext4", func(t *testing.T) { s.kubeletDiskGrow(t, "ext4") })
	if !t.Run("d-virtio-mem-the-guest-onlines", func(t *testing.T) { s.virtioMemSteps(t, true) }) {
		return
	}
	t.Run("d-virtio-mem-auto-online", func(t *testing.T) { s.virtioMemSteps(t, false) })
	if !t.Run("a2-configured-below-the-hardware", s.configuredBelow) {
		return
	}
	if !t.Run("e-swap-infeasible", s.swapInfeasible) {
		return
	}
	if !t.Run("f-enforce-evict-off", s.enforceEvictOff) {
		return
	}
	t.Run("g-restart-timeout", s.restartTimeout)
}

// dimmBurst checks what the DIMM of scenario b cost: its memory blocks
// came online one by one (the daemon's --auto-online, at the kernel's
// pace), and the daemon made at most 2 model changes of them, sent exactly
// 1 Node status patch that changed the memory, and lost no uevent.
func (s *installed) dimmBurst(t *testing.T, mark time.Time, mem0, want int64, lost0 uint64) {
	t.Helper()
	n := s.n
	blockSize, err := strconv.ParseInt(guestSh(t, n, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil || blockSize <= 0 {
		t.Fatalf("block_size_bytes: %v", err)
	}
	var changes int
	logs := daemonLogs(t, n, mark)
	for _, e := range logs("machine changed") {
		if !strings.Contains(e.str("CHANGES"), "memory") {
			continue
		}
		changes++
		t.Logf("b DIMM model change: %s", journalFields(e))
	}
	// The patches that changed the Node's memory: each whose memory
	// differs from the one before (a condition-only patch repeats it).
	var memPatches int
	prev := fmt.Sprintf("memory=%dKi,", mem0>>10)
	for _, e := range logs("Node status patched") {
		c := e.str("CAPACITY")
		i := strings.Index(c, "memory=")
		if i < 0 {
			continue
		}
		m := c[i:]
		if j := strings.Index(m, ","); j >= 0 {
			m = m[:j+1]
		}
		if m != prev {
			memPatches++
			prev = m
		}
	}
	lost := daemonStatus(t, n).Stats.LostEvents - lost0
	t.Logf("b DIMM (%d blocks of memory): %d model changes, %d status patches with a new memory, %d lost events", installedDIMM/blockSize, changes, memPatches, lost)
	s.timing("b DIMM of %d blocks: %d model changes, %d Node status patches with a new memory, %d lost events", installedDIMM/blockSize, changes, memPatches, lost)
	// The blocks added, then the blocks online: usually 2 model changes
	// (the loop holds the burst while the daemon's onliner is busy with the
	// DIMM), but how many is the guest's timing: on a loaded TCG host the
	// uevent of the last block's online has come after the burst's quiet
	// window, a third change. What must hold whatever the timing: no
	// change per uevent (the DIMM sends 16), and, below, exactly one Node
	// patch for the new memory and no lost event.
	if blocks := installedDIMM / blockSize; changes == 0 || changes > 1+int(blocks) {
		t.Errorf("b DIMM: %d model changes, want 1 to %d (the blocks added, then at most one per block onlined)", changes, 1+blocks)
	}
	if memPatches != 1 {
		t.Errorf("b DIMM: %d Node status patches with a new memory, want exactly 1", memPatches)
	}
	if lost != 0 {
		t.Errorf("b DIMM: %d lost events", lost)
	}
}

// configuredBelow measures Path A2 held: memory configured below the
// hardware, which no kubelet restart settles (a restarted kubelet would
// publish the hardware). The stock kubelet reverts status.capacity at each
// status update (every ~10 s) and node-resized puts the configured value
// back once per revert: the test counts the Node writes of each over
// a2Window, the time the Node showed the hardware, and requires at most
// one re-patch per revert.
func (s *installed) configuredBelow(t *testing.T) {
	const a2Window = time.Minute
	n, cs := s.n, s.admin
	ctx := context.Background()
	nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hw := nd.Status.Capacity.Memory().Value()
	conf := hw - 512*mib
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, configuredAnnotation, fmt.Sprintf(`{"memory":"%d"}`, conf))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nd = waitNode(t, cs, n.Name(), "Accepted at the configured memory", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nd.Status.Capacity.Memory().Value() == conf
	})
	t.Logf("configured memory %s below the hardware %s: %s", mibs(conf), mibs(hw), describeNode(nd))
	p0 := daemonStatus(t, n).Kubernetes.Patches
	t0 := time.Now()
	time.Sleep(a2Window)
	p1 := daemonStatus(t, n).Kubernetes.Patches
	var byKubelet, byDaemon, reverts, putBack int
	var exposed, worst time.Duration
	var hwSince time.Time
	for _, v := range s.hist.all() {
		if v.at.Before(t0) || v.at.After(t0.Add(a2Window)) {
			continue
		}
		switch v.manager {
		case "kubelet":
			byKubelet++
		case "node-resized":
			byDaemon++
		}
		switch {
		case v.mem != conf && hwSince.IsZero():
			hwSince = v.at
			reverts++
		case v.mem == conf && !hwSince.IsZero():
			putBack++
			d := v.at.Sub(hwSince)
			exposed += d
			worst = max(worst, d)
			hwSince = time.Time{}
		}
	}
	perHour := func(k int) int { return int(float64(k) * float64(time.Hour) / float64(a2Window)) }
	t.Logf("Path A2 held for %v: %d Node status writes by the kubelet, %d by node-resized (its patch counter %d -> %d): %d API writes/hour; the Node showed the hardware for %v in all (longest %v)",
		a2Window, byKubelet, byDaemon, p0, p1, perHour(byKubelet+byDaemon), exposed.Round(time.Millisecond), worst.Round(time.Millisecond))
	s.timing("A2 memory configured 512Mi below the hardware, held %v: kubelet %d + node-resized %d status writes = %d/hour; Node showed the hardware %v in all, longest %v",
		a2Window, byKubelet, byDaemon, perHour(byKubelet+byDaemon), exposed.Round(time.Millisecond), worst.Round(time.Millisecond))
	if byDaemon > byKubelet+1 {
		t.Errorf("node-resized wrote the Node %d times against %d kubelet writes: more than one re-patch per revert", byDaemon, byKubelet)
	}
	if byKubelet > 0 && byDaemon == 0 {
		t.Errorf("the kubelet wrote the Node %d times and node-resized never put the configured memory back", byKubelet)
	}
	// Counts, not a wall-clock bound: every revert but one still open
	// when the window closed was put back.
	if putBack < reverts-1 {
		t.Errorf("the kubelet reverted the Node to the hardware %d times and node-resized put the configured memory back %d times", reverts, putBack)
	}

	// Back to the hardware: the annotation removed, Accepted at hw.
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, configuredAnnotation)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cs, n.Name(), "Accepted at the hardware again", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nd.Status.Capacity.Memory().Value() == hw
	})
}

// cpuState is the kubelet's cpu_manager_state (v2).
type cpuState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	Checksum      uint64                       `json:"checksum"`
}

func readCPUState(t *testing.T, n *Node, path string) (cpuState, string) {
	t.Helper()
	raw := guestSh(t, n, "cat "+path)
	var st cpuState
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("%s: %v: %s", path, err, raw)
	}
	return st, raw
}

// guaranteedPod asks for one whole CPU and memory with limits equal to
// requests: the static CPU manager gives its container an exclusive CPU.
func guaranteedPod(name, node string) *corev1.Pod {
	p := burstablePod(name)
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl}
	return p
}

// TestKubeletRestartStaticCPU is scenario d: the static CPU manager with a
// Guaranteed pod that holds an exclusive CPU, then a CPU hot-add. First
// without node-resized's restart (--kubelet-restart=never, the kubelet
// restarted by hand) and with the pre-start's drop-in taken away: the
// stock kubelet refuses to start on a CPU set that differs from its
// checkpoint. The drop-in put back, a plain systemctl restart kubelet
// brings it back Ready on the new CPUs with the pod's CPU kept; so does a
// start after the kubelet was stopped and a CPU taken offline. A broken
// pre-start (its binary crashing, a corrupt checkpoint) changes nothing
// the kubelet does. Then with node-resized (auto) another CPU is
// hot-added: the daemon restarts the kubelet in one job, whose pre-start
// rewrites the checkpoint (the old one kept as .node-resized.bak); the
// kubelet starts cleanly and the pod keeps its CPU. The pre-start's own
// duration over every run is logged.
func TestKubeletRestartStaticCPU(t *testing.T) {
	parallelGuest(t)
	s := relayNode(t, staticCPUKubeletConfig, "--auto-online --kubelet-restart=never "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()
	defer logPrestartTimes(t, s, guestNow(t, n))
	pods := cs.CoreV1().Pods("default")
	pod := guaranteedPod("d-guaranteed", n.Name())
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	pod = waitPodRunning(t, ctx, cs, pod)
	var st0 cpuState
	var raw0 string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		st0, raw0 = readCPUState(t, n, cpuManagerState)
		if st0.Entries[string(pod.UID)]["c"] != "" || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("pod %s (%s) Running; %s: %s", pod.Name, pod.Status.QOSClass, cpuManagerState, raw0)
	held := st0.Entries[string(pod.UID)]["c"]
	if st0.PolicyName != "static" || held != "1" || st0.DefaultCPUSet != "0" {
		t.Fatalf("cpu_manager_state: policy %q, the pod's container holds %q, default set %q; want static, 1, 0", st0.PolicyName, held, st0.DefaultCPUSet)
	}
	podStill := func(t *testing.T, when string) {
		t.Helper()
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p == nil || p.UID != pod.UID || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("%s: pod %s is not the Running pod it was: %v", when, pod.Name, err)
		}
		st, _ := readCPUState(t, n, cpuManagerState)
		if got := st.Entries[string(pod.UID)]["c"]; got != held {
			t.Errorf("%s: the pod's container holds CPUs %q in cpu_manager_state, want %q", when, got, held)
		}
	}

	ok := t.Run("stock-kubelet-refuses", func(t *testing.T) {
		mark := guestNow(t, n)
		if _, err := n.HotAddCPU(ctx, 1); err != nil {
			t.Fatal(err)
		}
		waitNode(t, cs, n.Name(), "cpu 3", time.Minute, func(nd *corev1.Node) bool { return nd.Status.Capacity.Cpu().Value() == 3 })
		for _, e := range waitDaemonLog(t, n, "Node status patched", mark, 30*time.Second) {
			if strings.Contains(e.str("CAPACITY"), "cpu=3,") {
				l, _ := e.latency()
				t.Logf("journal: %q (uevent to patch %v)", e.Message(), l)
				s.timing("d CPU hot-add (restarts off): uevent->patch %v", l)
				break
			}
		}
		// Restarts are off: the daemon says one is needed, and waits.
		for deadline := time.Now().Add(30 * time.Second); daemonMetric(t, n, "node_resized_kubelet_restart_needed") != 1; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("node_resized_kubelet_restart_needed not 1 with --kubelet-restart=never and a stale kubelet")
				break
			}
		}
		k := daemonStatus(t, n).Kubelet
		t.Logf("the daemon: kubelet stale %v, restart %s, blocked: %s", k.Stale, k.Restart, k.RestartBlocked)
		// The operator restarts the stock kubelet on the new CPUs.
		setDropIn(t, n, false)
		pid0 := kubeletPID(t, n)
		r0 := guestNow(t, n)
		guestSh(t, n, "systemctl restart kubelet")
		var refused []JournalEntry
		for deadline := time.Now().Add(time.Minute); len(refused) == 0; time.Sleep(500 * time.Millisecond) {
			refused = kubeletLog(t, n, "doesn't match with CPUs in state", r0)
			if len(refused) == 0 && time.Now().After(deadline) {
				t.Fatalf("the kubelet restarted on 3 CPUs did not refuse its checkpoint within a minute; kubelet %s", guestSh(t, n, "systemctl show kubelet -p ActiveState -p SubState -p MainPID | tr '\\n' ' '"))
			}
		}
		t.Logf("kubelet (was %s), %v after the restart: %s", pid0, refused[0].Time().Sub(r0).Round(time.Millisecond), refused[0].Message())
		time.Sleep(time.Second)
		t.Logf("kubelet.service: %s", guestSh(t, n, "systemctl show kubelet -p ActiveState -p SubState -p NRestarts | tr '\\n' ' '"))
		if got, _ := readCPUState(t, n, cpuManagerState); got.Entries[string(pod.UID)]["c"] != held {
			t.Errorf("the refusing kubelet changed its checkpoint: %+v", got)
		}
		if _, err := n.Run(ctx, "test ! -e "+cpuManagerState+".node-resized.bak"); err != nil {
			t.Errorf("a .node-resized.bak with restarts off")
		}
	})
	if !ok {
		return
	}
	for _, st := range []struct {
		name string
		run  func(*testing.T, func(*testing.T, string))
	}{
		{"prestart-systemctl-restart", s.prestartAfterRefusal},
		{"prestart-stopped-machine-changed-started", s.prestartStoppedChanged},
		{"prestart-broken", s.prestartBroken},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.run(t, podStill) }) {
			return
		}
	}

	t.Run("with-node-resized", func(t *testing.T) {
		setDaemonArgs(t, n, "--auto-online "+relayPolicy)
		guestSh(t, n, "systemctl restart node-resized")
		waitNode(t, cs, n.Name(), "CapacityConfigured Accepted", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd)
		})
		pid0 := kubeletPID(t, n)
		mark := guestNow(t, n)
		off := time.Until(mark)
		if _, err := n.HotAddCPU(ctx, 1); err != nil {
			t.Fatal(err)
		}
		waitNode(t, cs, n.Name(), "cpu 3", time.Minute, func(nd *corev1.Node) bool { return nd.Status.Capacity.Cpu().Value() == 3 })
		online := guestSh(t, n, "cat /sys/devices/system/cpu/online")
		var uevent time.Time
		for _, e := range waitDaemonLog(t, n, "Node status patched", mark, 30*time.Second) {
			if strings.Contains(e.str("CAPACITY"), "cpu=3,") {
				l, _ := e.latency()
				uevent = e.Time().Add(-l)
				t.Logf("journal: %q (uevent to patch %v); online CPUs %s", e.Message(), l, online)
				s.timing("d CPU hot-add (restarts on): uevent->patch %v", l)
				break
			}
		}
		restarted := waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
		logs := daemonLogs(t, n, mark)
		for _, e := range logs("") {
			if strings.Contains(e.Message(), "kubelet") || strings.Contains(e.Message(), "checkpoint") {
				t.Logf("journal: %s %q", e.Time().Format("15:04:05.000"), e.Message())
			}
		}
		if f := logs("kubelet restart failed"); len(f) > 0 {
			t.Errorf("%q: %s", f[0].Message(), journalFields(f[0]))
		}
		if one := logs("restarting the kubelet in one job"); len(one) != 1 {
			t.Errorf("%d records of a restart in one job, want 1", len(one))
		}
		if stop := logs("restarting the kubelet without node-resized's pre-start"); len(stop) > 0 {
			t.Errorf("the daemon restarted the kubelet without the pre-start: %s", journalFields(stop[0]))
		}
		onePrestartRun(t, n, "the daemon's restart", mark, "rewritten")
		pid := kubeletPID(t, n)
		if pid == pid0 || pid == "0" {
			t.Errorf("kubelet MainPID %s after the restart (was %s)", pid, pid0)
		}
		since := newKubeletSince(t, n)
		nd := waitNode(t, cs, n.Name(), "Ready by the restarted kubelet with 3 CPUs", 2*time.Minute, func(nd *corev1.Node) bool {
			return readyAfter(nd, since) && nd.Status.Capacity.Cpu().Value() == 3
		})
		readyAt := time.Now().Add(off)
		t.Logf("kubelet %s -> %s: %s", pid0, pid, describeNode(nd))
		if r := kubeletLog(t, n, "doesn't match with CPUs in state", mark); len(r) > 0 {
			t.Errorf("the kubelet refused the rewritten checkpoint: %s", r[0].Message())
		}
		if st := guestSh(t, n, "systemctl show kubelet -p ActiveState -p NRestarts | tr '\\n' ' '"); !strings.Contains(st, "ActiveState=active") {
			t.Errorf("kubelet.service: %s", st)
		}
		st, raw := readCPUState(t, n, cpuManagerState)
		t.Logf("%s: %s", cpuManagerState, raw)
		if want := "0," + strings.TrimPrefix(online, "0-1,"); st.DefaultCPUSet != want && st.DefaultCPUSet != "0,3" {
			t.Errorf("defaultCpuSet %q with CPUs %s online and %s held, want %q", st.DefaultCPUSet, online, held, want)
		}
		podStill(t, "after the restart by node-resized")
		bak, err := n.Run(ctx, "cat "+cpuManagerState+".node-resized.bak")
		if err != nil {
			t.Errorf("no %s.node-resized.bak: %v", cpuManagerState, err)
		} else if strings.TrimSpace(bak) != strings.TrimSpace(raw0) {
			t.Logf("%s.node-resized.bak: %s (the checkpoint at the pod's start: %s)", cpuManagerState, strings.TrimSpace(bak), raw0)
		} else {
			t.Logf("%s.node-resized.bak is the checkpoint before the restart", cpuManagerState)
		}
		if got := daemonMetric(t, n, restartsDone); got != 1 {
			t.Errorf("%s = %v, want 1", restartsDone, got)
		}
		if !uevent.IsZero() {
			s.timing("d: uevent->kubelet restarted (one job, the pre-start's rewrite inside) %v; uevent->Node Ready by the new kubelet with cpu=3 %v",
				restarted[0].Time().Sub(uevent).Round(time.Millisecond), readyAt.Sub(uevent).Round(time.Millisecond))
		}
	})
	t.Run("blocked-unknown-checkpoint-field", s.blockedUnknownField)
}

// blockedUnknownField: a CPU manager checkpoint with a field node-resized
// does not know (a later kubelet's, here written into the real kubelet's
// file) is never rewritten. A CPU taken offline then needs a restart that
// node-resized will not make: the kubelet keeps running as it was (its
// MainPID, its checkpoint untouched), a Warning KubeletRestartBlocked
// names the checkpoint, the condition says why, and
// node_resized_kubelet_restart_needed is 1, as the README says.
func (s *installed) blockedUnknownField(t *testing.T) {
	n, cs := s.n, s.admin
	guestSh(t, n, `sed -i 's/^{/{"zzFutureField":"from a later kubelet",/' `+cpuManagerState)
	before := guestSh(t, n, "cat "+cpuManagerState)
	if !strings.Contains(before, "zzFutureField") {
		t.Fatalf("the field did not go in: %s", before)
	}
	pid0 := kubeletPID(t, n)
	mark := guestNow(t, n)
	since := mark // node-resized's events carry the guest's clock
	// The last online CPU but the pod's: a hot-added one.
	cpu := guestSh(t, n, `cd /sys/devices/system/cpu && for c in cpu[2-9]*; do [ "$(cat $c/online 2>/dev/null)" = 1 ] && echo ${c#cpu}; done | tail -1`)
	if cpu == "" {
		t.Fatalf("no online CPU above 1: %s", guestSh(t, n, "cat /sys/devices/system/cpu/online"))
	}
	guestSh(t, n, "echo 0 >/sys/devices/system/cpu/cpu"+cpu+"/online")
	blocked := waitWarnings(t, s, "KubeletRestartBlocked", since, time.Minute)
	t.Logf("Warning KubeletRestartBlocked: %s", blocked[0])
	nd := waitNode(t, cs, n.Name(), "the condition says the restart is blocked", 30*time.Second, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && strings.Contains(c.Message, "zzFutureField")
	})
	t.Logf("the Node: %s", describeNode(nd))
	if !strings.Contains(blocked[0], "zzFutureField") {
		t.Errorf("the event does not name the unknown field: %s", blocked[0])
	}
	if got := daemonMetric(t, n, "node_resized_kubelet_restart_needed"); got != 1 {
		t.Errorf("node_resized_kubelet_restart_needed = %v, want 1", got)
	}
	if k := daemonStatus(t, n).Kubelet; !strings.Contains(k.RestartBlocked, "zzFutureField") {
		t.Errorf("node-resizectl status: restart blocked %q, want the field named", k.RestartBlocked)
	}
	if r := daemonLog(t, n, "restarting the kubelet", mark); len(r) > 0 {
		t.Errorf("node-resized restarted the kubelet: %s", journalFields(r[0]))
	}
	if pid := kubeletPID(t, n); pid != pid0 {
		t.Errorf("kubelet MainPID %s, was %s", pid, pid0)
	}
	if after := guestSh(t, n, "cat "+cpuManagerState); after != before {
		t.Errorf("the checkpoint changed:\n%s\nwas\n%s", after, before)
	}
}

// kubeletWrites checks the kubelet's own status writes since since (this
// machine's clock; the restarted kubelet's start): at least one, each with a capacity want accepts. It
// returns how many there were.
func (s *installed) kubeletWrites(t *testing.T, what string, since time.Time, want func(nodeVersion) bool) int {
	t.Helper()
	var n int
	for _, v := range s.hist.all() {
		if v.manager != "kubelet" || v.at.Before(since) {
			continue
		}
		n++
		if !want(v) {
			t.Errorf("%s: the restarted kubelet wrote %v: not the new capacity", what, v)
		}
	}
	if n == 0 {
		t.Errorf("%s: no status write by the restarted kubelet", what)
	}
	return n
}

// waitDaemonRestartsKubelet waits, for the change that began at mark (the
// guest's clock) while kubelet pid0 ran, until node-resized has restarted the kubelet once and the
// restarted kubelet is Ready with a capacity that want accepts, in its own
// status writes. It returns the times from the change's first uevent (the
// first status patch since mark, less its latency).
func (s *installed) waitDaemonRestartsKubelet(t *testing.T, what, pid0 string, mark time.Time, timeout time.Duration, want func(nodeVersion) bool) relayAdoption {
	t.Helper()
	n, cs := s.n, s.admin
	var r relayAdoption
	off := time.Until(guestNow(t, n)) // guest clock - this machine's clock
	patches := waitDaemonLog(t, n, "Node status patched", mark, 30*time.Second)
	lat, ok := patches[0].latency()
	if !ok {
		t.Fatalf("\"Node status patched\" without a LATENCY: %s", journalFields(patches[0]))
	}
	r.uevent = patches[0].Time().Add(-lat)
	restarting := waitDaemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark, timeout)
	began := restarting[0].Time()
	restarted := waitDaemonLog(t, n, "kubelet restarted", began, 2*time.Minute)
	for _, e := range append(restarting, restarted...) {
		t.Logf("%s: journal: %s %q: %s", what, e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	if failed := daemonLog(t, n, "kubelet restart failed", mark); len(failed) > 0 {
		t.Errorf("%s: %q: %s", what, failed[0].Message(), journalFields(failed[0]))
	}
	r.restart = restarted[0].Time().Sub(r.uevent)
	since := newKubeletSince(t, n)
	nd := waitNode(t, cs, n.Name(), what+": Ready by the kubelet node-resized restarted, with the new capacity", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, since) && want(capacityVersion(nd))
	})
	r.ready = time.Now().Add(off).Sub(r.uevent)
	r.pid = kubeletPID(t, n)
	if r.pid == pid0 || r.pid == "0" {
		t.Errorf("%s: kubelet MainPID %s after the restart (was %s)", what, r.pid, pid0)
	}
	t.Logf("%s: Ready by kubelet %s: %s", what, r.pid, describeNode(nd))
	// The old kubelet may write until it is stopped; the new one may have
	// written its only status before the daemon called the restart done:
	// from the new kubelet's start as the daemon saw it, if it knows it.
	newSince := restarted[0].Time()
	if k := daemonStatus(t, n).Kubelet.Started; !k.IsZero() && k.After(began) && k.Before(newSince) {
		newSince = k
	}
	s.kubeletWrites(t, what, newSince.Add(-off), want)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		got := daemonMetric(t, n, "node_resized_kubelet_stale")
		if got == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: node_resized_kubelet_stale = %v 15s after the kubelet is back Ready with the new capacity", what, got)
			break
		}
	}
	return r
}

// refusals are what a kubelet logs when its container manager will not
// start on its checkpoints: the static CPU policy's check of the CPU set,
// a checkpoint it cannot restore, the memory manager's machine state.
var refusals = []string{"doesn't match with CPUs in state", "could not restore state from checkpoint", "Failed to start ContainerManager"}

func noRefusal(t *testing.T, n *Node, what string, since time.Time) {
	t.Helper()
	for _, r := range refusals {
		if es := kubeletLog(t, n, r, since); len(es) > 0 {
			t.Errorf("%s: the kubelet refused to start: %s", what, es[0].Message())
		}
	}
}

// swapInfeasible is e: swap on, as on a node that swaps from its boot (a
// swap file on the kubelet's disk, on before node-resized starts): a
// configured memory is Infeasible with the reason the README gives
// ("swap is active"), with a Warning CapacityInfeasible event, and
// nothing is clamped; without the request the node is Accepted at its
// hardware again. Swap goes off at the end.
func (s *installed) swapInfeasible(t *testing.T) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	guestSh(t, n, "fallocate -l 64M /var/lib/kubelet/swapfile && chmod 600 /var/lib/kubelet/swapfile && mkswap /var/lib/kubelet/swapfile >/dev/null && swapon /var/lib/kubelet/swapfile")
	defer guestSh(t, n, "swapoff /var/lib/kubelet/swapfile; rm -f /var/lib/kubelet/swapfile; systemctl restart node-resized")
	restartAt := guestNow(t, n)
	guestSh(t, n, "systemctl restart node-resized")
	waitDaemonLog(t, n, "machine model built", restartAt, time.Minute)
	if swap := daemonStatus(t, n).Memory.SwapTotalBytes; swap == 0 {
		t.Fatalf("node-resized sees no swap; /proc/swaps:\n%s", guestSh(t, n, "cat /proc/swaps"))
	}
	nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hw := nd.Status.Capacity.Memory().Value()
	max0 := kubepodsMax(t, n)
	since := guestNow(t, n) // node-resized's events carry the guest's clock
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, configuredAnnotation, fmt.Sprintf(`{"memory":"%d"}`, hw-256*mib))
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nd = waitNode(t, cs, n.Name(), "Infeasible: swap is active", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Infeasible"
	})
	c := capacityCondition(nd)
	t.Logf("with swap on, memory configured 256Mi below the hardware: %s", describeNode(nd))
	if !strings.Contains(c.Message, "swap is active") || c.Status != corev1.ConditionFalse {
		t.Errorf("the condition does not say swap is active: %s %s", c.Status, c.Message)
	}
	if nd.Status.Capacity.Memory().Value() != hw {
		t.Errorf("the Node's memory %s, want the hardware's %s", nd.Status.Capacity.Memory(), mibs(hw))
	}
	infeasible := 0
	for _, note := range waitWarnings(t, s, "CapacityInfeasible", since, 30*time.Second) {
		if strings.Contains(note, "swap is active") {
			infeasible++
		}
	}
	if infeasible != 1 {
		t.Errorf("%d Warning CapacityInfeasible events that say swap is active, want 1", infeasible)
	}
	if got := kubepodsMax(t, n); got != max0 {
		t.Errorf("kubepods.slice MemoryMax %s after the refused request, was %s", mibs(got), mibs(max0))
	}
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, configuredAnnotation)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cs, n.Name(), "Accepted at the hardware without the request", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nd.Status.Capacity.Memory().Value() == hw
	})
}

// restartTimeout is g: the timeout path of a kubelet restart. A drop-in
// freezes every kubelet the unit starts (ExecStartPost sends its MainPID
// SIGSTOP), so that node-resized's restart job ends but the new kubelet
// never reports; with --kubelet-restart-timeout 20s the daemon gives up:
// one Warning KubeletRestartFailed that says the kubelet did not come
// back within 20s, the condition saying it is not restarted again for
// this change and what to do, and no second restart. The drop-in gone and
// the kubelet let go (SIGCONT), it reports the new machine itself and the
// node is Accepted, still with one restart.
func (s *installed) restartTimeout(t *testing.T) {
	n, cs := s.n, s.admin
	const dropIn = "/etc/systemd/system/kubelet.service.d/95-freeze.conf"
	setDaemonArgs(t, n, "--auto-online "+strings.Replace(relayPolicy, "--kubelet-restart-timeout 90s", "--kubelet-restart-timeout 20s", 1))
	guestSh(t, n, "systemctl restart node-resized")
	defer func() {
		guestSh(t, n, "rm -f "+dropIn+"; systemctl daemon-reload; kill -CONT $(systemctl show kubelet -p MainPID --value) 2>/dev/null; true")
		setDaemonArgs(t, n, "--auto-online "+relayPolicy)
		guestSh(t, n, "systemctl restart node-resized")
	}()
	waitNode(t, cs, n.Name(), "Accepted before the frozen restart", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})
	guestSh(t, n, `printf '[Service]\nExecStartPost=/bin/sh -c "kill -STOP $MAINPID"\n' >`+dropIn+` && systemctl daemon-reload`)
	nd, err := cs.CoreV1().Nodes().Get(context.Background(), n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpus := nd.Status.Capacity.Cpu().Value()
	// The last online CPU but cpu0 goes offline: a loss, clamped, and a
	// restart the frozen kubelet never answers.
	cpu := guestSh(t, n, `cd /sys/devices/system/cpu && for c in cpu[1-9]*; do [ "$(cat $c/online 2>/dev/null)" = 1 ] && echo ${c#cpu}; done | tail -1`)
	hostMark := time.Now()
	mark := guestNow(t, n)
	since := mark // node-resized's events carry the guest's clock
	defer func() {
		if !t.Failed() {
			return
		}
		// What the daemon's kubelet view compares: the kubelet's status
		// writes as the API server stamps them (this machine's clock)
		// with the kubelet process's start (the guest's).
		t.Logf("the guest's clock less this machine's at the mark: about %v", mark.Sub(hostMark).Round(time.Millisecond))
		for _, v := range s.hist.all() {
			if !v.at.Before(hostMark) {
				t.Logf("Node: %v ready=%v kubelet status write %s", v, v.ready, v.kubeletWrite.Format("15:04:05"))
			}
		}
		t.Logf("the kubelet unit: %s", guestSh(t, n, "systemctl show kubelet -p MainPID -p ExecMainStartTimestamp -p ActiveEnterTimestamp"))
	}()
	guestSh(t, n, "echo 0 >/sys/devices/system/cpu/cpu"+cpu+"/online")
	waitDaemonLog(t, n, "kubelet restarted", mark, 2*time.Minute)
	if st := guestSh(t, n, "ps -o stat= -p $(systemctl show kubelet -p MainPID --value)"); !strings.HasPrefix(st, "T") {
		t.Fatalf("the restarted kubelet is not frozen (state %q): the drop-in did not act", st)
	}
	failed := waitWarnings(t, s, "KubeletRestartFailed", since, 2*time.Minute)
	t.Logf("Warning KubeletRestartFailed: %s", failed[0])
	if !strings.Contains(failed[0], "within 20s of its restart") {
		t.Errorf("the event does not say the kubelet did not come back within the timeout: %s", failed[0])
	}
	nd = waitNode(t, cs, n.Name(), "the condition says the restart failed", 30*time.Second, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && strings.Contains(c.Message, "does not restart it again for this change")
	})
	t.Logf("the Node: %s", describeNode(nd))
	time.Sleep(15 * time.Second) // a second restart, were there one, would have begun (min interval 10s)
	if r := daemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark); len(r) != 1 {
		t.Errorf("%d restarts begun, want 1", len(r))
	}

	// Let it go: the kubelet reports the machine without the CPU itself.
	guestSh(t, n, "rm -f "+dropIn+" && systemctl daemon-reload && kill -CONT $(systemctl show kubelet -p MainPID --value)")
	nd = waitNode(t, cs, n.Name(), "Accepted once the kubelet runs", 2*time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd) && nd.Status.Capacity.Cpu().Value() == cpus-1
	})
	t.Logf("after SIGCONT: %s", describeNode(nd))
	if r := daemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark); len(r) != 1 {
		t.Errorf("%d restarts begun in all, want 1", len(r))
	}
	guestSh(t, n, "echo 1 >/sys/devices/system/cpu/cpu"+cpu+"/online")
}
