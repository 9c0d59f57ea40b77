package evict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/types"
)

const evNode = "worker-1"

// evPod is a running pod on evNode with a memory request and a QoS class.
func evPod(name, memory string, prio int32, qos corev1.PodQOSClass) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   evNode,
			Priority:   &prio,
			Containers: []corev1.Container{{Name: "c"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: qos},
	}
	if memory != "" {
		p.Spec.Containers[0].Resources.Requests = evList("memory", memory)
	}
	return p
}

// evHarness runs an Evictor against a fake API server. By default an
// accepted eviction deletes the pod at once, as if the kubelet had
// terminated it; onEvict replaces that.
type evHarness struct {
	stepped int64 // the evictor's armed count when the clock was last stepped
	t       *testing.T
	client  *dynamicfake.FakeDynamicClient
	ev      *Evictor
	m       *metrics.Metrics
	logs    *kubetest.Buffer
	clock   *clocktesting.FakeClock

	mu       sync.Mutex // guards the fields below
	onEvict  func(ns, name string) error
	evicted  []string // namespace/name of every eviction request, refused or not
	reports  []types.EvictionReport
	events   []string
	ws       map[string]int64 // working sets by pod UID
	reported chan struct{}
}

// report records the evictor's progress (what Agent.ReportEviction gets).
func (h *evHarness) report(r types.EvictionReport) {
	h.mu.Lock()
	h.reports = append(h.reports, r)
	h.mu.Unlock()
	h.reported <- struct{}{}
}

// start is Start with no online CPUs known and reports to the harness.
func (h *evHarness) start(ctx context.Context, ev decide.Evict) {
	h.ev.Start(ctx, ev, nil, h.report)
}

func newEvHarness(t *testing.T, pods []*corev1.Pod, configure func(*Options)) *evHarness {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	h := &evHarness{t: t, client: kubetest.FakeAPI(t, objs...), m: metrics.New(), logs: &kubetest.Buffer{},
		// A day ahead: a test passes only if the evictor reads this clock.
		clock: clocktesting.NewFakeClock(time.Now().Add(24 * time.Hour)),
		ws:    map[string]int64{}, reported: make(chan struct{}, 1000)}
	h.client.PrependReactor("create", "pods", h.react)
	opts := Options{
		NodeName: evNode,
		WorkingSet: func(uid, qos string) (int64, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if v, ok := h.ws[uid]; ok {
				return v, nil
			}
			return 0, fmt.Errorf("no cgroup for pod %s", uid)
		},
		Event: func(typ types.EventType, reason, msg string) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, string(typ)+" "+reason+" "+msg)
		},
		RetryInterval:    evRetry,
		MaxRetryInterval: evMaxRetry,
		Clock:            h.clock,
		Logger:           slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:          h.m,
	}
	if configure != nil {
		configure(&opts)
	}
	h.ev = New(h.client, opts)
	return h
}

// The evictor's waits under test, in fake time.
const (
	evRetry    = 5 * time.Second
	evMaxRetry = 20 * time.Second
)

// tick waits until the evictor waits for its clock, and lets the longest
// wait it may have chosen pass.
func (h *evHarness) tick() {
	h.t.Helper()
	h.waitArmed()
	h.clock.Step(evMaxRetry * 3 / 2)
}

// waitArmed waits until the evictor has set a wait since the clock was
// last stepped: a wait set before that step may be replaced at any moment.
func (h *evHarness) waitArmed() {
	h.t.Helper()
	kubetest.WaitFor(h.t, "the evictor to wait", func() bool { return h.ev.armed.Load() > h.stepped && h.clock.HasWaiters() })
	h.stepped = h.ev.armed.Load()
}

// fireWait checks that the evictor waits at least lo and less than hi, and
// lets hi pass.
func (h *evHarness) fireWait(lo, hi time.Duration) {
	h.t.Helper()
	h.waitArmed()
	h.clock.Step(lo - time.Nanosecond)
	if !h.clock.HasWaiters() {
		h.t.Fatalf("came back before %v", lo)
	}
	// Past hi the wait must have fired; what the evictor then does (and
	// any wait it sets next, at once) is for the caller to wait for.
	h.clock.Step(hi - lo + time.Nanosecond)
}

