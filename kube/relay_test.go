package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/types"
)

// Backoff bounds of the relay under test, in fake time.
const (
	testMinBackoff = time.Second
	testMaxBackoff = 4 * time.Second
)

// patchRecorder records the status patches the fake API server receives
// and fails the first n of them.
type patchRecorder struct {
	mu       sync.Mutex
	patches  [][]byte
	attempts int
	fail     int
	got      chan struct{}
}

func (p *patchRecorder) react(a k8stesting.Action) (bool, runtime.Object, error) {
	pa, ok := a.(k8stesting.PatchAction)
	if !ok || a.GetSubresource() != "status" {
		return false, nil, nil
	}
	p.mu.Lock()
	defer func() {
		p.mu.Unlock()
		select {
		case p.got <- struct{}{}:
		default:
		}
	}()
	p.attempts++
	if p.fail > 0 {
		p.fail--
		return true, nil, errors.New("connection refused")
	}
	p.patches = append(p.patches, pa.GetPatch())
	return false, nil, nil // let the tracker apply it
}

// last is the body of the last patch that was let through (nil: none).
func (p *patchRecorder) last() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.patches) == 0 {
		return nil
	}
	return p.patches[len(p.patches)-1]
}

func (p *patchRecorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.patches)
}

func (p *patchRecorder) tries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts
}

// relayHarness runs a Relay against two fake API servers: client takes
// the Node's patches and the events, nodes serves the Node's list and
// watch.
type relayHarness struct {
	r      *Relay
	client *dynamicfake.FakeDynamicClient
	nodes  *dynamicfake.FakeDynamicClient
	rec    *patchRecorder
	m      *metrics.Metrics
	clock  *clocktesting.FakeClock
	// stepped is the relay's armed count when the clock was last stepped.
	stepped int64
}

// unstructuredNode is the Node worker-1 as the API server sends it.
func unstructuredNode(capacity, allocatable, condition map[string]any) *unstructured.Unstructured {
	conditions := []any{map[string]any{"type": "Ready", "status": "True", "reason": "KubeletReady"}}
	if condition != nil {
		conditions = append(conditions, condition)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata":   map[string]any{"name": "worker-1"},
		"status":     map[string]any{"capacity": capacity, "allocatable": allocatable, "conditions": conditions},
	}}
	return u
}

func startRelay(t *testing.T, fail int, subs ...NodeSubscriber) *relayHarness {
	t.Helper()
	return startRelayWith(t, fail, nil, subs...)
}

