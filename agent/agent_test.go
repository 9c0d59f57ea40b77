package agent

import (
	"math"

	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/node-resized/node-resized/metrics"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// fakeRelay records what the agent publishes.
type fakeRelay struct {
	mu       sync.Mutex
	statuses []types.NodeStatus
	events   []decide.EmitEvent
}

func (f *fakeRelay) Publish(s types.NodeStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses = append(f.statuses, s)
}

func (f *fakeRelay) Event(t types.EventType, reason, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, decide.EmitEvent{Type: t, Reason: reason, Message: msg})
}

func (f *fakeRelay) last() (types.NodeStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.statuses) == 0 {
		return types.NodeStatus{}, false
	}
	return f.statuses[len(f.statuses)-1], true
}

func (f *fakeRelay) eventReasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		out = append(out, e.Reason)
	}
	return out
}

func machine(cpus int) *topology.Snapshot {
	node := topology.Node{ID: 0, MemTotal: 16 << 30}
	var online topology.CPUSet
	for i := range cpus {
		node.CPUs = append(node.CPUs, topology.CPU{ID: i})
		online = append(online, i)
	}
	return &topology.Snapshot{CPUs: topology.CPUs{Online: online}, Nodes: []topology.Node{node}, MemTotal: 16 << 30}
}

func conf(kv ...string) types.NodeView {
	raw := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		raw[kv[i]] = kv[i+1]
	}
	return types.NodeView{Configured: types.Configured{Present: true, Raw: raw}, Source: types.SourceAnnotation}
}

type run struct {
	t      *testing.T
	a      *Agent
	relay  *fakeRelay
	cancel func()
	done   chan error
}

func startAgent(t *testing.T, statePath string) *run {
	t.Helper()
	r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
	r.a = New(Config{StatePath: statePath}, r.relay)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *run) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// settle waits until the published condition has the reason.
func (r *run) settle(reason types.Reason, cpu int64) types.NodeStatus {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if s, ok := r.relay.last(); ok && s.Condition.Reason == reason && s.Capacity["cpu"] == cpu*1000 {
			return s
		}
	}
	s, _ := r.relay.last()
	r.t.Fatalf("condition %s/%s cpu %d, want %s with cpu %d", s.Condition.Status, s.Condition.Reason, s.Capacity["cpu"]/1000, reason, cpu)
	return types.NodeStatus{}
}

func hw(r *run, cpus int, latency time.Duration) {
	snap := machine(cpus)
	c := monitor.Change{Time: time.Now(), LatencySeconds: latency.Seconds(), Capacity: snap.Capacity()}
	r.a.OnChange(c, snap)
}

// A hardware change that changes nothing on the Node is decided on all the
// same: the next change's status carries its own uevent's time, not the
// earlier one's.
func TestSinceIsTheChangeThePatchCarries(t *testing.T) {
	r := startAgent(t, filepath.Join(t.TempDir(), "state.json"))
	hw(r, 4, 0)
	r.settle(types.ReasonAccepted, 4)
	n := r.a.Status().Decisions
	hw(r, 4, time.Hour) // the same machine, from an uevent an hour ago
	for deadline := time.Now().Add(10 * time.Second); r.a.Status().Decisions == n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pass for the change")
		}
	}
	hw(r, 2, 3*time.Millisecond)
	r.settle(types.ReasonAccepted, 2)
	r.relay.mu.Lock()
	defer r.relay.mu.Unlock()
	for _, s := range r.relay.statuses {
		if s.Capacity["cpu"] == 2000 {
			if s.Since.IsZero() || time.Since(s.Since) > time.Minute {
				t.Errorf("the first status with 2 CPUs carries the hardware-event time %v (%v ago), want the loss's own", s.Since, time.Since(s.Since))
			}
			return
		}
	}
}

func TestPathBClampSurvivesRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	r := startAgent(t, state)
	r.a.OnNode(conf("cpu", "4"))
	hw(r, 4, 0)
	r.waitPublished(r.settle(types.ReasonAccepted, 4))

	// The hypervisor takes two CPUs away.
	hw(r, 2, 3*time.Millisecond)
	r.waitPublished(r.settle(types.ReasonEmergencyReduced, 2))
	r.waitCondition(types.ReasonEmergencyReduced)
	// The first status published for the loss carries the time of the
	// hardware event (the relay keeps the earliest one until a patch lands).
	r.relay.mu.Lock()
	var since time.Time
	for _, s := range r.relay.statuses {
		if s.Capacity["cpu"] == 2000 && !s.Since.IsZero() {
			since = s.Since
			break
		}
	}
	r.relay.mu.Unlock()
	if since.IsZero() || time.Since(since) > time.Minute {
		t.Errorf("no status for the loss carries the hardware-event time")
	}
	if reasons := r.relay.eventReasons(); !contains(reasons, types.EventEmergencyCapacityReduced) {
		t.Errorf("events %v, want a %s warning", reasons, types.EventEmergencyCapacityReduced)
	}
	r.stop()

	// The daemon restarts while the API server is away: it must remember
	// the clamp and the spec it refused, from the state file alone.
	r2 := startAgent(t, state)
	if got := r2.a.State().Condition.Reason; got != types.ReasonEmergencyReduced {
		t.Fatalf("state after restart: %s, want EmergencyReduced", got)
	}
	r2.waitCondition(types.ReasonEmergencyReduced) // from the state file, before any decision
	hw(r2, 2, 0)
	r2.settle(types.ReasonEmergencyReduced, 2)
	if reasons := r2.relay.eventReasons(); contains(reasons, types.EventEmergencyCapacityReduced) {
		t.Errorf("the restart repeated the emergency warning: %v", reasons)
	}
	// The administrator lowers the spec to what is there.
	r2.a.OnNode(conf("cpu", "2"))
	r2.settle(types.ReasonAccepted, 2)
	r2.waitCondition(types.ReasonAccepted)
}

// waitPublished waits until node_resized_target_capacity and
// node_resized_allocatable say the cpu and memory of the status s.
func (r *run) waitPublished(s types.NodeStatus) {
	r.t.Helper()
	var got [4]float64
	var want [4]float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		i := 0
		for _, name := range []string{"cpu", "memory"} {
			unit := string(resources.UnitOf(name))
			got[i] = testutil.ToFloat64(r.a.m.TargetCapacity.WithLabelValues(name, unit))
			want[i] = resources.Value(name, s.Capacity[name])
			got[i+1] = testutil.ToFloat64(r.a.m.Allocatable.WithLabelValues(name, unit))
			want[i+1] = resources.Value(name, s.Allocatable[name])
			i += 2
		}
		if got == want && want[0] > 0 && want[1] > 0 {
			return
		}
	}
	r.t.Fatalf("target capacity and allocatable (cpu, memory) %v, want %v", got, want)
}

// waitCondition waits until node_resized_capacity_condition is 1 for
// reason and 0 for every other reason.
func (r *run) waitCondition(reason types.Reason) {
	r.t.Helper()
	var got map[types.Reason]float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = map[types.Reason]float64{}
		ok := true
		for _, x := range types.Reasons {
			got[x] = testutil.ToFloat64(r.a.m.CapacityCondition.WithLabelValues(string(x)))
			if (x == reason) != (got[x] == 1) {
				ok = false
			}
		}
		if ok {
			return
		}
	}
	r.t.Fatalf("node_resized_capacity_condition %v, want 1 for %s only", got, reason)
}

func TestPathA1InfeasibleThenHardwareArrives(t *testing.T) {
	r := startAgent(t, "")
	r.a.OnNode(conf("cpu", "4"))
	hw(r, 2, 0)
	r.settle(types.ReasonInfeasible, 2)
	hw(r, 4, time.Millisecond)
	r.settle(types.ReasonAccepted, 4)
}