// run starts Run and stops it when the test ends.
func (h *evHarness) run() {
	kubetest.Run(h.t, h.ev.Run)
}

func (h *evHarness) react(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "eviction" {
		return false, nil, nil
	}
	e, err := evictionOf(a)
	if err != nil {
		return true, nil, err
	}
	h.mu.Lock()
	h.evicted = append(h.evicted, e.Namespace+"/"+e.Name)
	hook := h.onEvict
	h.mu.Unlock()
	if hook != nil {
		if err := hook(e.Namespace, e.Name); err != nil {
			return true, nil, err
		}
		return true, evictionSuccess(), nil
	}
	if err := h.client.Tracker().Delete(objects.Pods, e.Namespace, e.Name); err != nil {
		return true, nil, err
	}
	return true, evictionSuccess(), nil
}

// evictionOf reads the Eviction an eviction request carries: a policy/v1
// Eviction of the pod the request is for.
func evictionOf(a k8stesting.Action) (*policyv1.Eviction, error) {
	ca := a.(k8stesting.CreateAction)
	u, ok := ca.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("eviction subresource with a %T", ca.GetObject())
	}
	if gvk := u.GroupVersionKind(); gvk != policyv1.SchemeGroupVersion.WithKind("Eviction") {
		return nil, fmt.Errorf("eviction subresource with a %v, want a policy/v1 Eviction", gvk)
	}
	e := &policyv1.Eviction{}
	if err := objects.FromUnstructured(u, e); err != nil {
		return nil, err
	}
	if e.Namespace != a.GetNamespace() || e.Name != ca.(k8stesting.CreateActionImpl).Name {
		return nil, fmt.Errorf("eviction of %s/%s posted to pod %s/%s", e.Namespace, e.Name, a.GetNamespace(), ca.(k8stesting.CreateActionImpl).Name)
	}
	return e, nil
}

// evictionSuccess is the API server's answer to an eviction it accepts.
func evictionSuccess() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Status", "status": metav1.StatusSuccess}}
}

func (h *evHarness) setOnEvict(f func(ns, name string) error) {
	h.mu.Lock()
	h.onEvict = f
	h.mu.Unlock()
}

func (h *evHarness) evictions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.evicted)
}

func (h *evHarness) allReports() []types.EvictionReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reports)
}

// waitReport waits for a report that satisfies ok and returns it.
func (h *evHarness) waitReport(what string, ok func(types.EvictionReport) bool) types.EvictionReport {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for seen := 0; ; {
		rs := h.allReports()
		for ; seen < len(rs); seen++ {
			if ok(rs[seen]) {
				return rs[seen]
			}
		}
		select {
		case <-h.reported:
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; reports: %+v\nlog:\n%s", what, rs, h.logs.String())
		}
	}
}

func evDone(gen int64) func(types.EvictionReport) bool {
	return func(r types.EvictionReport) bool { return r.Generation == gen && r.Done }
}

func evictOrder(gen int64, memory int64) decide.Evict {
	return decide.Evict{Generation: gen, Reason: types.EvictionReason,
		Capacity: resources.List{"memory": memory + 1<<30}, Allocatable: resources.List{"memory": memory}}
}

