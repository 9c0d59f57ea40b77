package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// prestartMask turns the pre-start's drop-in (prestartDropIn, as the
// packages install it) off, as docs/operating.md says.
const prestartMask = "/etc/systemd/system/kubelet.service.d/90-node-resized.conf"

// prestartRuns returns the records the pre-start (`node-resized
// kubelet-prestart`, run inside kubelet.service) wrote since since, one per
// run, with its OUTCOME and DURATION. journalctl picks them (-t), so that
// the kubelet's own verbose log is not read.
func prestartRuns(t *testing.T, n *Node, since time.Time) []JournalEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.Run(ctx, "journalctl -b --no-pager -o json -u kubelet.service -t node-resized")
	if err != nil {
		t.Fatal(err)
	}
	var runs []JournalEntry
	for _, line := range strings.Split(out, "\n") {
		var e JournalEntry
		if line = strings.TrimSpace(line); line == "" || !strings.HasPrefix(line, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("the pre-start's journal: %v in %.200q", err, line)
		}
		if e.str("OUTCOME") != "" && !e.Time().Before(since) {
			runs = append(runs, e)
		}
	}
	return runs
}

// onePrestartRun checks that the kubelet's start since since ran the
// pre-start once with the outcome want, and returns its record.
func onePrestartRun(t *testing.T, n *Node, what string, since time.Time, want string) JournalEntry {
	t.Helper()
	runs := prestartRuns(t, n, since)
	for _, e := range runs {
		t.Logf("%s: kubelet's journal: %s %q", what, e.Time().Format("15:04:05.000"), e.Message())
	}
	if len(runs) == 0 {
		t.Fatalf("%s: no record of the pre-start in the kubelet's journal", what)
	}
	if got := runs[0].str("OUTCOME"); got != want {
		t.Errorf("%s: the pre-start's outcome %q, want %q: %s", what, got, want, journalFields(runs[0]))
	}
	return runs[0]
}

// logPrestartTimes logs the pre-start's own duration over every run since
// since: the median and the maximum.
func logPrestartTimes(t *testing.T, s *installed, since time.Time) {
	var ds []time.Duration
	for _, e := range prestartRuns(t, s.n, since) {
		if d, err := time.ParseDuration(e.str("DURATION")); err == nil {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		t.Errorf("no pre-start run recorded a DURATION")
		return
	}
	slices.Sort(ds)
	s.timing("kubelet pre-start's own duration over %d runs: median %v, max %v (all %v)", len(ds), ds[len(ds)/2], ds[len(ds)-1], ds)
}

// setDropIn masks the pre-start's drop-in (on false) as an operator would,
// or takes the mask away, and reloads systemd. systemd lists a masked
// drop-in among the unit's DropInPaths too; what it runs is ExecStartPre.
func setDropIn(t *testing.T, n *Node, on bool) {
	t.Helper()
	if on {
		guestSh(t, n, "rm "+prestartMask+" && systemctl daemon-reload")
	} else {
		guestSh(t, n, "test -e "+prestartDropIn+" && ln -s /dev/null "+prestartMask+" && systemctl daemon-reload")
	}
	pre := guestSh(t, n, "systemctl show kubelet -p ExecStartPre --value")
	t.Logf("kubelet.service: DropInPaths %s; ExecStartPre %s", guestSh(t, n, "systemctl show kubelet -p DropInPaths --value"), pre)
	if strings.Contains(pre, "kubelet-prestart") != on {
		t.Fatalf("kubelet.service's ExecStartPre %q with the drop-in %s", pre, map[bool]string{true: "in place", false: "masked"}[on])
	}
}

// prestartAfterRefusal is the stock kubelet's refusal (the subtest before)
// undone by the drop-in alone: back in place, a plain systemctl restart
// kubelet brings it back Ready on 3 CPUs with the pod's CPU kept. The
// refusing kubelet's auto-restart loop is stopped first, so that the
// restart by hand is the first start with the drop-in (systemd's own
// restart would pass through the pre-start just the same).
func (s *installed) prestartAfterRefusal(t *testing.T, podStill func(*testing.T, string)) {
	n, cs := s.n, s.admin
	guestSh(t, n, "systemctl stop kubelet")
	setDropIn(t, n, true)
	r0 := guestNow(t, n)
	guestSh(t, n, "systemctl restart kubelet")
	nd := waitNode(t, cs, n.Name(), "Ready by the kubelet restarted by hand on 3 CPUs", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, r0) && nd.Status.Capacity.Cpu().Value() == 3
	})
	s.timing("d systemctl restart kubelet with the pre-start, CPU hot-added: Ready after %v", guestNow(t, n).Sub(r0).Round(time.Millisecond))
	t.Logf("kubelet %s: %s", kubeletPID(t, n), describeNode(nd))
	onePrestartRun(t, n, "systemctl restart kubelet", r0, "rewritten")
	if r := kubeletLog(t, n, "doesn't match with CPUs in state", r0); len(r) > 0 {
		t.Errorf("the kubelet refused the checkpoint the pre-start wrote: %s", r[0].Message())
	}
	if st, _ := readCPUState(t, n, cpuManagerState); st.DefaultCPUSet != "0,2" {
		t.Errorf("defaultCpuSet %q on CPUs 0-2 with 1 held, want 0,2", st.DefaultCPUSet)
	}
	podStill(t, "after systemctl restart kubelet")
}

