package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// fakeRestarter records restarts; each waits until the test releases it
// with a result.
type fakeRestarter struct {
	check error
	// log, when set, records each Check as "Check".
	log     *orderLog
	mu      sync.Mutex
	calls   int
	results chan restartResult
}

type restartResult struct {
	res string
	err error
}

func (f *fakeRestarter) Check(*topology.Snapshot) error {
	if f.log != nil {
		f.log.add("Check")
	}
	return f.check
}

func (f *fakeRestarter) Restart(ctx context.Context, _ *topology.Snapshot) (string, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	select {
	case r := <-f.results:
		return r.res, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (f *fakeRestarter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// rig steps an agent's decisions by hand on a fake clock.
type rig struct {
	t       *testing.T
	ctx     context.Context
	a       *Agent
	clock   *clocktesting.FakeClock
	relay   *fakeRelay
	r       *fakeRestarter
	m       *metrics.Metrics
	kubelet types.KubeletView
}

var k0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newRig starts a node with cpus CPUs whose kubelet agrees; cfg adjusts
// the agent's configuration.
func newRig(t *testing.T, cpus int, cfg func(*Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rg := &rig{t: t, ctx: ctx, clock: clocktesting.NewFakeClock(k0), relay: &fakeRelay{},
		r: &fakeRestarter{results: make(chan restartResult, 1)}, m: metrics.New()}
	c := Config{Clock: rg.clock, Metrics: rg.m, Restarter: rg.r,
		Policy: decide.Policy{SettleDelay: 10 * time.Second, RestartInterval: 2 * time.Minute, RestartTimeout: 2 * time.Minute}}
	if cfg != nil {
		cfg(&c)
	}
	rg.a = New(c, rg.relay)
	t.Cleanup(func() {
		cancel()
		select { // a restart still running ends
		case rg.r.results <- restartResult{res: "done"}:
		default:
		}
		rg.a.restarts.Wait()
	})
	rg.a.OnNode(types.NodeView{})
	rg.kubelet = types.KubeletView{Unit: "kubelet.service", LoadState: "loaded", ActiveState: "active", SubState: "running",
		MainPID: 100, Ready: true, Capacity: resources.List{resources.CPU: int64(cpus) * 1000, resources.Memory: 16 << 30}}
	rg.hardware(cpus)
	rg.expect(types.ReasonAccepted, "")
	return rg
}

// hardware gives the agent a machine with cpus CPUs; the kubelet's view
// is stale when it differs.
func (rg *rig) hardware(cpus int) {
	snap := machine(cpus)
	rg.a.OnChange(monitor.Change{Time: rg.clock.Now(), Capacity: snap.Capacity()}, snap)
	rg.kubelet.Stale = rg.kubelet.Capacity[resources.CPU] != int64(cpus)*1000
	rg.a.OnKubelet(rg.kubelet)
}

// at moves the clock to k0+d and takes a decision.
func (rg *rig) at(d time.Duration) {
	rg.t.Helper()
	rg.clock.SetTime(k0.Add(d))
	rg.a.pass(rg.ctx)
}

func (rg *rig) expect(reason types.Reason, message string) {
	rg.t.Helper()
	rg.a.pass(rg.ctx)
	st := rg.a.Status()
	if st.Condition.Reason != reason || !strings.Contains(st.Condition.Message, message) {
		rg.t.Fatalf("condition %s (%s), want %s with %q", st.Condition.Reason, st.Condition.Message, reason, message)
	}
}

func (rg *rig) restarts(want int) {
	rg.t.Helper()
	if got := rg.r.count(); got != want {
		rg.t.Fatalf("%d restarts, want %d", got, want)
	}
}

// finish ends the running restart and waits for the agent to take it.
func (rg *rig) finish(res string, err error) {
	rg.t.Helper()
	rg.r.results <- restartResult{res, err}
	waitUntil(rg.t, func() bool {
		k := rg.a.Status().Kubelet
		rg.a.mu.Lock()
		defer rg.a.mu.Unlock()
		return !rg.a.restarting && k != nil
	})
}

func (rg *rig) counted(result string, want float64) {
	rg.t.Helper()
	if got := testutil.ToFloat64(rg.m.KubeletRestarts.WithLabelValues(result)); got != want {
		rg.t.Fatalf("node_resized_kubelet_restarts_total{result=%q} = %v, want %v", result, got, want)
	}
}

// TestKubeletRestartAfterSettle: a change settles, the kubelet is
// restarted once, off the decision goroutine, and the change is Accepted
// once the kubelet is back Ready with it.
func TestKubeletRestartAfterSettle(t *testing.T) {
	rg := newRig(t, 4, nil)
	rg.hardware(8)
	rg.at(0)
	rg.expect(types.ReasonInProgress, "waiting before restarting")
	if testutil.ToFloat64(rg.m.KubeletStale) != 1 {
		t.Fatal("node_resized_kubelet_stale is not 1 for a stale kubelet")
	}
	rg.at(9 * time.Second)
	rg.restarts(0)
	rg.at(10 * time.Second)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
	rg.expect(types.ReasonInProgress, "restarting the kubelet")
	// Passes while it runs ask for no second one.
	rg.at(20 * time.Second)
	rg.at(30 * time.Second)
	rg.restarts(1)
	rg.finish("done", nil)
	rg.counted("done", 1)
	// Back, not yet Ready: still in progress; then Ready with the target.
	rg.kubelet.MainPID, rg.kubelet.Ready = 200, false
	rg.kubelet.Capacity = resources.List{resources.CPU: 8000, resources.Memory: 16 << 30}
	rg.hardware(8)
	rg.at(40 * time.Second)
	rg.expect(types.ReasonInProgress, "waiting for the Node to come back Ready")
	rg.kubelet.Ready = true
	rg.a.OnKubelet(rg.kubelet)
	rg.at(45 * time.Second)
	rg.expect(types.ReasonAccepted, "")
	rg.restarts(1)
	if st := rg.a.Status().Kubelet; st == nil || st.LastRestart == nil || st.LastRestart.Result != "done" || st.Stale {
		t.Fatalf("kubelet status %+v", st)
	}
}

// TestKubeletNotRestarted: each reason not to restart keeps the kubelet
// as it is, and the condition and node_resized_kubelet_restart_needed say
// a restart is needed.
func TestKubeletNotRestarted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     func(*Config)
		kubelet func(*types.KubeletView)
		check   error
		message string
	}{
		{name: "turned off", cfg: func(c *Config) { c.KubeletRestart = RestartNever }, message: "--kubelet-restart=never"},
		{name: "unit inactive", kubelet: func(v *types.KubeletView) { v.ActiveState, v.SubState = "failed", "failed" },
			message: `kubelet.service is not active (ActiveState "failed"`},
		{name: "checkpoint infeasible", check: errors.New("reserved CPUs 0 are not all online; bring them online"),
			message: "checkpoint cannot be made safe: reserved CPUs 0 are not all online"},
		{name: "no restarter", cfg: func(c *Config) { c.Restarter = nil }, message: "cannot restart it here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig(t, 4, tc.cfg)
			rg.r.check = tc.check
			if tc.kubelet != nil {
				tc.kubelet(&rg.kubelet)
			}
			rg.hardware(8)
			for _, d := range []time.Duration{0, 10 * time.Second, time.Hour} {
				rg.at(d)
				rg.expect(types.ReasonAccepted, tc.message)
			}
			if !strings.Contains(rg.a.Status().Condition.Message, "needs a restart") {
				t.Fatalf("message %q does not say a restart is needed", rg.a.Status().Condition.Message)
			}
			rg.restarts(0)
			if testutil.ToFloat64(rg.m.KubeletRestartNeeded) != 1 {
				t.Fatal("node_resized_kubelet_restart_needed is not 1")
			}
			if st := rg.a.Status().Kubelet; st == nil || !strings.Contains(st.RestartBlocked, tc.message) {
				t.Fatalf("kubelet status %+v", st)
			}
		})
	}
}

// holdingEvictor starts eviction passes that report only when told.
type holdingEvictor struct {
	mu     sync.Mutex
	report func(types.EvictionReport)
	gen    int64
}

func (e *holdingEvictor) Start(_ context.Context, x decide.Evict, _ []int, report func(types.EvictionReport)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.report, e.gen = report, x.Generation
}

func (e *holdingEvictor) done() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.report(types.EvictionReport{Generation: e.gen, Done: true})
}