func TestEvictorEvictsInRankOrderAndReportsDone(t *testing.T) {
	mirror := evPod("mirror", "4Gi", 0, corev1.PodQOSBurstable)
	mirror.Annotations = map[string]string{annotationConfigMirror: "h", annotationConfigSource: "file"}
	critical := evPod("critical", "1Gi", 2000001000, corev1.PodQOSBurstable)
	elsewhere := evPod("elsewhere", "64Gi", 0, corev1.PodQOSBurstable)
	elsewhere.Spec.NodeName = "worker-2"
	finished := evPod("finished", "64Gi", 0, corev1.PodQOSBurstable)
	finished.Status.Phase = corev1.PodSucceeded
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),    // 3Gi working set: over its request
		evPod("b", "2Gi", 0, corev1.PodQOSBurstable),    // 1Gi: within, low priority
		evPod("c", "2Gi", 1000, corev1.PodQOSBurstable), // within, high priority
		mirror, critical, elsewhere, finished,
	}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30, "uid-b": 1 << 30, "uid-c": 2 << 30, "uid-mirror": 5 << 30, "uid-critical": 5 << 30}
	h.run()
	// Footprints: a 3, b 2, c 2, mirror 5, critical 5 = 17Gi; allocatable
	// 13Gi: a goes (over its request), then b (lower priority).
	h.start(context.Background(), evictOrder(1, 13<<30))
	h.waitReport("Done", evDone(1))

	if got, want := h.evictions(), []string{"default/a", "default/b"}; !slices.Equal(got, want) {
		t.Errorf("evicted %v, want %v", got, want)
	}
	var lists int
	for _, a := range h.client.Actions() {
		switch {
		case a.GetVerb() == "list" && a.GetResource().Resource == "pods":
			lists++
			sel := a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
			for _, term := range []string{"spec.nodeName=" + evNode, "status.phase!=Succeeded", "status.phase!=Failed"} {
				if !strings.Contains(sel, term) {
					t.Errorf("pod list field selector %q lacks %q", sel, term)
				}
			}
		case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
			e, err := evictionOf(a)
			if err != nil {
				t.Fatal(err)
			}
			if e.DeleteOptions == nil || e.DeleteOptions.Preconditions == nil || e.DeleteOptions.Preconditions.UID == nil ||
				string(*e.DeleteOptions.Preconditions.UID) != "uid-"+e.Name {
				t.Errorf("eviction of %s without the pod's UID as precondition: %+v", e.Name, e.DeleteOptions)
			}
			if e.DeleteOptions != nil && e.DeleteOptions.GracePeriodSeconds != nil {
				t.Errorf("eviction of %s overrides the grace period", e.Name)
			}
		case a.GetVerb() == "delete":
			t.Errorf("the evictor deleted something directly: %v", a)
		}
	}
	if lists == 0 {
		t.Error("no pod list")
	}
	h.mu.Lock()
	events := slices.Clone(h.events)
	h.mu.Unlock()
	if len(events) != 2 || !strings.HasPrefix(events[0], "Warning NodeCapacityExceeded Evicted pod default/a: ") {
		t.Errorf("events %q, want two Warning NodeCapacityExceeded events, a's first", events)
	}
	for _, r := range h.allReports() {
		if r.Blocked != "" {
			t.Errorf("unexpected Blocked report %+v", r)
		}
	}
	if !strings.Contains(h.logs.String(), "reason=NodeCapacityExceeded") {
		t.Errorf("the log does not carry the eviction reason:\n%s", h.logs.String())
	}
	if got := testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("eviction")); got != 0 {
		t.Errorf("eviction errors = %v, want 0", got)
	}
}

func pdbRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 2 healthy pods and has 2 currently"})
	return err
}

func TestEvictorPodDisruptionBudgetBlocksThenRetries(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("b", "2Gi", 0, corev1.PodQOSBurstable),
	}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30, "uid-b": 1 << 30}
	var mu sync.Mutex
	refuse := true
	h.setOnEvict(func(ns, name string) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return pdbRefusal()
		}
		return h.client.Tracker().Delete(objects.Pods, ns, name)
	})
	h.run()
	// 5Gi of footprints in 2Gi: both must go, a first.
	h.start(context.Background(), evictOrder(3, 2<<30))
	r := h.waitReport("Blocked", func(r types.EvictionReport) bool { return r.Generation == 3 && r.Blocked != "" })
	want := "pod default/a: eviction blocked by a PodDisruptionBudget: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently"
	if r.Blocked != want || r.Done {
		t.Errorf("report %+v, want Blocked %q", r, want)
	}
	// It retries, and nobody else is evicted meanwhile: the order holds.
	for n := 2; n <= 3; n++ {
		h.fireWait(evRetry, evRetry*6/5) // steady: a refusal is not a failure
		kubetest.WaitFor(t, "a retry", func() bool { return len(h.evictions()) == n })
	}
	for _, e := range h.evictions() {
		if e != "default/a" {
			t.Fatalf("evicted %s while a was blocked", e)
		}
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	h.tick()
	h.waitReport("Done", evDone(3))

	rs := h.allReports()
	if rs[0] != (types.EvictionReport{Generation: 3}) || rs[1].Blocked == "" || !rs[len(rs)-1].Done {
		t.Errorf("reports %+v, want the first look (pods have to go), then Blocked, and Done last", rs)
	}
	if n := slices.IndexFunc(rs[2:], func(r types.EvictionReport) bool { return r.Blocked == "" && !r.Done }); n < 0 {
		t.Errorf("reports %+v: the Blocked message was never cleared before Done", rs)
	}
	for i := 1; i < len(rs); i++ {
		if rs[i] == rs[i-1] {
			t.Errorf("report %+v sent twice in a row", rs[i])
		}
	}
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("the PodDisruptionBudget was bypassed: %v", a)
		}
	}
	if got := testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("eviction")); got != 0 {
		t.Errorf("eviction errors = %v, want 0 (a PDB refusal is not an API error)", got)
	}
}

