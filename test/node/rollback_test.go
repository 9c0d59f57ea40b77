package node

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	memoryManagerState = "/var/lib/kubelet/memory_manager_state"
	prestartHold       = "/var/lib/node-resized/kubelet-prestart-hold.json"
)

// TestKubeletCheckpointRollback is point 3 of the relay's safety: a
// rewrite the kubelet refuses is rolled back. The static CPU manager, and
// the memory manager's None policy, whose checkpoint a CPU change leaves
// as it is. The packaged daemon is replaced by a test build with the
// fault checkpoint-corrupt set: on the next rewrite the memory manager's
// checkpoint is written (unchanged) with checksums that do not match,
// while the CPU manager's is rewritten correctly for the new CPU set. A
// CPU hot-add makes node-resized restart the kubelet into them (stop,
// rewrite, start; or one RestartUnit through the pre-start when its
// drop-in is installed, which then reads the same fault). What is proven,
// on the real kubelet v1.37.2 and systemd: the kubelet accepts the
// rewritten CPU checkpoint (it loads it first) and refuses the memory
// one ("checkpoint is corrupted", in its journal); node-resized reads that
// from the journal, restores only the refused file from its backup (the
// file before the rewrite, which a stock kubelet accepts on the changed
// machine, as a CPU change does not touch it), writes the pre-start hold
// listing it with the backup's sha256, and restarts the kubelet once; the
// kubelet is then Ready with the new CPU, with the Warning event
// KubeletCheckpointRolledBack, the metric at 1, and no restart after.
// Restoring the CPU checkpoint would not do: the file before a CPU change
// is the one a stock kubelet refuses on the new CPU set.
func TestKubeletCheckpointRollback(t *testing.T) {
	parallelGuest(t)
	fi := buildFaultDaemon(t)
	s := relayNode(t, staticCPUKubeletConfig, "--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()

	// The test build with the fault, for the daemon and, if it is
	// installed, the kubelet's pre-start.
	guestSh(t, n, "install -m 0755 '"+fi+"' /usr/bin/node-resized")
	guestSh(t, n, `echo 'NODE_RESIZED_FAULT=checkpoint-corrupt=on' >>/etc/default/node-resized`)
	viaPrestart := false
	if _, err := n.Run(ctx, "test -e "+prestartDropIn); err == nil {
		viaPrestart = true
		guestSh(t, n, `mkdir -p /etc/systemd/system/kubelet.service.d && printf '[Service]\nEnvironmentFile=-/etc/default/node-resized\n' >/etc/systemd/system/kubelet.service.d/95-fault.conf && systemctl daemon-reload`)
	}
	t.Logf("the kubelet is restarted through the pre-start drop-in: %v", viaPrestart)
	guestSh(t, n, "systemctl restart node-resized")
	waitNode(t, cs, n.Name(), "CapacityConfigured Accepted under the test build", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && c.Reason == "Accepted" && nodeReady(nd)
	})
	mem0 := guestSh(t, n, "cat "+memoryManagerState)
	cpu0, _ := readCPUState(t, n, cpuManagerState)
	t.Logf("before: %s: %s; %s default set %q", memoryManagerState, mem0, cpuManagerState, cpu0.DefaultCPUSet)
	if _, err := n.Run(ctx, "test ! -e "+prestartHold); err != nil {
		t.Fatalf("a pre-start hold before any rollback")
	}

	pid0 := kubeletPID(t, n)
	mark := guestNow(t, n)
	off := time.Until(mark)
	if _, err := n.HotAddCPU(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rolled := waitDaemonLog(t, n, "kubelet checkpoint rolled back", mark, 3*time.Minute)
	rb := rolled[0]
	t.Logf("journal: %s %q: %s", rb.Time().Format("15:04:05.000"), rb.Message(), journalFields(rb))
	for _, e := range daemonLog(t, n, "", mark) {
		if m := e.Message(); strings.Contains(m, "kubelet") || strings.Contains(m, "checkpoint") || strings.Contains(m, "fault") {
			t.Logf("journal: %s %q", e.Time().Format("15:04:05.000"), m)
		}
	}
	if got := rb.str("FILES"); got != memoryManagerState {
		t.Errorf("files rolled back %q, want %s only", got, memoryManagerState)
	}
	if res, p := rb.str("RESULT"), rb.str("PROBLEMS"); res != "done" || p != "" {
		t.Errorf("the kubelet's start after the rollback: job %q, problems %q; want done, none", res, p)
	}
	if j := rb.str("JOURNAL"); !strings.Contains(j, "memory manager checkpoint file") && !strings.Contains(j, "start memory manager error") {
		t.Errorf("the journal line that blamed it: %q; want the kubelet's memory manager refusal", j)
	}

	// The kubelet refused the corrupt file, and said so.
	refused := kubeletLog(t, n, "could not restore state from checkpoint", mark)
	for _, e := range refused {
		t.Logf("kubelet[%s] %s: %s", e.str("_PID"), e.Time().Format("15:04:05.000"), e.Message())
	}
	if len(refused) == 0 {
		t.Fatalf("no refusal in the kubelet's journal")
	}
	for _, e := range refused {
		if !strings.Contains(e.Message(), "memory manager checkpoint file") {
			t.Errorf("the kubelet refused another checkpoint: %s", e.Message())
		}
	}
	for _, e := range kubeletLog(t, n, "Failed to start ContainerManager", mark) {
		t.Logf("kubelet[%s] %s: %s", e.str("_PID"), e.Time().Format("15:04:05.000"), e.Message())
	}

	// Restored from the backup, which is the file before the rewrite; the
	// CPU checkpoint kept as rewritten; the hold lists the restored file
	// as restored.
	bak := guestSh(t, n, "cat "+memoryManagerState+".node-resized.bak")
	if strings.TrimSpace(bak) != strings.TrimSpace(mem0) {
		t.Errorf("%s.node-resized.bak %s, want the file before the rewrite %s", memoryManagerState, bak, mem0)
	}
	memBakSum := strings.Fields(guestSh(t, n, "sha256sum "+memoryManagerState+".node-resized.bak"))[0]
	if now := guestSh(t, n, "cat "+memoryManagerState); strings.TrimSpace(now) != strings.TrimSpace(bak) {
		t.Logf("%s now %s (the kubelet wrote it after its start), its backup %s", memoryManagerState, now, bak)
	} else {
		t.Logf("%s equals its backup", memoryManagerState)
	}
	holdRaw := guestSh(t, n, "cat "+prestartHold)
	t.Logf("%s: %s", prestartHold, holdRaw)
	var hold struct {
		At     time.Time         `json:"at"`
		Reason string            `json:"reason"`
		Files  map[string]string `json:"files"`
	}
	if err := json.Unmarshal([]byte(holdRaw), &hold); err != nil {
		t.Fatalf("the pre-start hold: %v", err)
	}
	if hold.Files[memoryManagerState] != memBakSum || hold.Files[cpuManagerState] == "" || hold.At.IsZero() || hold.Reason == "" {
		t.Errorf("hold %+v: want the memory checkpoint listed as its backup (%s), the CPU one listed", hold, memBakSum)
	}
	cpu1, raw1 := readCPUState(t, n, cpuManagerState)
	t.Logf("%s after: %s", cpuManagerState, raw1)
	if cpu1.DefaultCPUSet == cpu0.DefaultCPUSet {
		t.Errorf("the CPU checkpoint's default set %q after the hot-add, as before: restored, or never rewritten", cpu1.DefaultCPUSet)
	}
	if _, err := n.Run(ctx, "test -e /var/lib/node-resized/fault-checkpoint-corrupt"); err != nil {
		t.Errorf("the fault did not act (no marker)")
	}

	// When the hold was written: the files were back by then.
	var heldAt time.Time
	if sec, err := strconv.ParseFloat(guestSh(t, n, "stat -c %.6Y "+prestartHold), 64); err == nil {
		heldAt = time.UnixMicro(int64(sec * 1e6))
	}

	// The kubelet is back, Ready with the new CPU: a kubelet started after
	// the refusal, so on the restored file (the log line comes after the
	// start job, which waits for systemd's auto-restart: the kubelet may
	// be Ready before it).
	nd := waitNode(t, cs, n.Name(), "Ready by the kubelet started after the rollback, with 3 CPUs", 3*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, refused[len(refused)-1].Time().Add(-off)) && nd.Status.Capacity.Cpu().Value() == 3
	})
	readyAt := time.Now().Add(off)
	pid := kubeletPID(t, n)
	t.Logf("kubelet %s -> %s: %s", pid0, pid, describeNode(nd))
	if st := guestSh(t, n, "systemctl show kubelet -p ActiveState -p SubState -p NRestarts | tr '\\n' ' '"); !strings.Contains(st, "ActiveState=active") {
		t.Errorf("kubelet.service: %s", st)
	}
	if r := kubeletLog(t, n, "could not restore state from checkpoint", rb.Time()); len(r) > 0 {
		t.Errorf("the kubelet refused a checkpoint after the rollback: %s", r[0].Message())
	}

	// Said so: the event, the metric; and one restart, no loop.
	var events int
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "KubeletCheckpointRolledBack" || e.Reason == "KubeletRestartFailed" {
			t.Logf("event: %s %s %s/%s: %s", e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
		}
		if e.Reason == "KubeletCheckpointRolledBack" && e.Type == "Warning" && strings.Contains(e.Note, memoryManagerState) {
			events++
		}
	}
	if events != 1 {
		t.Errorf("%d KubeletCheckpointRolledBack Warning events naming %s, want 1", events, memoryManagerState)
	}
	if got := daemonMetric(t, n, "node_resized_kubelet_checkpoint_rollbacks_total"); got != 1 {
		t.Errorf("node_resized_kubelet_checkpoint_rollbacks_total = %v, want 1", got)
	}
	time.Sleep(15 * time.Second) // past the restart interval (10s)
	if r := daemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark); len(r) != 1 {
		t.Errorf("%d restarts by node-resized since the hot-add, want 1 (no restart loop)", len(r))
	}
	k := daemonStatus(t, n).Kubelet
	t.Logf("the daemon: kubelet stale %v, ready %v, last restart %+v", k.Stale, k.Ready, k.LastRestart)
	if patches := daemonLog(t, n, "Node status patched", mark); len(patches) > 0 {
		if l, ok := patches[0].latency(); ok {
			uevent := patches[0].Time().Add(-l)
			s.timing("rollback: uevent->the kubelet's refusal %v; ->files restored and hold written %v; ->start job done %v; uevent->Node Ready with cpu=3 seen %v (pre-start path %v)",
				refused[0].Time().Sub(uevent).Round(time.Millisecond), heldAt.Sub(refused[0].Time()).Round(time.Millisecond),
				rb.Time().Sub(heldAt).Round(time.Millisecond), readyAt.Sub(uevent).Round(time.Millisecond), viaPrestart)
		}
	}
}