// startRelayWith is startRelay with the Node as the fake API server first
// has it and the relay's options adjusted (either function may be nil).
func startRelayWith(t *testing.T, fail int, adjust func(*corev1.Node, *Options), subs ...NodeSubscriber) *relayHarness {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
	h := &relayHarness{
		nodes: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{objects.Nodes: "NodeList"}, unstructuredNode(map[string]any{"cpu": "4"}, map[string]any{"cpu": "4"}, nil)),
		rec:   &patchRecorder{fail: fail, got: make(chan struct{}, 100)},
		m:     metrics.New(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	opts := Options{NodeName: "worker-1", Metrics: h.m, NodeSubscribers: subs,
		MinBackoff: testMinBackoff, MaxBackoff: testMaxBackoff, Clock: h.clock}
	if adjust != nil {
		adjust(node, &opts)
	}
	h.client = fakeAPI(t, node)
	h.client.PrependReactor("patch", "nodes", h.rec.react)
	watching := watchRegistered(h.nodes, "nodes")
	h.r = New(h.client, h.nodes, opts)
	kubetest.Run(t, h.r.Run)
	// The watch serves another fake than the patches go to: a first list
	// that came after the first patch would show the Node without it, and
	// the relay would rightly patch again.
	kubetest.WaitFor(t, "the Node watch's first list", func() bool { return h.r.Stats().NodeSynced })
	awaitWatch(t, watching)
	return h
}

// fireRetry checks that the worker waits at least base and less than
// 1.5×base (the jitter) for its retry, and lets that time pass.
func (h *relayHarness) fireRetry(t *testing.T, base time.Duration) {
	t.Helper()
	// A wait set before the last step may be replaced at any moment: wait
	// for one set since.
	kubetest.WaitFor(t, "the worker to wait for its retry", func() bool { return h.r.armed.Load() > h.stepped && h.clock.HasWaiters() })
	h.stepped = h.r.armed.Load()
	h.clock.Step(base - time.Nanosecond)
	if !h.clock.HasWaiters() {
		t.Fatalf("retried before %v", base)
	}
	// Past 1.5×base the retry must have fired: the caller waits for the
	// attempt it makes (a failed one sets its next wait at once).
	h.clock.Step(base/2 + time.Nanosecond)
}

func status(cpu int64, reason types.Reason) types.NodeStatus {
	st := types.StatusTrue
	if reason != types.ReasonAccepted {
		st = types.StatusFalse
	}
	return types.NodeStatus{
		Capacity:    resources.List{"cpu": cpu * 1000, "memory": 8 << 30},
		Allocatable: resources.List{"cpu": cpu * 1000, "memory": 7 << 30},
		Condition:   types.Condition{Status: st, Reason: reason, Message: "m"},
	}
}

func TestPatchIsMinimalAndKeepsOtherConditions(t *testing.T) {
	h := startRelay(t, 0)
	s := status(4, types.ReasonAccepted)
	s.Since = h.clock.Now().Add(-5 * time.Millisecond)
	h.r.Publish(s)
	kubetest.WaitFor(t, "one patch", func() bool { return h.r.Stats().Patches == 1 })

	// The worker may patch again meanwhile (the watch republishes): read
	// the recorder under its lock.
	h.rec.mu.Lock()
	first := h.rec.patches[0]
	h.rec.mu.Unlock()
	var body map[string]map[string]any
	if err := json.Unmarshal(first, &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 1 || len(body["status"]) != 3 {
		t.Errorf("patch touches more than status capacity/allocatable/conditions: %s", first)
	}
	n := typedNode(t, h.client)
	var ready, ours bool
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		ours = ours || (c.Type == types.ConditionType && c.Reason == "Accepted")
		if c.Type == types.ConditionType && !c.LastHeartbeatTime.Time.Equal(h.clock.Now()) {
			t.Errorf("heartbeat %v, want the relay's clock %v", c.LastHeartbeatTime, h.clock.Now())
		}
	}
	if !ready || !ours {
		t.Errorf("conditions after the patch: %+v; want Ready kept and CapacityConfigured added", n.Status.Conditions)
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.String() != "4" {
		t.Errorf("capacity cpu %s, want 4", q.String())
	}
	if n := testutil.CollectAndCount(h.m.PatchLatency); n != 1 {
		t.Errorf("patch latency histogram has %d series", n)
	}
}

func TestNewestStatusWinsAfterOutage(t *testing.T) {
	h := startRelay(t, 3)
	// The API server is away for the first three attempts; meanwhile the
	// machine changes twice more. Only the newest status may land.
	h.r.Publish(status(4, types.ReasonAccepted))
	kubetest.WaitFor(t, "a failed attempt", func() bool { return testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("api_patch")) >= 1 })
	h.r.Publish(status(3, types.ReasonAccepted))
	h.r.Publish(status(2, types.ReasonEmergencyReduced))
	for h.rec.count() == 0 {
		kubetest.WaitFor(t, "a retry or a patch", func() bool { return h.clock.HasWaiters() || h.rec.count() > 0 })
		h.clock.Step(testMaxBackoff * 3 / 2)
	}
	kubetest.WaitFor(t, "no pending status", func() bool { return !h.r.Stats().Pending })
	n := typedNode(t, h.client)
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("capacity cpu %s after the outage, want the newest (2)", q.String())
	}
	if h.rec.count() != 1 {
		t.Errorf("%d successful patches, want 1 (older statuses are superseded)", h.rec.count())
	}
	if got := testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("api_patch")); got != 3 {
		t.Errorf("api_patch errors = %v, want 3", got)
	}
}