func TestEvictorNotFoundCountsAsEvicted(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("b", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("c", "1Gi", 0, corev1.PodQOSBurstable),
	}, nil)
	h.ws = map[string]int64{"uid-a": 4 << 30, "uid-b": 3 << 30, "uid-c": 1 << 30}
	h.setOnEvict(func(ns, name string) error {
		// The pod went away between the list and the eviction.
		_ = h.client.Tracker().Delete(objects.Pods, ns, name)
		if name == "a" {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
		}
		return nil
	})
	h.run()
	// 8Gi in 3Gi: a (4Gi) and b (3Gi) go; c stays.
	h.start(context.Background(), evictOrder(1, 3<<30))
	h.waitReport("Done", evDone(1))
	if got, want := h.evictions(), []string{"default/a", "default/b"}; !slices.Equal(got, want) {
		t.Errorf("evicted %v, want %v", got, want)
	}
	for _, r := range h.allReports() {
		if r.Blocked != "" {
			t.Errorf("a pod that is already gone blocked the eviction: %+v", r)
		}
	}
	if got := testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("eviction")); got != 0 {
		t.Errorf("eviction errors = %v, want 0", got)
	}
}

func TestEvictorNewerGenerationSupersedes(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("b", "1Gi", 0, corev1.PodQOSBurstable),
	}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30, "uid-b": 2 << 30}
	inFlight, release := make(chan struct{}), make(chan struct{})
	h.setOnEvict(func(ns, name string) error {
		if name == "a" {
			close(inFlight)
			<-release // the API server is slow to answer
		}
		return evMarkDeleted(h, ns, name, h.clock.Now().Add(30*time.Second))
	})
	h.run()
	h.start(context.Background(), evictOrder(1, 1<<30)) // a and b must go
	<-inFlight
	if rs := h.allReports(); len(rs) != 1 || rs[0] != (types.EvictionReport{Generation: 1}) {
		t.Fatalf("reports %+v before the first eviction, want the first look's: pods have to go", rs)
	}
	first := 1
	// The hardware came back while a's eviction was in flight: generation
	// 2 fits without evicting anyone more.
	h.start(context.Background(), evictOrder(2, 64<<30))
	h.start(context.Background(), evictOrder(1, 1<<30)) // a late, older request: ignored
	close(release)
	// a's eviction went through after all: generation 2 waits for it to
	// terminate before it reports Done.
	// Once the evictor waits for the clock, a wrongly continuing pass
	// has shown.
	kubetest.WaitFor(t, "generation 2 to wait for a", h.clock.HasWaiters)
	if got := h.evictions(); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("evicted %v, want only a (b belonged to the superseded pass)", got)
	}
	for _, r := range h.allReports() {
		if r.Done {
			t.Fatalf("Done while the pod evicted for generation 1 is still terminating: %+v", r)
		}
	}
	if err := h.client.Tracker().Delete(objects.Pods, "default", "a"); err != nil {
		t.Fatal(err)
	}
	h.tick()
	h.waitReport("Done for generation 2", evDone(2))
	for _, r := range h.allReports()[first:] {
		if r.Generation != 2 {
			t.Errorf("report for a superseded generation: %+v", r)
		}
	}
}

