package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// prestartDropIn is the kubelet drop-in of the one-job restart; it is
	// removed here so that every restart takes the stop/rewrite/start
	// path, as on a node where only the DaemonSet runs.
	prestartDropIn  = "/usr/lib/systemd/system/kubelet.service.d/90-node-resized.conf"
	stopRecord      = "/var/lib/node-resized/kubelet-stopped.json"
	memManagerState = "/var/lib/kubelet/memory_manager_state"
)

// buildFaultDaemon builds node-resized with the faultinject tag (and the
// package's grpcnotrace) into this machine's cache, where the guest reads
// it through its root share.
func buildFaultDaemon(t *testing.T) string {
	t.Helper()
	return faultDaemonBuilt.get(t, makeFaultDaemon)
}

func makeFaultDaemon(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(cache, "node-resized", "node", "node-resized-faultinject")
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace faultinject", "-trimpath", "-o", out, "./cmd/node-resized")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build node-resized -tags faultinject: %v\n%s", err, b)
	}
	return out
}

// unitLog returns the records of unit's journal (systemd's about it
// included) written after since whose message contains s.
func unitLog(t *testing.T, n *Node, unit, s string, since time.Time) []JournalEntry {
	t.Helper()
	out, _ := unitLogCursor(t, n, unit, s, since)
	return out
}

// unitLogCursor is unitLog, with the cursor of the unit's last record.
func unitLogCursor(t *testing.T, n *Node, unit, s string, since time.Time) ([]JournalEntry, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := n.JournalSince(ctx, unit, since)
	if err != nil {
		t.Fatal(err)
	}
	var out []JournalEntry
	for _, e := range all {
		if !e.Time().Before(since) && strings.Contains(e.Message(), s) {
			out = append(out, e)
		}
	}
	return out, lastCursor(all)
}

// waitUnitLog waits up to timeout for a record of unitLog, the guest
// waiting for the unit's next record between two reads.
func waitUnitLog(t *testing.T, n *Node, unit, s string, since time.Time, timeout time.Duration) []JournalEntry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		es, cursor := unitLogCursor(t, n, unit, s, since)
		if len(es) > 0 {
			return es
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no %q in %s's journal within %v; node-resized's last lines:\n%s", s, unit, timeout, journalTail(t, n, 30))
		}
		waitJournal(t, n, unit, cursor, since, left)
	}
}

// faultRun is what one fault scenario saw, by the guest's clock.
type faultRun struct {
	fault     time.Time // the fault acted
	stopPost  time.Time // ExecStopPost started the kubelet (zero: it did not)
	restarted time.Time // node-resized ready again after the fault
	ready     time.Time // Node Ready by a kubelet started after the fault
	by        string    // who started the kubelet
}