func TestPathA2WithEvictionOff(t *testing.T) {
	r := startAgent(t, "")
	r.a.OnNode(conf("cpu", "4"))
	hw(r, 4, 0)
	r.settle(types.ReasonAccepted, 4)
	r.a.OnNode(conf("cpu", "2"))
	// Eviction is off, so the downscale completes on its own.
	r.settle(types.ReasonAccepted, 2)
}

func TestGarbageSpecIsInfeasible(t *testing.T) {
	r := startAgent(t, "")
	hw(r, 4, 0)
	r.a.OnNode(types.NodeView{Configured: types.Configured{Present: true, Invalid: "annotation is not a JSON object"}})
	s := r.settle(types.ReasonInfeasible, 4)
	if !strings.Contains(s.Condition.Message, "not a JSON object") {
		t.Errorf("message %q does not say what is wrong", s.Condition.Message)
	}
}

func TestCorruptStateFileIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	if err := os.WriteFile(state, []byte("{torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startAgent(t, state)
	if st := r.a.State(); st.Generation != 0 || st.Condition.Reason != "" {
		t.Errorf("state from a corrupt file: %+v", st)
	}
	aside, _ := filepath.Glob(state + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", aside)
	}
	if b, _ := os.ReadFile(aside[0]); string(b) != "{torn" {
		t.Errorf("the kept file changed: %q", b)
	}
	hw(r, 2, 0)
	r.settle(types.ReasonAccepted, 2)
	if _, err := LoadState(state, time.Now()); err != nil {
		t.Errorf("the new state file does not load: %v", err)
	}
}

func TestSaveStateIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "state.json")
	st := decide.State{Version: decide.StateVersion, Generation: 7, Spec: `{"cpu":"2"}`}
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(path, time.Now())
	if err != nil || got == nil || got.Generation != 7 || got.Spec != st.Spec {
		t.Fatalf("LoadState = %+v, %v", got, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "sub", "*.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if got, err := LoadState(filepath.Join(dir, "absent.json"), time.Now()); got != nil || err != nil {
		t.Errorf("LoadState of a missing file = %v, %v; want nil, nil", got, err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// orderLog records the order in which the agent's actuators are called.
type orderLog struct {
	mu    sync.Mutex
	calls []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, s)
}

type orderEnforcer struct{ log *orderLog }

func (e orderEnforcer) Apply(_ context.Context, r cgroup.Request, _ topology.CPUSet) error {
	e.log.add(string(r.Kind))
	return nil
}

type orderEvictor struct{ log *orderLog }

// Start records the call and reports what the evictor's first look finds:
// pods have to go.
func (e orderEvictor) Start(_ context.Context, ev decide.Evict, _ []int, report func(types.EvictionReport)) {
	e.log.add("Evict")
	go report(types.EvictionReport{Generation: ev.Generation})
}

type orderRelay struct {
	fakeRelay
	log *orderLog
}

func (r *orderRelay) Publish(s types.NodeStatus) {
	r.log.add("Publish/" + string(s.Condition.Reason))
	r.fakeRelay.Publish(s)
}

func (r *orderRelay) Event(t types.EventType, reason, msg string) {
	r.log.add("Event/" + reason)
	r.fakeRelay.Event(t, reason, msg)
}

func TestClampComesBeforeAnyAPICall(t *testing.T) {
	ol := &orderLog{}
	relay := &orderRelay{log: ol}
	a := New(Config{Enforcer: orderEnforcer{ol}, Evictor: orderEvictor{ol}}, relay)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	a.OnNode(types.NodeView{})
	m4 := machine(4)
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: m4.Capacity()}, m4)
	waitUntil(t, func() bool { _, ok := relay.last(); return ok })
	ol.mu.Lock()
	ol.calls = nil
	ol.mu.Unlock()

	m2 := machine(2)
	a.OnChange(monitor.Change{Time: time.Now(), LatencySeconds: 0.001, Capacity: m2.Capacity()}, m2)
	waitUntil(t, func() bool {
		ol.mu.Lock()
		defer ol.mu.Unlock()
		return len(ol.calls) >= 4
	})
	ol.mu.Lock()
	defer ol.mu.Unlock()
	if ol.calls[0] != string(cgroup.KindClamp) {
		t.Fatalf("actuator calls %v: the clamp must come first, before any API call", ol.calls)
	}
	var clamp, evict, publish, event int = -1, -1, -1, -1
	for i, c := range ol.calls {
		switch {
		case c == string(cgroup.KindClamp) && clamp < 0:
			clamp = i
		case c == "Evict" && evict < 0:
			evict = i
		case strings.HasPrefix(c, "Publish/") && publish < 0:
			publish = i
		case strings.HasPrefix(c, "Event/") && event < 0:
			event = i
		}
	}
	if evict < clamp || publish < clamp || event < clamp {
		t.Errorf("actuator calls %v: want the clamp before the eviction pass, the status patch and the Warning event", ol.calls)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10s")
}

// TestDecisionsTakeTheInjectedClock: the agent reads no clock of its own;
// a decision is taken at the injected clock's time.
func TestDecisionsTakeTheInjectedClock(t *testing.T) {
	at := time.Date(2031, 5, 4, 3, 2, 1, 0, time.UTC)
	a := runOnFourCPUs(t, Config{Clock: clocktesting.NewFakeClock(at)}, at)
	st := a.Status()
	if !st.LastDecision.Equal(at) || !st.Condition.LastTransitionTime.Equal(at) {
		t.Fatalf("decision at %v, condition since %v; want the fake clock's %v", st.LastDecision, st.Condition.LastTransitionTime, at)
	}
}

// runOnFourCPUs runs an agent of cfg until the test ends, with a Node and
// a first model of 4 CPUs taken at at, and waits for its first decision.
func runOnFourCPUs(t *testing.T, cfg Config, at time.Time) *Agent {
	t.Helper()
	a := New(cfg, &fakeRelay{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go a.Run(ctx)
	a.OnNode(types.NodeView{})
	m := machine(4)
	a.OnChange(monitor.Change{Time: at, Capacity: m.Capacity()}, m)
	waitUntil(t, func() bool { return a.Status().Decisions > 0 })
	return a
}

// timedEnforcer wrote its last file at written, and then took until the
// clock moved on to return.
type timedEnforcer struct {
	clock   *clocktesting.FakeClock
	written time.Time
}

func (e timedEnforcer) Apply(context.Context, cgroup.Request, topology.CPUSet) error {
	e.clock.Step(40 * time.Millisecond) // the read-backs and the files that needed no write
	return nil
}

func (e timedEnforcer) LastWrite() time.Time { return e.written }

// TestClampLatencyEndsAtTheWrite: a clamp's latency runs from the first
// uevent of the loss to the enforcer's last write, not to Apply's return.
func TestClampLatencyEndsAtTheWrite(t *testing.T) {
	at := time.Date(2031, 5, 4, 3, 2, 1, 0, time.UTC)
	fake := clocktesting.NewFakeClock(at)
	m := metrics.New()
	enf := timedEnforcer{clock: fake, written: at.Add(3 * time.Millisecond)}
	a := runOnFourCPUs(t, Config{Clock: fake, Metrics: m, Enforcer: enf}, at)

	// The loss's first uevent came 1 ms before the model (at).
	m2 := machine(2)
	a.OnChange(monitor.Change{Time: at, LatencySeconds: 0.001, Capacity: m2.Capacity()}, m2)
	h := m.ClampLatency
	waitUntil(t, func() bool { return histogramCount(h) == 1 })
	if got, want := histogramSum(h), 0.004; math.Abs(got-want) > 1e-9 {
		t.Errorf("clamp latency %vs, want %vs: from the uevent to the enforcer's last write", got, want)
	}
}

func histogramCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	_ = h.Write(&m)
	return m.GetHistogram().GetSampleCount()
}

func histogramSum(h prometheus.Histogram) float64 {
	var m dto.Metric
	_ = h.Write(&m)
	return m.GetHistogram().GetSampleSum()
}

// A failed ephemeral-storage read keeps the last amount in the physical
// capacity the agent decides with: a failed read is not a vanished disk.
func TestUnmeasuredHoldsLastAmount(t *testing.T) {
	a := New(Config{}, &fakeRelay{})
	physical := func() decide.Physical {
		a.mu.Lock()
		defer a.mu.Unlock()
		return *a.physical
	}
	m := machine(4)
	m.EphemeralStorage = 100 << 30
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: m.Capacity()}, m)
	failed := machine(4)
	failed.EphemeralStorageError = "statfs: input/output error"
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: failed.Capacity()}, failed)
	if got := physical().Capacity["ephemeral-storage"]; got != 100<<30 {
		t.Fatalf("after a failed read: ephemeral-storage %d, want the last amount %d", got, int64(100<<30))
	}
	gone := machine(4) // measured, and none: not measured at all now
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: gone.Capacity()}, gone)
	if got, ok := physical().Capacity["ephemeral-storage"]; ok {
		t.Fatalf("without a failed read: ephemeral-storage %d, want none", got)
	}
}