func TestEvictorWaitsForEvictedPodsToTerminate(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("b", "1Gi", 0, corev1.PodQOSBurstable),
	}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30, "uid-b": 1 << 30}
	h.setOnEvict(func(ns, name string) error {
		// The API server marks the pod for deletion; the kubelet does
		// not get round to it: its grace period ended 9.5 minutes ago.
		return evMarkDeleted(h, ns, name, h.clock.Now().Add(-10*time.Minute+30*time.Second))
	})
	h.run()
	h.start(context.Background(), evictOrder(1, 2<<30))
	r := h.waitReport("a stuck pod", func(r types.EvictionReport) bool { return r.Blocked != "" })
	if !strings.Contains(r.Blocked, "pod default/a was evicted but is still terminating") {
		t.Errorf("Blocked = %q", r.Blocked)
	}
	for _, r := range h.allReports() {
		if r.Done {
			t.Fatalf("Done while the evicted pod is still there: %+v", r)
		}
	}
	if got := h.evictions(); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("evicted %v, want a once (a terminating pod is not evicted again, b still fits)", got)
	}
	if err := h.client.Tracker().Delete(objects.Pods, "default", "a"); err != nil {
		t.Fatal(err)
	}
	h.tick()
	h.waitReport("Done", evDone(1))
}

// TestEvictorHold: a held Evict looks at the pods and evicts nobody: Done
// when they fit; otherwise one report (pods have to go) and nothing more
// until the go-ahead, the same generation without Hold; a held Start of
// that generation again is not one.
func TestEvictorHold(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("a", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("b", "1Gi", 0, corev1.PodQOSBurstable),
	}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30, "uid-b": 1 << 30}
	h.run()
	held := func(gen int64, memory int64) decide.Evict {
		ev := evictOrder(gen, memory)
		ev.Hold = true
		return ev
	}
	// 4Gi of footprints in 8Gi: they fit, Done at the first look.
	h.start(context.Background(), held(1, 8<<30))
	h.waitReport("Done", evDone(1))
	// In 2Gi, a has to go: said, and held.
	h.start(context.Background(), held(2, 2<<30))
	r := h.waitReport("the first look", func(r types.EvictionReport) bool { return r.Generation == 2 })
	if r != (types.EvictionReport{Generation: 2}) {
		t.Fatalf("report %+v, want pods to go, neither Done nor Blocked", r)
	}
	h.start(context.Background(), held(2, 2<<30)) // not a go-ahead
	kubetest.WaitFor(t, "the evictor to be idle", func() bool { return !h.clock.HasWaiters() })
	time.Sleep(50 * time.Millisecond)
	if got := h.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v while held", got)
	}
	// The go-ahead.
	h.start(context.Background(), evictOrder(2, 2<<30))
	h.waitReport("Done", evDone(2))
	if got := h.evictions(); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("evicted %v, want a", got)
	}
	for _, r := range h.allReports() {
		if r.Blocked != "" {
			t.Errorf("unexpected Blocked report %+v", r)
		}
	}
}