// TestKubeletNotRestartedWhileEvicting: a loss's eviction pass runs to its
// end before the kubelet is restarted.
func TestKubeletNotRestartedWhileEvicting(t *testing.T) {
	ev := &holdingEvictor{}
	rg := newRig(t, 8, func(c *Config) { c.Evictor = ev })
	rg.hardware(6)
	rg.at(0)
	for _, d := range []time.Duration{10 * time.Second, time.Hour} {
		rg.at(d)
		rg.expect(types.ReasonInProgress, "evicting")
		if st := rg.a.Status().Kubelet; st == nil || st.RestartBlocked != "an eviction pass is still running" {
			t.Fatalf("kubelet status %+v", st)
		}
	}
	rg.restarts(0)
	ev.done()
	rg.at(time.Hour + time.Second)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
}

// TestKubeletRestartJobFailed: a failed job is counted, reported with a
// Warning event, and not retried.
func TestKubeletRestartJobFailed(t *testing.T) {
	rg := newRig(t, 4, nil)
	rg.hardware(8)
	rg.at(0)
	rg.at(10 * time.Second)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
	rg.finish("failed", nil)
	rg.counted("failed", 1)
	rg.kubelet.ActiveState, rg.kubelet.Ready = "failed", false
	rg.a.OnKubelet(rg.kubelet)
	rg.at(15 * time.Second)
	rg.expect(types.ReasonInProgress, "ended \"failed\"")
	if reasons := rg.relay.eventReasons(); !contains(reasons, types.EventKubeletRestartFailed) {
		t.Fatalf("events %v, want %s", reasons, types.EventKubeletRestartFailed)
	}
	// The unit comes back by itself (Restart=always), still stale: no
	// second restart, however long.
	rg.kubelet.ActiveState = "active"
	rg.a.OnKubelet(rg.kubelet)
	for _, d := range []time.Duration{time.Minute, 10 * time.Minute, time.Hour} {
		rg.at(d)
	}
	rg.restarts(1)
	rg.expect(types.ReasonInProgress, "does not restart it again")
	if n := len(rg.relay.eventReasons()); n == 0 {
		t.Fatal("no events")
	}
	var failures int
	for _, r := range rg.relay.eventReasons() {
		if r == types.EventKubeletRestartFailed {
			failures++
		}
	}
	if failures != 1 {
		t.Fatalf("%d KubeletRestartFailed events, want 1", failures)
	}
}