// TestPatchBackoffDoublesToItsCapAndResets: each retry waits between its
// base delay and 1.5 times that; the base doubles from MinBackoff up to
// MaxBackoff, and a success starts over from MinBackoff.
func TestPatchBackoffDoublesToItsCapAndResets(t *testing.T) {
	h := startRelay(t, 5)
	h.r.Publish(status(4, types.ReasonAccepted))
	for i, base := range []time.Duration{1, 2, 4, 4, 4} {
		h.fireRetry(t, base*testMinBackoff)
		kubetest.WaitFor(t, "the next attempt", func() bool { return h.rec.tries() == i+2 })
	}
	kubetest.WaitFor(t, "the patch", func() bool { return h.rec.count() == 1 && !h.r.Stats().Pending })
	h.rec.mu.Lock()
	h.rec.fail = 1
	h.rec.mu.Unlock()
	h.r.Publish(status(3, types.ReasonAccepted))
	kubetest.WaitFor(t, "a failed attempt", func() bool { return h.rec.tries() == 7 })
	h.fireRetry(t, testMinBackoff)
	kubetest.WaitFor(t, "the second patch", func() bool { return h.rec.count() == 2 })
}

func TestBurstOfPublishesIsOnePatch(t *testing.T) {
	h := startRelay(t, 0)
	h.rec.mu.Lock() // hold the first patch so the burst piles up behind it
	for i := range 512 {
		h.r.Publish(status(int64(1+i%4), types.ReasonAccepted))
	}
	h.rec.mu.Unlock()
	kubetest.WaitFor(t, "no pending status", func() bool { return !h.r.Stats().Pending && h.rec.count() > 0 })
	if n := h.rec.count(); n > 2 {
		t.Errorf("%d patches for a burst of 512 publishes, want at most 2", n)
	}
}

// heldFor waits for the worker to hold the wanted status, and checks that
// it patches after exactly d more, not before.
func (h *relayHarness) heldFor(t *testing.T, d time.Duration) {
	t.Helper()
	kubetest.WaitFor(t, "the worker to hold the status", func() bool { return h.r.armed.Load() > h.stepped && h.clock.HasWaiters() })
	h.stepped = h.r.armed.Load()
	before := h.rec.count()
	h.clock.Step(d - time.Nanosecond)
	if !h.clock.HasWaiters() || h.rec.count() != before {
		t.Fatalf("patched before %v", d)
	}
	h.clock.Step(time.Nanosecond)
	kubetest.WaitFor(t, "the held patch", func() bool { return h.rec.count() == before+1 && !h.r.Stats().Pending })
}

func (h *relayHarness) cpu(t *testing.T) string {
	t.Helper()
	q := typedNode(t, h.client).Status.Capacity[corev1.ResourceCPU]
	return q.String()
}