// gateEnforcer blocks each grow until the test lets it through, so that
// a model can come while a pass is under way.
type gateEnforcer struct {
	entered chan struct{}
	gate    chan struct{}
}

func (e gateEnforcer) Apply(_ context.Context, r cgroup.Request, _ topology.CPUSet) error {
	if r.Kind == cgroup.KindGrow {
		e.entered <- struct{}{}
		<-e.gate
	}
	return nil
}

// decidingRelay records, with each status, whether the agent said a newer
// model was waiting for its pass when the status was published.
type decidingRelay struct {
	fakeRelay
	a        *Agent
	deciding []bool
}

func (r *decidingRelay) Publish(s types.NodeStatus) {
	r.fakeRelay.Publish(s)
	r.mu.Lock()
	r.deciding = append(r.deciding, r.a.Deciding())
	r.mu.Unlock()
}

// TestDecidingWhileANewerModelWaits: a gain published by a pass while a
// newer model waits says so (Deciding), so that the relay holds it for the
// next pass's status, and so does the status of a pass not yet finished
// (it publishes before it ends); an agent with nothing left to decide
// does not. On the real node the pass for 4 of a DIMM's 8 blocks
// published while the pass for all 8 grew kubepods, and counting a model
// as decided when its pass began let the first status go out alone.
func TestDecidingWhileANewerModelWaits(t *testing.T) {
	enf := gateEnforcer{entered: make(chan struct{}), gate: make(chan struct{})}
	relay := &decidingRelay{}
	a := New(Config{Enforcer: enf}, relay)
	relay.a = a
	m4 := machine(4)
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: m4.Capacity()}, m4)
	if !a.Deciding() {
		t.Fatal("a model no pass has taken: Deciding is false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, func() bool { _, ok := relay.last(); return ok && !a.Deciding() })

	m6, m8 := machine(6), machine(8)
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: m6.Capacity()}, m6)
	<-enf.entered // the pass for 6 CPUs grows kubepods
	a.OnChange(monitor.Change{Time: time.Now(), Capacity: m8.Capacity()}, m8)
	enf.gate <- struct{}{}
	<-enf.entered // the pass for 8 CPUs
	enf.gate <- struct{}{}
	waitUntil(t, func() bool { s, ok := relay.last(); return ok && s.Capacity["cpu"] == 8000 && !a.Deciding() })

	relay.mu.Lock()
	defer relay.mu.Unlock()
	var saw6 bool
	for i, s := range relay.statuses {
		switch s.Capacity["cpu"] {
		case 6000:
			saw6 = true
			if !relay.deciding[i] {
				t.Errorf("the status for 6 CPUs went out while the model with 8 waited, and Deciding said false")
			}
		case 8000:
			if !relay.deciding[i] {
				t.Errorf("the status for 8 CPUs went out before its pass ended, and Deciding said false")
			}
		}
	}
	if !saw6 {
		t.Fatalf("statuses %v: want one for 6 CPUs, published by the pass that took that model", relay.statuses)
	}
}