// TestKubeletCheckpointRolledBack: a restart that ends in a checkpoint
// rollback is a failed restart (not retried), with its own Warning event
// and metric.
func TestKubeletCheckpointRolledBack(t *testing.T) {
	rg := newRig(t, 4, nil)
	rg.hardware(8)
	rg.at(0)
	rg.at(10 * time.Second)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
	rb := &types.CheckpointRollback{Files: []string{"/var/lib/kubelet/memory_manager_state"}, Result: "done",
		Journal: `E1201 20:01:02.345900     901 kubelet.go:1850] "Failed to start ContainerManager" err="start memory manager error: could not restore state from checkpoint: checkpoint is corrupted"`}
	rg.finish("done", fmt.Errorf("restart kubelet.service: %w", rb))
	rg.counted("done", 1)
	if got := testutil.ToFloat64(rg.m.KubeletCheckpointRollbacks); got != 1 {
		t.Fatalf("node_resized_kubelet_checkpoint_rollbacks_total = %v, want 1", got)
	}
	rg.kubelet.MainPID, rg.kubelet.Ready = 300, false
	rg.a.OnKubelet(rg.kubelet)
	rg.at(15 * time.Second)
	rg.expect(types.ReasonInProgress, "restored /var/lib/kubelet/memory_manager_state from the backups")
	var rolled, failed int
	for _, e := range rg.relay.events {
		switch e.Reason {
		case types.EventKubeletCheckpointRolledBack:
			rolled++
			if e.Type != types.EventWarning || !strings.Contains(e.Message, "memory_manager_state") || !strings.Contains(e.Message, "checkpoint is corrupted") {
				t.Errorf("event %+v: want a Warning naming the file and the kubelet's line", e)
			}
		case types.EventKubeletRestartFailed:
			failed++
		}
	}
	if rolled != 1 || failed != 1 {
		t.Fatalf("%d %s and %d %s events, want 1 each", rolled, types.EventKubeletCheckpointRolledBack, failed, types.EventKubeletRestartFailed)
	}
	for _, d := range []time.Duration{time.Minute, 10 * time.Minute} {
		rg.at(d)
	}
	rg.restarts(1)
}