// A status that only adds capacity waits until the wanted status has been
// the same for the window, at most twice the window; the gains of one
// hot-add are one patch.
func TestGainIsHeldForItsWindow(t *testing.T) {
	const w = 250 * time.Millisecond
	var mu sync.Mutex
	var calls []string
	views := make(chan types.NodeView, 10)
	h := startRelayWith(t, 0, func(_ *corev1.Node, o *Options) { o.GainWindow = w },
		viewRecorder{name: "watch", log: &calls, mu: &mu, views: views})
	nextView(t, views)                           // the initial list is over: the Node shows 4 CPUs, nothing to republish
	h.r.Publish(status(4, types.ReasonAccepted)) // the first status: at once
	kubetest.WaitFor(t, "the first patch", func() bool { return h.rec.count() == 1 && !h.r.Stats().Pending })

	// A leading and a trailing gain 100ms apart: one patch, a window
	// after the trailing one.
	h.r.Publish(status(5, types.ReasonAccepted))
	kubetest.WaitFor(t, "the worker to hold the gain", func() bool { return h.r.armed.Load() > h.stepped && h.clock.HasWaiters() })
	h.stepped = h.r.armed.Load()
	h.clock.Step(100 * time.Millisecond)
	h.r.Publish(status(8, types.ReasonAccepted))
	h.heldFor(t, w)
	if got := h.cpu(t); got != "8" || h.rec.count() != 2 {
		t.Errorf("Node cpu %s after %d patches, want 8 after 2", got, h.rec.count())
	}

	// Gains that keep coming are patched twice the window after the
	// first.
	for cpu := int64(9); cpu <= 10; cpu++ {
		h.r.Publish(status(cpu, types.ReasonAccepted))
		kubetest.WaitFor(t, "the worker to hold the gain", func() bool { return h.r.armed.Load() > h.stepped && h.clock.HasWaiters() })
		h.stepped = h.r.armed.Load()
		h.clock.Step(200 * time.Millisecond)
	}
	h.r.Publish(status(11, types.ReasonAccepted))
	h.heldFor(t, 2*w-400*time.Millisecond)
	if got := h.cpu(t); got != "11" || h.rec.count() != 3 {
		t.Errorf("Node cpu %s after %d patches, want 11 after 3", got, h.rec.count())
	}

	// A loss is patched at once and takes a held gain's place.
	h.r.Publish(status(12, types.ReasonAccepted))
	kubetest.WaitFor(t, "the worker to hold the gain", func() bool { return h.r.armed.Load() > h.stepped && h.clock.HasWaiters() })
	h.r.Publish(status(3, types.ReasonEmergencyReduced))
	kubetest.WaitFor(t, "the loss's patch", func() bool { return h.rec.count() == 4 && !h.r.Stats().Pending })
	if got := h.cpu(t); got != "3" {
		t.Errorf("Node cpu %s after the loss, want 3", got)
	}
	// So is a status with the same capacity and another condition.
	s := status(3, types.ReasonAccepted)
	h.r.Publish(s)
	kubetest.WaitFor(t, "the condition's patch", func() bool { return h.rec.count() == 5 && !h.r.Stats().Pending })
}

// The same status wanted again does not hold a gain longer: the window
// counts from the last change of what is wanted.
func TestGainWindowCountsFromTheLastChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(fakeAPI(t), dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{NodeName: "worker-1", Clock: clk, GainWindow: time.Second})
	r.sent = &types.NodeStatus{Capacity: resources.List{"cpu": 4000}}
	first := clk.Now()
	r.Publish(status(5, types.ReasonAccepted))
	clk.Step(300 * time.Millisecond)
	r.Publish(status(5, types.ReasonAccepted))
	r.mu.Lock()
	if !r.wantFrom.Equal(first) || !r.wantAt.Equal(first) || r.held() != 700*time.Millisecond {
		t.Errorf("after the same status again: wanted from %v, changed at %v, held %v; want %v, %v, 700ms", r.wantFrom, r.wantAt, r.held(), first, first)
	}
	r.mu.Unlock()
	r.Publish(status(6, types.ReasonAccepted)) // at 300ms
	clk.Step(900 * time.Millisecond)
	r.mu.Lock()
	if r.held() != 100*time.Millisecond {
		t.Errorf("held %v 900ms after another gain, want the rest of its window, 100ms", r.held())
	}
	r.mu.Unlock()
	r.Publish(status(7, types.ReasonAccepted)) // at 1200ms
	r.mu.Lock()
	if r.held() != 800*time.Millisecond {
		t.Errorf("held %v after a gain at 1.2s, want the rest of twice the window from the first, 800ms", r.held())
	}
	r.mu.Unlock()
}