// prestartStoppedChanged: the kubelet stopped, a CPU taken offline, the
// kubelet started: Ready on 2 CPUs, the pod's CPU kept.
func (s *installed) prestartStoppedChanged(t *testing.T, podStill func(*testing.T, string)) {
	n, cs := s.n, s.admin
	guestSh(t, n, "systemctl stop kubelet && echo 0 >/sys/devices/system/cpu/cpu2/online")
	r0 := guestNow(t, n)
	guestSh(t, n, "systemctl start kubelet")
	waitNode(t, cs, n.Name(), "Ready by the kubelet started on 2 CPUs", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, r0) && nd.Status.Capacity.Cpu().Value() == 2
	})
	s.timing("d kubelet stopped, cpu2 offline, started: Ready after %v", guestNow(t, n).Sub(r0).Round(time.Millisecond))
	onePrestartRun(t, n, "stopped, cpu2 offline, started", r0, "rewritten")
	if st, _ := readCPUState(t, n, cpuManagerState); st.DefaultCPUSet != "0" {
		t.Errorf("defaultCpuSet %q on CPUs 0-1 with 1 held, want 0", st.DefaultCPUSet)
	}
	podStill(t, "after the start on 2 CPUs")
}

// prestartBroken: a pre-start that cannot do its work never changes what
// the kubelet does. Its binary failing (/bin/false in its place) on an
// unchanged machine: the kubelet starts. A corrupt CPU manager checkpoint: the pre-start
// leaves it byte for byte, and the kubelet refuses it as the stock kubelet
// does; with the checkpoint put back it starts.
func (s *installed) prestartBroken(t *testing.T, podStill func(*testing.T, string)) {
	n, cs := s.n, s.admin
	guestSh(t, n, "cp -a /usr/bin/node-resized /root/node-resized.real && ln -sf /bin/false /usr/bin/node-resized")
	r0 := guestNow(t, n)
	guestSh(t, n, "systemctl restart kubelet")
	since := newKubeletSince(t, n)
	waitNode(t, cs, n.Name(), "Ready by the kubelet whose pre-start failed", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, since) && nd.Status.Capacity.Cpu().Value() == 2
	})
	guestSh(t, n, "mv /root/node-resized.real /usr/bin/node-resized")
	s.timing("d pre-start failing: the kubelet Ready after %v", guestNow(t, n).Sub(r0).Round(time.Millisecond))
	// What systemd kept of the run is logged, not asserted: it said
	// status=203 for a script written into the guest's overlay and
	// status=0 for /bin/false linked in place (each one run); the kubelet
	// started both times, and the pre-start logged nothing.
	t.Logf("pre-start failing: kubelet.service's ExecStartPre: %s", guestSh(t, n, "systemctl show kubelet -p ExecStartPre --value"))
	if runs := prestartRuns(t, n, r0); len(runs) != 0 {
		t.Errorf("a failing pre-start logged %d records", len(runs))
	}
	podStill(t, "after a failing pre-start")

	good := guestSh(t, n, "cat "+cpuManagerState)
	guestSh(t, n, "systemctl stop kubelet && cp -a "+cpuManagerState+" /root/cpu_manager_state.good && echo '{garbage' >"+cpuManagerState)
	r1 := guestNow(t, n)
	guestSh(t, n, "systemctl start kubelet || true")
	var refused []JournalEntry
	for deadline := time.Now().Add(time.Minute); len(refused) == 0; time.Sleep(500 * time.Millisecond) {
		refused = kubeletLog(t, n, "could not restore state from checkpoint", r1)
		if len(refused) == 0 && time.Now().After(deadline) {
			t.Fatalf("the kubelet did not refuse a corrupt checkpoint within a minute: %s", guestSh(t, n, "systemctl show kubelet -p ActiveState -p SubState | tr '\\n' ' '"))
		}
	}
	t.Logf("corrupt checkpoint: the kubelet %v after its start: %s", refused[0].Time().Sub(r1).Round(time.Millisecond), refused[0].Message())
	run := onePrestartRun(t, n, "corrupt checkpoint", r1, "failed")
	t.Logf("corrupt checkpoint: the pre-start: %s", journalFields(run))
	if got := guestSh(t, n, "cat "+cpuManagerState); got != "{garbage" {
		t.Errorf("the pre-start changed a corrupt checkpoint: %q", got)
	}
	guestSh(t, n, "mv /root/cpu_manager_state.good "+cpuManagerState)
	guestSh(t, n, "systemctl restart kubelet")
	since2 := newKubeletSince(t, n)
	waitNode(t, cs, n.Name(), "Ready by the kubelet with its checkpoint put back", 2*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, since2) && nd.Status.Capacity.Cpu().Value() == 2
	})
	if got := guestSh(t, n, "cat "+cpuManagerState); got != good {
		t.Logf("the kubelet rewrote its checkpoint: %s (was %s)", got, good)
	}
	podStill(t, "after the corrupt checkpoint was put back")
}