// Every result a restart can be counted under (each of systemd's job
// results, and "error") exists at 0 from the start, so that increase()
// and rate() see the first restart of each kind.
func TestKubeletRestartResultsAtZero(t *testing.T) {
	results := []systemd.JobResult{systemd.JobDone, systemd.JobCanceled, systemd.JobTimeout, systemd.JobFailed, systemd.JobDependency, systemd.JobSkipped, "error"}
	for _, r := range results {
		if !slices.Contains(metrics.KubeletRestartResults, string(r)) {
			t.Errorf("metrics.KubeletRestartResults lacks %q", r)
		}
	}
	m := metrics.New()
	if got := testutil.CollectAndCount(m.KubeletRestarts); got != len(metrics.KubeletRestartResults) {
		t.Errorf("%d node_resized_kubelet_restarts_total series at start, want %d", got, len(metrics.KubeletRestartResults))
	}
}

// A restart due while the Node status patch is still under way waits for
// its answer (Config.StatusSettled), so that the Node shows the capacity
// before the kubelet goes down; a patch that never answers holds it
// StatusBeforeRestart at most.
func TestKubeletRestartWaitsForTheStatusPatch(t *testing.T) {
	var mu sync.Mutex
	var settled chan struct{}
	rg := newRig(t, 4, func(c *Config) {
		c.StatusSettled = func() <-chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			return settled
		}
	})
	mu.Lock()
	settled = make(chan struct{})
	first := settled
	mu.Unlock()
	rg.hardware(8)
	rg.at(0)
	rg.at(10 * time.Second) // the settle delay is over: the restart is due
	waitUntil(t, func() bool { rg.a.mu.Lock(); defer rg.a.mu.Unlock(); return rg.a.restarting })
	time.Sleep(50 * time.Millisecond)
	rg.restarts(0) // waiting for the patch
	close(first)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
	rg.finish("done", nil)

}

// A patch that never answers holds the restart StatusBeforeRestart, then
// it goes ahead.
func TestKubeletRestartWaitsForTheStatusPatchBounded(t *testing.T) {
	never := make(chan struct{})
	rg := newRig(t, 4, func(c *Config) {
		c.StatusSettled = func() <-chan struct{} { return never }
	})
	rg.hardware(8)
	rg.at(0)
	rg.at(10 * time.Second)
	waitUntil(t, func() bool { rg.a.mu.Lock(); defer rg.a.mu.Unlock(); return rg.a.restarting })
	time.Sleep(50 * time.Millisecond)
	rg.restarts(0)
	waitUntil(t, func() bool { return rg.clock.HasWaiters() })
	rg.clock.Step(StatusBeforeRestart)
	waitUntil(t, func() bool { return rg.r.count() == 1 })
}