// While more gains are on their way (HoldGainsWhile: a DIMM's blocks
// still being onlined on a loaded machine), a held gain waits past twice
// the window, and for a window after they stopped; never past
// GainsPendingMax.
func TestGainWaitsWhileMoreArePending(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(fakeAPI(t), dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{NodeName: "worker-1", Clock: clk, GainWindow: 250 * time.Millisecond})
	var pending atomic.Bool
	r.HoldGainsWhile(pending.Load)
	r.sent = &types.NodeStatus{Capacity: resources.List{"cpu": 4000}}
	held := func() time.Duration {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.held()
	}
	pending.Store(true)
	r.Publish(status(5, types.ReasonAccepted)) // the first block online
	for range 8 {                              // 2s: the onliner is slow
		if d := held(); d != 250*time.Millisecond/4 {
			t.Fatalf("held %v while more gains are pending, want a look again in 62.5ms", d)
		}
		clk.Step(250 * time.Millisecond)
		r.Publish(status(6, types.ReasonAccepted))
	}
	held() // seen pending at 2s
	clk.Step(50 * time.Millisecond)
	pending.Store(false)
	r.Publish(status(8, types.ReasonAccepted)) // the last block's change, at 2.05s
	if d := held(); d != 250*time.Millisecond {
		t.Errorf("held %v after the last gain, want its window, 250ms", d)
	}
	clk.Step(250 * time.Millisecond)
	if d := held(); d != 0 {
		t.Errorf("held %v a window after the last gain, want 0", d)
	}

	// A new gain after the last one was sent: held for d more after step.
	next := func(cpu int64, stillPending bool, step, want time.Duration, what string) {
		t.Helper()
		r.sent, r.want = r.want, nil
		pending.Store(stillPending)
		r.Publish(status(cpu, types.ReasonAccepted))
		clk.Step(step)
		if d := held(); d != want {
			t.Errorf("held %v %s, want %v", d, what, want)
		}
	}
	// An onliner that never finishes holds a gain GainsPendingMax at most.
	next(9, true, GainsPendingMax-10*time.Millisecond, 10*time.Millisecond, "10ms before GainsPendingMax")
	clk.Step(10 * time.Millisecond)
	if d := held(); d != 0 {
		t.Errorf("held %v at GainsPendingMax, want 0", d)
	}
	// Without pending gains, the usual window.
	clk.Step(time.Second)
	next(10, false, 0, 250*time.Millisecond, "with nothing pending")
}