func TestEvictorGuaranteedPodsLosingExclusiveCPUs(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("pinned", "1Gi", 1000, corev1.PodQOSGuaranteed),
		evPod("pinned-ok", "1Gi", 0, corev1.PodQOSGuaranteed),
		evPod("burstable", "1Gi", 0, corev1.PodQOSBurstable),
	}, func(o *Options) {
		o.ExclusiveCPUs = func() (map[string][]int, error) {
			return map[string][]int{"uid-pinned": {2, 3}, "uid-pinned-ok": {1}, "uid-burstable": {3}}, nil
		}
	})
	h.ws = map[string]int64{"uid-pinned": 1 << 30, "uid-pinned-ok": 1 << 30, "uid-burstable": 1 << 30}
	h.run()
	ev := evictOrder(1, 64<<30) // memory is plentiful
	ev.Allocatable["cpu"] = 3000
	h.ev.Start(context.Background(), ev, []int{0, 1, 2}, h.report)
	h.waitReport("Done", evDone(1))
	if got := h.evictions(); !slices.Equal(got, []string{"default/pinned"}) {
		t.Errorf("evicted %v, want only the Guaranteed pod whose exclusive CPU 3 went offline", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 1 || !strings.Contains(h.events[0], "exclusive CPUs 3 are no longer online") {
		t.Errorf("events %q", h.events)
	}
}

func TestEvictorAPIErrors(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{evPod("a", "1Gi", 0, corev1.PodQOSBurstable)}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30}
	var mu sync.Mutex
	listFailures, evictFailures := 1, 1
	h.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if listFailures > 0 {
			listFailures--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	h.setOnEvict(func(ns, name string) error {
		mu.Lock()
		defer mu.Unlock()
		if evictFailures > 0 {
			evictFailures--
			return apierrors.NewInternalError(errors.New("etcd is sad"))
		}
		return h.client.Tracker().Delete(objects.Pods, ns, name)
	})
	h.run()
	h.start(context.Background(), evictOrder(1, 1<<30))
	// The first look failed: said at once, so that the shrink is
	// published rather than wait for it.
	r := h.waitReport("Blocked by the list", func(r types.EvictionReport) bool { return r.Blocked != "" })
	if r.Blocked != "list pods on node worker-1: connection refused" || r.Done {
		t.Errorf("report %+v, want the failed list", r)
	}
	h.tick() // after the failed list
	r = h.waitReport("Blocked by the eviction", func(r types.EvictionReport) bool { return strings.Contains(r.Blocked, "eviction failed") })
	if !strings.Contains(r.Blocked, "pod default/a: eviction failed:") || !strings.Contains(r.Blocked, "etcd is sad") {
		t.Errorf("Blocked = %q", r.Blocked)
	}
	h.tick() // after the failed eviction
	h.waitReport("Done", evDone(1))
	if got := testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("eviction")); got != 2 {
		t.Errorf("eviction errors = %v, want 2 (one list, one eviction)", got)
	}
}

// TestEvictorRetryTiming: failed API calls back off from RetryInterval,
// doubling, jittered by up to half; a PodDisruptionBudget's refusal is
// retried after about RetryInterval and, since the API server answered,
// the next failure backs off from RetryInterval again.
func TestEvictorRetryTiming(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{evPod("a", "1Gi", 0, corev1.PodQOSBurstable)}, nil)
	h.ws = map[string]int64{"uid-a": 3 << 30}
	var mu sync.Mutex
	listFailures := 3
	h.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if listFailures > 0 {
			listFailures--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	answers := []error{pdbRefusal(), apierrors.NewInternalError(errors.New("etcd is sad"))}
	h.setOnEvict(func(ns, name string) error {
		mu.Lock()
		defer mu.Unlock()
		if len(answers) > 0 {
			err := answers[0]
			answers = answers[1:]
			return err
		}
		return h.client.Tracker().Delete(objects.Pods, ns, name)
	})
	h.run()
	h.start(context.Background(), evictOrder(1, 1<<30))
	h.fireWait(evRetry, evRetry*3/2)     // the first failed list
	h.fireWait(2*evRetry, 2*evRetry*3/2) // the second
	h.fireWait(evMaxRetry, evMaxRetry*3/2)
	h.waitReport("Blocked by the budget", func(r types.EvictionReport) bool { return strings.Contains(r.Blocked, "PodDisruptionBudget") })
	h.fireWait(evRetry, evRetry*6/5)
	h.waitReport("Blocked by the failure", func(r types.EvictionReport) bool { return strings.Contains(r.Blocked, "etcd is sad") })
	h.fireWait(evRetry, evRetry*3/2)
	h.waitReport("Done", evDone(1))
}

