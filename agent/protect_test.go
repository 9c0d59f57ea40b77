package agent

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// TestLossClampedBeforeCheckpointsRead: a loss under a kubelet that is
// now stale goes from the model to the kubepods limits before either of
// the kubelet's checkpoints is read (Restarter.Check reads both). The
// check is still made, after the clamp, and its verdict shows in the
// status as it did.
func TestLossClampedBeforeCheckpointsRead(t *testing.T) {
	ol := &orderLog{}
	rg := newRig(t, 8, func(c *Config) { c.Enforcer = orderEnforcer{ol} })
	rg.r.log = ol
	rg.r.check = errors.New("reserved CPUs 0 are not all online")
	ol.mu.Lock()
	ol.calls = nil
	ol.mu.Unlock()

	rg.hardware(6) // a loss; the kubelet's view (8 CPUs) is stale
	rg.at(0)

	ol.mu.Lock()
	calls := slices.Clone(ol.calls)
	ol.mu.Unlock()
	clamp := slices.Index(calls, string(cgroup.KindClamp))
	if clamp < 0 {
		t.Fatalf("calls %v: no clamp", calls)
	}
	if check := slices.Index(calls, "Check"); check >= 0 && check < clamp {
		t.Fatalf("calls %v: a checkpoint was read before the clamp was written", calls)
	}
	if st := rg.a.Status().Kubelet; st == nil || !strings.Contains(st.RestartBlocked, "checkpoint cannot be made safe") {
		t.Fatalf("kubelet status %+v: the checkpoints' verdict is missing", st)
	}
}

// TestRestartWaitsForTheCheckpoints: a decision that may restart the
// kubelet is taken with its checkpoints read, also when the kubelet's view
// has not been judged against the new machine yet (the watcher is told of
// a change after the agent): the kubelet is never restarted into
// checkpoints that cannot be made safe.
func TestRestartWaitsForTheCheckpoints(t *testing.T) {
	ol := &orderLog{}
	rg := newRig(t, 4, nil)
	rg.r.log = ol
	rg.r.check = errors.New("reserved CPUs 0 are not all online")
	rg.hardware(8)
	rg.kubelet.Stale = false // its view of 4 CPUs, not judged against 8 yet
	rg.a.OnKubelet(rg.kubelet)
	for _, d := range []time.Duration{0, 10 * time.Second, time.Hour} {
		rg.at(d)
		rg.expect(types.ReasonAccepted, "checkpoint cannot be made safe: reserved CPUs 0 are not all online")
	}
	rg.restarts(0)
	ol.mu.Lock()
	defer ol.mu.Unlock()
	if !slices.Contains(ol.calls, "Check") {
		t.Fatalf("calls %v: the checkpoints were never read", ol.calls)
	}
}

// flakyEnforcer fails its next fail Applies, then succeeds; it records
// every request and reads back current as the kubepods limits.
type flakyEnforcer struct {
	mu      sync.Mutex
	fail    int
	reqs    []cgroup.Request
	current decide.CgroupLimits
}

func (e *flakyEnforcer) Apply(_ context.Context, r cgroup.Request, _ topology.CPUSet) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reqs = append(e.reqs, r)
	if e.fail > 0 {
		e.fail--
		return errors.New("set memory.max: device or resource busy")
	}
	return nil
}

func (e *flakyEnforcer) Current() (decide.CgroupLimits, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current, nil
}

func (e *flakyEnforcer) kinds() []cgroup.Kind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []cgroup.Kind
	for _, r := range e.reqs {
		out = append(out, r.Kind)
	}
	return out
}