func TestGain(t *testing.T) {
	l := func(cpu, mem int64) resources.List { return resources.List{"cpu": cpu, "memory": mem} }
	st := func(capac, alloc resources.List, taint bool) types.NodeStatus {
		return types.NodeStatus{Capacity: capac, Allocatable: alloc, Taint: taint}
	}
	from := st(l(4, 8), l(4, 7), false)
	for _, tc := range []struct {
		name string
		to   types.NodeStatus
		want bool
	}{
		{"more cpu", st(l(5, 8), l(5, 7), false), true},
		{"more allocatable only", st(l(4, 8), l(4, 8), false), true},
		{"a new resource", st(resources.List{"cpu": 4, "memory": 8, "hugepages-2Mi": 2}, l(4, 7), false), true},
		{"the same", st(l(4, 8), l(4, 7), false), false},
		{"more cpu, less memory", st(l(5, 7), l(5, 6), false), false},
		{"a resource gone", st(resources.List{"cpu": 5}, l(5, 7), false), false},
		{"more, and the taint set", st(l(5, 8), l(5, 7), true), false},
	} {
		if got := gain(from, tc.to); got != tc.want {
			t.Errorf("%s: gain = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// viewRecorder is a NodeSubscriber that keeps what it is given.
type viewRecorder struct {
	name  string
	log   *[]string
	mu    *sync.Mutex
	views chan types.NodeView
}

func (v viewRecorder) OnNode(n types.NodeView) {
	v.mu.Lock()
	*v.log = append(*v.log, v.name)
	v.mu.Unlock()
	if v.views != nil {
		v.views <- n
	}
}

// TestRepublishWhenTheKubeletRevertsCapacity: the relay's own watch sees
// the Node; when it shows what was published nothing happens, when a
// kubelet wrote its boot-time view back the relay publishes again.
func TestRepublishWhenTheKubeletRevertsCapacity(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	views := make(chan types.NodeView, 10)
	h := startRelay(t, 0, viewRecorder{name: "first", log: &calls, mu: &mu}, viewRecorder{name: "second", log: &calls, mu: &mu, views: views})
	nextView(t, views) // the initial list
	s := status(2, types.ReasonEmergencyReduced)
	h.r.Publish(s)
	kubetest.WaitFor(t, "the first patch", func() bool { return h.rec.count() == 1 && !h.r.Stats().Pending })

	ours := map[string]any{"type": types.ConditionType, "status": string(s.Condition.Status), "reason": string(s.Condition.Reason)}
	update := func(cpu string) {
		t.Helper()
		n := unstructuredNode(map[string]any{"cpu": cpu, "memory": "8Gi"}, map[string]any{"cpu": "2", "memory": "7Gi"}, ours)
		if _, err := h.nodes.Resource(objects.Nodes).Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update("2") // the Node shows what was sent
	update("2") // again: its view is handed over after the first one's republish check
	nextView(t, views)
	nextView(t, views)
	if h.rec.count() != 1 || h.r.Stats().Pending {
		t.Fatalf("republished a status the Node already shows")
	}
	update("4") // the kubelet's boot-time view
	if v := nextView(t, views); v.Capacity["cpu"] != 4000 {
		t.Fatalf("watched capacity %v", v.Capacity)
	}
	kubetest.WaitFor(t, "a second patch", func() bool { return h.rec.count() == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(calls, ","); got != "first,second,first,second,first,second,first,second" {
		t.Errorf("subscriber calls %s, want first,second for each of the 4 views", got)
	}
}

// nextView is the next view a viewRecorder was given.
func nextView(t *testing.T, views <-chan types.NodeView) types.NodeView {
	t.Helper()
	select {
	case v := <-views:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no Node view within 10s")
		return types.NodeView{}
	}
}

// TestNoPatchWhenTheNodeShowsTheStatusAtStart: the first status after a
// start that the Node shows already (capacity, allocatable, condition
// with its message) is not patched, so a restart with nothing changed
// writes nothing; the next status that differs is patched, and so is a
// first status whose message differs.
func TestNoPatchWhenTheNodeShowsTheStatusAtStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		message string
		patches uint64
	}{
		{"shown", "m", 0},
		{"another message", "old", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			views := make(chan types.NodeView, 10)
			h := startRelay(t, 0, viewRecorder{name: "v", log: new([]string), mu: new(sync.Mutex), views: views})
			nextView(t, views) // the initial list
			s := status(2, types.ReasonAccepted)
			n := unstructuredNode(map[string]any{"cpu": "2", "memory": "8Gi"}, map[string]any{"cpu": "2", "memory": "7Gi"},
				map[string]any{"type": types.ConditionType, "status": string(s.Condition.Status), "reason": string(s.Condition.Reason), "message": tc.message})
			if _, err := h.nodes.Resource(objects.Nodes).Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			nextView(t, views)
			h.r.Publish(s)
			kubetest.WaitFor(t, "the status taken", func() bool { return !h.r.Stats().Pending && h.r.Stats().Patches == tc.patches })
			if got := h.rec.count(); uint64(got) != tc.patches {
				t.Fatalf("%d patches for a first status the Node shows with message %q, want %d", got, tc.message, tc.patches)
			}
			h.r.Publish(status(3, types.ReasonAccepted))
			kubetest.WaitFor(t, "the next status patched", func() bool { return h.r.Stats().Patches == tc.patches+1 })
		})
	}
}

func TestClientConfigLimits(t *testing.T) {
	cfg := clientConfig(&rest.Config{Host: "https://api:6443"}, Options{}.withDefaults())
	if cfg.QPS != DefaultQPS || cfg.Burst != DefaultBurst || cfg.UserAgent != "node-resized" {
		t.Errorf("default limits: QPS %v burst %d agent %q, want %v %d node-resized", cfg.QPS, cfg.Burst, cfg.UserAgent, DefaultQPS, DefaultBurst)
	}
	cfg = clientConfig(&rest.Config{Host: "https://api:6443"}, Options{QPS: 7, Burst: 9}.withDefaults())
	if cfg.QPS != 7 || cfg.Burst != 9 {
		t.Errorf("limits QPS %v burst %d, want 7 9", cfg.QPS, cfg.Burst)
	}
	for _, o := range []Options{{QPS: -1}, {Burst: -1}} {
		_, err := Connect(o)
		if err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("Connect(QPS %v, Burst %d) = %v, want a rejection", o.QPS, o.Burst, err)
		}
	}
}

// TestEvictAsNodeImpersonatesOnlyForEvictions: with EvictAsNode the
// evictor's client sends Impersonate-User system:node:<name>; the relay's
// own requests (Node patches, events, the watch) never do.
func TestEvictAsNodeImpersonatesOnlyForEvictions(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // path -> Impersonate-User
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen[req.URL.Path] = req.Header.Get("Impersonate-User")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"PodList","items":[]}`)
	}))
	t.Cleanup(srv.Close)
	for _, asNode := range []bool{false, true} {
		r, err := connect(&rest.Config{Host: srv.URL}, Options{NodeName: "worker-1", EvictAsNode: asNode})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := r.EvictionClient().Resource(objects.Pods).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		_, _ = r.client.Resource(objects.Nodes).Get(ctx, "worker-1", metav1.GetOptions{}) // the answer is no Node; only the header matters
		mu.Lock()
		evict, own := seen["/api/v1/pods"], seen["/api/v1/nodes/worker-1"]
		mu.Unlock()
		want := ""
		if asNode {
			want = "system:node:worker-1"
		}
		if evict != want || own != "" {
			t.Errorf("EvictAsNode %v: the evictor impersonates %q (want %q), the relay %q (want none)", asNode, evict, want, own)
		}
	}
}

// TestRepublishNeverReplacesANewerStatus: the watch's republish of the
// status last acknowledged and the agent's newer status race on two
// goroutines. Whatever the order, the newer status is the one wanted
// last, patched last, and what the relay takes as sent; an older status
// wanted after it would be patched last and republished from then on.
func TestRepublishNeverReplacesANewerStatus(t *testing.T) {
	views := make(chan types.NodeView, 10)
	h := startRelay(t, 0, viewRecorder{name: "v", log: new([]string), mu: new(sync.Mutex), views: views})
	nextView(t, views) // the initial list
	old := status(4, types.ReasonAccepted)
	h.r.Publish(old)
	kubetest.WaitFor(t, "the first patch", func() bool { return h.rec.count() == 1 && !h.r.Stats().Pending })

	newer := status(4, types.ReasonAccepted)
	newer.Condition.Message = "configured capacity {\"cpu\":\"4\"}: capacity cpu=4 applied"
	// The agent publishes its newer decision the moment the republish
	// has decided to send the old status again.
	h.r.mu.Lock()
	h.r.republished = func() { h.r.Publish(newer) }
	h.r.mu.Unlock()
	// A kubelet rewrote allocatable: the Node no longer shows old.
	reverted := unstructuredNode(map[string]any{"cpu": "4", "memory": "8Gi"}, map[string]any{"cpu": "4", "memory": "8Gi"},
		map[string]any{"type": types.ConditionType, "status": string(old.Condition.Status), "reason": string(old.Condition.Reason)})
	v, err := parseUnstructured(reverted)
	if err != nil {
		t.Fatal(err)
	}
	h.r.republish(v)
	kubetest.WaitFor(t, "the newer status patched", func() bool { return !h.r.Stats().Pending })
	h.r.mu.Lock()
	sent := h.r.sent
	h.r.mu.Unlock()
	if sent == nil || sent.Condition.Message != newer.Condition.Message {
		t.Fatalf("the relay took %+v as sent last, want the newer status (message %q)", sent, newer.Condition.Message)
	}
	if last := h.rec.last(); !strings.Contains(string(last), "configured capacity") {
		t.Errorf("the last patch %s is not the newer status", last)
	}
}