func TestEvictorProtectedPodsThatDoNotFit(t *testing.T) {
	static := evPod("etcd", "6Gi", 0, corev1.PodQOSBurstable)
	static.Annotations = map[string]string{annotationConfigSource: "file"}
	h := newEvHarness(t, []*corev1.Pod{static, evPod("a", "1Gi", 0, corev1.PodQOSBurstable)}, nil)
	h.ws = map[string]int64{"uid-etcd": 6 << 30, "uid-a": 1 << 30}
	h.run()
	h.start(context.Background(), evictOrder(1, 4<<30))
	r := h.waitReport("Blocked", func(r types.EvictionReport) bool { return r.Blocked != "" })
	if !strings.Contains(r.Blocked, "may not be evicted (static, mirror, system-critical) hold 6Gi") {
		t.Errorf("Blocked = %q", r.Blocked)
	}
	if got := h.evictions(); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("evicted %v, want a only (never the static pod)", got)
	}
}

func TestEvictorWithoutWorkingSets(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{
		evPod("small", "1Gi", 0, corev1.PodQOSBurstable),
		evPod("big", "3Gi", 0, corev1.PodQOSBurstable),
		evPod("important", "4Gi", 100, corev1.PodQOSBurstable),
	}, func(o *Options) { o.WorkingSet = nil })
	h.run()
	h.start(context.Background(), evictOrder(1, 5<<30))
	h.waitReport("Done", evDone(1))
	if got := h.evictions(); !slices.Equal(got, []string{"default/big"}) {
		t.Errorf("evicted %v, want big (lowest priority, largest request)", got)
	}
	if !strings.Contains(h.logs.String(), "working sets unknown") {
		t.Errorf("the log does not say working sets are unknown:\n%s", h.logs.String())
	}
}

func TestEvictorStartNeverBlocksAndRunEndsOnCancel(t *testing.T) {
	h := newEvHarness(t, []*corev1.Pod{evPod("a", "1Gi", 0, corev1.PodQOSBurstable)}, nil)
	started := make(chan struct{})
	go func() {
		for gen := int64(1); gen <= 1000; gen++ { // nobody runs the worker yet
			h.start(context.Background(), evictOrder(gen, 64<<30))
		}
		close(started)
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("Start blocked")
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan error, 1)
	go func() { finished <- h.ev.Run(ctx) }()
	h.waitReport("Done for the newest generation", evDone(1000))
	cancel()
	select {
	case err := <-finished:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, r := range h.allReports() {
		if r.Generation != 1000 {
			t.Errorf("report for an older generation: %+v", r)
		}
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	h.start(cancelled, evictOrder(2000, 1)) // a done context drops the request
	h.ev.mu.Lock()
	gen := h.ev.want.Generation
	h.ev.mu.Unlock()
	if gen != 1000 {
		t.Errorf("a request with a done context was taken: generation %d", gen)
	}
}

func TestDisruptionBudgetMessage(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}, "web", errors.New("pdb disruptions allowed is negative"))
	forbidden.ErrStatus.Details.Causes = append(forbidden.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web does not allow evicting pods currently"})
	for _, tc := range []struct {
		name string
		err  error
		pdb  bool
		msg  string
	}{
		{"429 with its cause", fmt.Errorf("evict pod default/a: %w", pdbRefusal()), true,
			"Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently"},
		{"bare 429", apierrors.NewTooManyRequests("slow down", 0), true, "slow down"},
		{"forbidden by a budget", forbidden, true, "The disruption budget web does not allow evicting pods currently"},
		{"forbidden by RBAC", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a", errors.New("no")), false, ""},
		{"not an API error", errors.New("connection refused"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, pdb := disruptionBudgetMessage(tc.err)
			if pdb != tc.pdb || !strings.Contains(msg, tc.msg) {
				t.Errorf("disruptionBudgetMessage = %q, %v; want %q, %v", msg, pdb, tc.msg, tc.pdb)
			}
		})
	}
}

// evMarkDeleted does what the API server does to an evicted pod: it sets
// the deletion timestamp to the end of the grace period.
func evMarkDeleted(h *evHarness, ns, name string, at time.Time) error {
	obj, err := h.client.Tracker().Get(objects.Pods, ns, name)
	if err != nil {
		return err
	}
	p := obj.(*unstructured.Unstructured).DeepCopy()
	p.SetDeletionTimestamp(&metav1.Time{Time: at})
	return h.client.Tracker().Update(objects.Pods, p, ns)
}