// TestFaults is point 2 of the relay's safety: node-resized stops the
// kubelet to rewrite its checkpoints (the static CPU manager with a
// Guaranteed pod that holds an exclusive CPU, the pre-start drop-in
// removed) and dies or hangs at each step of the stop/rewrite/start path,
// on the real kubelet and systemd: SIGKILLed (a) right after the stop,
// (b) between the two checkpoint writes, (c) just before the start; (d)
// SIGSTOPped with the stop's reply not yet read, until its watchdog ends
// it; (e) stopped with `systemctl stop node-resized` in the middle of a
// restart, then started again; (f) as a, with the unit's ExecStopPost
// taken away, so that only the daemon's recovery at its next start can
// start the kubelet, which it tells with a Warning KubeletRecovered. Each change is a CPU hot-add or a CPU put
// offline or online in sysfs, so that each needs a rewrite. Each time the
// kubelet is Ready again by a kubelet started after the fault, with the
// new CPU count, the pod's exclusive CPU kept and no refusal of its
// checkpoint in its journal, and node-resized runs again; the time from
// node-resized's restart (or its ExecStopPost) to Ready is reported.
// Then g: the faults gone, the kubelet's root filesystem (xfs, on a disk
// of its own) grown online (kubeletDiskGrow).
func TestFaults(t *testing.T) {
	parallelGuest(t)
	bin := buildFaultDaemon(t)
	s := relayNodeConfig(t, Config{KubeletConfig: staticCPUKubeletConfig, KubeletDisk: &KubeletDisk{FS: "xfs", Size: kubeletDiskSize}},
		"--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	var table []string
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
		for _, l := range table {
			t.Logf("fault table: %s", l)
		}
	}()
	guestSh(t, n, "cp '"+bin+"' /usr/bin/node-resized.new && mv -f /usr/bin/node-resized.new /usr/bin/node-resized && rm -f "+prestartDropIn+" && systemctl daemon-reload && systemctl restart node-resized")
	if drop := guestSh(t, n, "systemctl show kubelet -p DropInPaths --value"); strings.Contains(drop, "90-node-resized.conf") {
		t.Fatalf("kubelet.service still has the pre-start drop-in: %s", drop)
	}

	pods := cs.CoreV1().Pods("default")
	pod := guaranteedPod("faults-guaranteed", n.Name())
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	pod = waitPodRunning(t, ctx, cs, pod)
	var held string
	for deadline := time.Now().Add(30 * time.Second); held == "" && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		st, _ := readCPUState(t, n, cpuManagerState)
		held = st.Entries[string(pod.UID)]["c"]
	}
	if held != "1" {
		t.Fatalf("the Guaranteed pod's container holds CPUs %q, want 1", held)
	}
	if _, err := n.Run(ctx, "test -s "+memManagerState); err != nil {
		t.Fatalf("no %s: the kill between the two checkpoint writes needs both", memManagerState)
	}
	t.Logf("pod %s holds CPU %s; %s: %s", pod.Name, held, memManagerState, guestSh(t, n, "cat "+memManagerState))

	scenario := func(name, fault string, cpus int64, change func(t *testing.T), during func(t *testing.T, mark time.Time) faultRun) {
		ok := t.Run(name, func(t *testing.T) {
			guestSh(t, n, `rm -f /var/lib/node-resized/fault-* && sed -i '/^NODE_RESIZED_FAULT=/d' /etc/default/node-resized && echo 'NODE_RESIZED_FAULT=`+fault+`' >>/etc/default/node-resized && systemctl restart node-resized`)
			waitNode(t, cs, n.Name(), "Accepted and Ready before the fault", time.Minute, func(nd *corev1.Node) bool {
				c := capacityCondition(nd)
				return c != nil && c.Reason == "Accepted" && nodeReady(nd)
			})
			pid0 := kubeletPID(t, n)
			mark := guestNow(t, n)
			off := time.Until(mark)
			change(t)
			r := during(t, mark)
			nd := waitNode(t, cs, n.Name(), name+": Ready by a kubelet started after the fault, with the new CPUs", 3*time.Minute, func(nd *corev1.Node) bool {
				return readyAfter(nd, r.fault) && nd.Status.Capacity.Cpu().Value() == cpus
			})
			r.ready = time.Now().Add(off)
			pid := kubeletPID(t, n)
			t.Logf("%s: kubelet %s -> %s: %s", name, pid0, pid, describeNode(nd))
			if pid == pid0 || pid == "0" {
				t.Errorf("%s: kubelet MainPID %s (was %s)", name, pid, pid0)
			}
			if st := guestSh(t, n, "systemctl show kubelet -p ActiveState --value"); st != "active" {
				t.Errorf("%s: kubelet.service %s", name, st)
			}
			if refused := kubeletLog(t, n, "doesn't match", mark); len(refused) > 0 {
				t.Errorf("%s: the kubelet refused its checkpoint: %s", name, refused[0].Message())
			}
			st, raw := readCPUState(t, n, cpuManagerState)
			t.Logf("%s: %s", name, raw)
			if got := st.Entries[string(pod.UID)]["c"]; got != held {
				t.Errorf("%s: the pod's container holds CPUs %q, want %q", name, got, held)
			}
			if p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
				t.Errorf("%s: the pod is not the one it was: %v", name, err)
			}
			// node-resized runs again, started by systemd, and the record
			// is gone.
			nrReady := waitDaemonLog(t, n, "node-resized ready", r.fault, time.Minute)
			r.restarted = nrReady[0].Time()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				if _, err := n.Run(ctx, "test ! -e "+stopRecord); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s: %s still there 30s after the kubelet is Ready", name, stopRecord)
					break
				}
			}
			if st := guestSh(t, n, "systemctl show node-resized -p ActiveState --value"); st != "active" {
				t.Errorf("%s: node-resized.service %s", name, st)
			}
			for _, e := range daemonLog(t, n, "", mark) {
				if m := e.Message(); strings.Contains(m, "kubelet") || strings.Contains(m, "ready") || strings.Contains(m, "fault") {
					t.Logf("%s: journal: %s %s %q", name, e.Time().Format("15:04:05.000"), e.str("PART"), m)
				}
			}
			line := fmt.Sprintf("%s (%s): started by %s; fault->Ready %v", name, fault, r.by, r.ready.Sub(r.fault).Round(time.Millisecond))
			if !r.stopPost.IsZero() {
				line += fmt.Sprintf(", ExecStopPost's start->Ready %v", r.ready.Sub(r.stopPost).Round(time.Millisecond))
			}
			line += fmt.Sprintf(", node-resized ready again->kubelet Ready %v", r.ready.Sub(r.restarted).Round(time.Millisecond))
			table = append(table, line)
			s.timing("%s", line)
		})
		if !ok {
			t.FailNow()
		}
	}
	cpuOnline := func(cpu, v int) func(t *testing.T) {
		return func(t *testing.T) {
			guestSh(t, n, fmt.Sprintf("echo %d >/sys/devices/system/cpu/cpu%d/online", v, cpu))
		}
	}
	// killed waits for the SIGKILL at the fault point and for who started
	// the kubelet afterwards.
	killed := func(t *testing.T, mark time.Time) faultRun {
		var r faultRun
		k := waitUnitLog(t, n, "node-resized.service", "status=9/KILL", mark, 2*time.Minute)
		r.fault = k[0].Time()
		r.by = "the daemon's recovery at its start"
		if sp := unitLog(t, n, "node-resized.service", "started the kubelet that node-resized had stopped", r.fault); len(sp) > 0 {
			r.stopPost, r.by = sp[0].Time(), sp[0].str("PART")
			if r.by == "" {
				r.by = "the daemon"
			}
		}
		return r
	}

	scenario("a-killed-after-the-stop", "kubelet-stopped=kill", 3, func(t *testing.T) {
		if _, err := n.HotAddCPU(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}, killed)
	scenario("b-killed-between-the-checkpoints", "checkpoint-between=kill", 2, cpuOnline(2, 0), killed)
	scenario("c-killed-before-the-start", "kubelet-before-start=kill", 3, cpuOnline(2, 1), killed)
	scenario("d-stop-reply-never-read", "kubelet-stop-queued=stop", 2, cpuOnline(2, 0), func(t *testing.T, mark time.Time) faultRun {
		var r faultRun
		f := waitUnitLog(t, n, "node-resized.service", "fault injected", mark, 2*time.Minute)
		r.fault = f[0].Time()
		w := waitUnitLog(t, n, "node-resized.service", "Watchdog timeout", r.fault, 2*time.Minute)
		t.Logf("d: frozen at %s, %s: %q", r.fault.Format("15:04:05.000"), w[0].Time().Format("15:04:05.000"), w[0].Message())
		r.by = "the daemon's recovery at its start"
		if sp := waitUnitLog(t, n, "node-resized.service", "started the kubelet that node-resized had stopped", r.fault, time.Minute); len(sp) > 0 {
			r.stopPost, r.by = sp[0].Time(), sp[0].str("PART")
			if r.by == "" {
				r.by = "the daemon"
			}
		}
		return r
	})
	scenario("e-systemctl-stop-mid-restart", "kubelet-stopped=stop", 3, cpuOnline(2, 1), func(t *testing.T, mark time.Time) faultRun {
		var r faultRun
		f := waitUnitLog(t, n, "node-resized.service", "fault injected", mark, 2*time.Minute)
		r.fault = f[0].Time()
		if st := guestSh(t, n, "systemctl show kubelet -p ActiveState --value"); st != "inactive" {
			t.Errorf("e: the kubelet is %s while node-resized is held after its stop", st)
		}
		// systemctl stop sends SIGTERM and SIGCONT: the restart goes on,
		// queues the kubelet's start (which systemd runs once
		// node-resized's own stop is done: the unit is ordered before
		// kubelet.service) and the daemon exits without waiting for it.
		t0 := time.Now()
		guestSh(t, n, "systemctl stop node-resized")
		took := time.Since(t0)
		var st string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			if st = guestSh(t, n, "systemctl show kubelet -p ActiveState --value"); st == "active" || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("e: systemctl stop node-resized took %v; then kubelet.service %s", took.Round(time.Millisecond), st)
		s.timing("e: systemctl stop node-resized in the middle of a restart took %v (TimeoutStopSec 30s)", took.Round(time.Millisecond))
		if st != "active" {
			t.Errorf("e: kubelet.service %s once node-resized stopped, want active (the restart finished)", st)
		}
		if k := unitLog(t, n, "node-resized.service", "timed out", r.fault); len(k) > 0 {
			t.Errorf("e: the daemon did not stop within TimeoutStopSec: %q", k[0].Message())
		}
		queued := daemonLog(t, n, "kubelet restart failed", r.fault)
		if len(queued) != 1 || !strings.Contains(queued[0].str("ERR"), "queued; node-resized is stopping") {
			t.Errorf("e: the restart did not queue the kubelet's start while stopping: %d records %v", len(queued), queued)
		} else {
			t.Logf("e: %s %q", queued[0].str("ERR"), queued[0].Message())
		}
		r.by = "the restart, its start queued during node-resized's stop"
		if sp := unitLog(t, n, "node-resized.service", "started the kubelet that node-resized had stopped", r.fault); len(sp) > 0 {
			r.stopPost = sp[0].Time()
			r.by += " (ExecStopPost's start merged with it)"
		}
		guestSh(t, n, "systemctl start node-resized")
		return r
	})
	// f: as a, with the unit's ExecStopPost taken away (a DaemonSet has
	// none, and a unit an operator edited may not): the daemon's own
	// recovery, when systemd starts it again, is then all that starts the
	// kubelet.
	guestSh(t, n, `mkdir -p /etc/systemd/system/node-resized.service.d && printf '[Service]\nExecStopPost=\n' >/etc/systemd/system/node-resized.service.d/50-no-stoppost.conf && systemctl daemon-reload`)
	if post := guestSh(t, n, "systemctl show node-resized -p ExecStopPost --value"); strings.Contains(post, "kubelet-recover") {
		t.Fatalf("node-resized.service still has its ExecStopPost: %s", post)
	}
	scenario("f-killed-after-the-stop-no-stoppost", "kubelet-stopped=kill", 2, cpuOnline(2, 0), func(t *testing.T, mark time.Time) faultRun {
		r := killed(t, mark)
		sp := waitUnitLog(t, n, "node-resized.service", "started the kubelet that node-resized had stopped", r.fault, 2*time.Minute)
		if p := sp[0].str("PART"); p == "kubelet-recover" {
			t.Errorf("f: the kubelet was started by %q, want the daemon's own recovery (there is no ExecStopPost)", p)
		}
		t.Logf("f: killed %s, the kubelet started by the daemon (part %q) %s", r.fault.Format("15:04:05.000"), sp[0].str("PART"), sp[0].Time().Format("15:04:05.000"))
		// The operator hears of it: a Warning KubeletRecovered on the Node
		// (an event carries the clock of who recorded it: the guest's).
		recovered := waitWarnings(t, s, "KubeletRecovered", mark, time.Minute)
		t.Logf("f: Warning KubeletRecovered: %s", recovered[0])
		if len(recovered) != 1 || !strings.Contains(recovered[0], "had stopped") {
			t.Errorf("f: %d KubeletRecovered events %q, want one that says the kubelet had been stopped", len(recovered), recovered)
		}
		r.stopPost = time.Time{}
		r.by = "the daemon's recovery at its start (no ExecStopPost)"
		return r
	})

	// g: with the faults and f's drop-in gone, the kubelet's root
	// filesystem (xfs, on a disk of its own) grown online
	// (kubeletDiskGrow): ext4's is TestKubeletRestart's c.
	t.Run("g-kubelet-disk-grown-xfs", func(t *testing.T) {
		guestSh(t, n, `rm -f /etc/systemd/system/node-resized.service.d/50-no-stoppost.conf /var/lib/node-resized/fault-* && sed -i '/^NODE_RESIZED_FAULT=/d' /etc/default/node-resized && systemctl daemon-reload && systemctl restart node-resized`)
		waitNode(t, cs, n.Name(), "Accepted and Ready without faults", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd)
		})
		s.kubeletDiskGrow(t, "xfs")
	})
}