// TestFailedClampIsRetried: a clamp whose write fails is not recorded as
// landed: the state file says so, the status and
// node_resized_kubepods_limits_failing say so, and the agent retries it
// after a backoff (1 s, then 2 s) until a write lands, which clears them.
// The rest of the loss (the patch, the eviction) is not held back.
func TestFailedClampIsRetried(t *testing.T) {
	enf := &flakyEnforcer{}
	path := filepath.Join(t.TempDir(), "state.json")
	rg := newRig(t, 4, func(c *Config) { c.Enforcer, c.StatePath = enf, path })
	failing := func() float64 { return testutil.ToFloat64(rg.m.KubepodsLimitsFailing) }
	saved := func() decide.State {
		t.Helper()
		st, err := LoadState(path, rg.clock.Now())
		if err != nil || st == nil {
			t.Fatalf("state file: %v, %v", st, err)
		}
		return *st
	}
	pass := func(d time.Duration) time.Duration {
		rg.clock.SetTime(k0.Add(d))
		return rg.a.pass(rg.ctx)
	}

	enf.mu.Lock()
	enf.fail, enf.reqs = 2, nil
	enf.mu.Unlock()
	rg.hardware(2) // a loss
	if after := pass(time.Minute); after != time.Second {
		t.Errorf("after the failed clamp: next pass in %v, want 1s", after)
	}
	if st := saved(); st.LimitsFailed == "" || st.LimitsFailures != 1 || st.Applied[resources.CPU] != 2000 {
		t.Fatalf("state file after the failed clamp: limitsFailed %q, failures %d, applied %v", st.LimitsFailed, st.LimitsFailures, st.Applied)
	}
	if st := rg.a.Status(); !strings.Contains(st.LimitsFailed, "device or resource busy") || failing() != 1 {
		t.Fatalf("status limitsFailed %q, kubepods_limits_failing %v: the failure is not shown", st.LimitsFailed, failing())
	}
	if after := pass(time.Minute + 500*time.Millisecond); after != 500*time.Millisecond || len(enf.kinds()) != 1 {
		t.Errorf("half-way through the backoff: writes %v, next pass in %v; want none, 500ms", enf.kinds(), after)
	}
	// (The pass after the clamp's publishes it: the pods were looked at.)
	if s, _ := rg.relay.last(); s.Capacity[resources.CPU] != 2000 {
		t.Errorf("last status %v: the patch was held back by the failed clamp", s.Capacity)
	}
	if after := pass(time.Minute + time.Second); after != 2*time.Second {
		t.Errorf("after the failed retry: next pass in %v, want 2s", after)
	}
	if st := saved(); st.LimitsFailures != 2 {
		t.Fatalf("state file after the failed retry: %d failures, want 2", st.LimitsFailures)
	}
	pass(time.Minute + 3*time.Second)
	if got, want := enf.kinds(), []cgroup.Kind{cgroup.KindClamp, cgroup.KindReassert, cgroup.KindReassert}; !slices.Equal(got, want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	if st := saved(); st.LimitsFailed != "" || st.LimitsFailures != 0 {
		t.Fatalf("state file after the write landed: limitsFailed %q, failures %d", st.LimitsFailed, st.LimitsFailures)
	}
	if st := rg.a.Status(); st.LimitsFailed != "" || failing() != 0 {
		t.Fatalf("status limitsFailed %q, kubepods_limits_failing %v after the write landed", st.LimitsFailed, failing())
	}
	enf.mu.Lock()
	last := enf.reqs[len(enf.reqs)-1]
	first := enf.reqs[0]
	enf.mu.Unlock()
	if !reflect.DeepEqual(last.Limits, first.Limits) {
		t.Errorf("retried limits %+v, want the clamp's %+v", last.Limits, first.Limits)
	}
	pass(time.Hour)
	if n := len(enf.kinds()); n != 3 {
		t.Errorf("%d writes once the clamp landed, want no more", n)
	}
}

// TestReassertAtStart: a daemon that resumes from a state with a clamp
// to 2 CPUs reads the kubepods limits on its first pass, finds cpu.weight
// written for 4 and writes the recorded limits again; only on that pass.
func TestReassertAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	two := machine(2).Capacity()
	st := decide.State{Version: decide.StateVersion, Applied: two, Physical: two, Generation: 3,
		Outcome: types.ReasonAccepted, Condition: types.Condition{Status: types.StatusTrue, Reason: types.ReasonAccepted}}
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	want := decide.KubepodsLimits(two, decide.Reservations{})
	enf := &flakyEnforcer{current: decide.CgroupLimits{MemoryMax: want.MemoryMax,
		CPUWeight: decide.KubepodsLimits(machine(4).Capacity(), decide.Reservations{}).CPUWeight}}
	rg := newRig(t, 2, func(c *Config) { c.Enforcer, c.StatePath = enf, path })
	rg.at(time.Minute)
	enf.mu.Lock()
	reqs := slices.Clone(enf.reqs)
	enf.mu.Unlock()
	if len(reqs) != 1 || reqs[0].Kind != cgroup.KindReassert || reqs[0].Generation != 3 || reqs[0].Limits.CPUWeight != want.CPUWeight {
		t.Fatalf("writes %+v, want one reassert of generation 3 with cpu.weight %d", reqs, want.CPUWeight)
	}
	if evs := rg.relay.eventReasons(); len(evs) != 0 {
		t.Errorf("events %v: a reassert is no change", evs)
	}
}
