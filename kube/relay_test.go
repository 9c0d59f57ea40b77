package kube

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
)

func TestParseNodeConfiguredCapacity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		present bool
		source  string
		raw     map[string]string
		invalid string
	}{
		{"absent", `{"metadata":{"name":"n"}}`, false, "", nil, ""},
		{"spec field wins over annotation",
			`{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"1\"}"}},"spec":{"configuredCapacity":{"cpu":"4","memory":"8Gi"}}}`,
			true, SourceSpec, map[string]string{"cpu": "4", "memory": "8Gi"}, ""},
		{"annotation", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"2\",\"memory\":\"4Gi\"}"}}}`,
			true, SourceAnnotation, map[string]string{"cpu": "2", "memory": "4Gi"}, ""},
		{"annotation with numbers", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":2}"}}}`,
			true, SourceAnnotation, map[string]string{"cpu": "2"}, ""},
		{"garbage annotation", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"four cpus please"}}}`,
			true, SourceAnnotation, nil, "not a JSON object"},
		{"nested object", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":{\"n\":1}}"}}}`,
			true, SourceAnnotation, nil, "want a quantity string"},
		{"empty annotation is absent", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":""}}}`, false, "", nil, ""},
		{"null spec field falls back", `{"metadata":{"name":"n"},"spec":{"configuredCapacity":null}}`, false, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseNode([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			c := v.Configured
			if c.Present != tc.present || v.Source != tc.source {
				t.Fatalf("present %v source %q, want %v %q", c.Present, v.Source, tc.present, tc.source)
			}
			if tc.invalid != "" {
				if !strings.Contains(c.Invalid, tc.invalid) {
					t.Errorf("Invalid = %q, want it to say %q", c.Invalid, tc.invalid)
				}
				return
			}
			if len(c.Raw) != len(tc.raw) {
				t.Fatalf("raw %v, want %v", c.Raw, tc.raw)
			}
			for k, v := range tc.raw {
				if c.Raw[k] != v {
					t.Errorf("raw[%s] = %q, want %q", k, c.Raw[k], v)
				}
			}
		})
	}
}

func TestParseNodeStatus(t *testing.T) {
	v, err := ParseNode([]byte(`{"metadata":{"name":"n","resourceVersion":"7"},"status":{
		"capacity":{"cpu":"4","memory":"16Gi","pods":"110"},"allocatable":{"cpu":"3500m","memory":"15Gi"},
		"conditions":[{"type":"Ready","status":"True"},{"type":"CapacityConfigured","status":"False","reason":"Infeasible","message":"too big"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v.Capacity["cpu"] != 4000 || v.Capacity["memory"] != 16<<30 || v.Allocatable["cpu"] != 3500 {
		t.Errorf("capacity %v allocatable %v", v.Capacity, v.Allocatable)
	}
	if !v.Ready || v.Condition == nil || v.Condition.Reason != decide.ReasonInfeasible || v.Condition.Message != "too big" {
		t.Errorf("ready %v condition %+v", v.Ready, v.Condition)
	}
	if _, err := ParseNode([]byte(`{`)); err == nil {
		t.Error("ParseNode accepted broken JSON")
	}
}

// TestAnnotationNumbers: JSON numbers in the annotation are the quantities
// their literals spell, to the last digit; anything else that is not a
// string makes the request malformed.
func TestAnnotationNumbers(t *testing.T) {
	c := parseResourceList([]byte(`{"cpu": 1.5, "memory": 8589934592, "hugepages-2Mi": 1e3, "ephemeral-storage": 0.0000001, "x": "4"}`), SourceAnnotation)
	want := map[string]string{"cpu": "1.5", "memory": "8589934592", "hugepages-2Mi": "1e3", "ephemeral-storage": "0.0000001", "x": "4"}
	if c.Invalid != "" || !reflect.DeepEqual(c.Raw, want) {
		t.Fatalf("parsed %+v, want raw %v", c, want)
	}
	for _, bad := range []string{`{"cpu": true}`, `{"cpu": {"a": 1}}`, `{"cpu": null}`, `[1]`, `4`} {
		if c := parseResourceList([]byte(bad), SourceAnnotation); c.Invalid == "" {
			t.Errorf("%s: parsed %+v, want it invalid", bad, c)
		}
	}
}

func TestResourceListMatchesKubeletForms(t *testing.T) {
	got := (resources.List{"cpu": 4000, "memory": 24683620 << 10, "hugepages-2Mi": 0, "ephemeral-storage": 264212084 << 10}).Strings()
	want := map[string]string{"cpu": "4", "memory": "24683620Ki", "hugepages-2Mi": "0", "ephemeral-storage": "264212084Ki"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if got := (resources.List{"cpu": 3500}).Strings(); got["cpu"] != "3500m" {
		t.Errorf("cpu 3500m rendered %q", got["cpu"])
	}
}

// patchRecorder records the status patches the fake API server receives
// and fails the first n of them.
type patchRecorder struct {
	mu      sync.Mutex
	patches [][]byte
	fail    int
	got     chan struct{}
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
	if p.fail > 0 {
		p.fail--
		return true, nil, errors.New("connection refused")
	}
	p.patches = append(p.patches, pa.GetPatch())
	return false, nil, nil // let the tracker apply it
}

func (p *patchRecorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.patches)
}

func startRelay(t *testing.T, fail int) (*Relay, *fake.Clientset, *patchRecorder, *metrics.Metrics) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
	client := fake.NewClientset(node)
	rec := &patchRecorder{fail: fail, got: make(chan struct{}, 100)}
	client.PrependReactor("patch", "nodes", rec.react)
	m := metrics.New()
	r := New(client, Options{NodeName: "worker-1", Metrics: m, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, client, rec, m
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func status(cpu int64, reason decide.Reason) Status {
	st := decide.StatusTrue
	if reason != decide.ReasonAccepted {
		st = decide.StatusFalse
	}
	return Status{
		Capacity:    resources.List{"cpu": cpu * 1000, "memory": 8 << 30},
		Allocatable: resources.List{"cpu": cpu * 1000, "memory": 7 << 30},
		Condition:   decide.Condition{Status: st, Reason: reason, Message: "m"},
	}
}

func TestPatchIsMinimalAndKeepsOtherConditions(t *testing.T) {
	r, client, rec, m := startRelay(t, 0)
	s := status(4, decide.ReasonAccepted)
	s.Since = time.Now().Add(-5 * time.Millisecond)
	r.Publish(s)
	waitFor(t, "one patch", func() bool { return r.Stats().Patches == 1 })

	var body map[string]map[string]any
	if err := json.Unmarshal(rec.patches[0], &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 1 || len(body["status"]) != 3 {
		t.Errorf("patch touches more than status capacity/allocatable/conditions: %s", rec.patches[0])
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ready, ours bool
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		ours = ours || (c.Type == decide.ConditionType && c.Reason == "Accepted")
	}
	if !ready || !ours {
		t.Errorf("conditions after the patch: %+v; want Ready kept and CapacityConfigured added", n.Status.Conditions)
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.String() != "4" {
		t.Errorf("capacity cpu %s, want 4", q.String())
	}
	if n := testutil.CollectAndCount(m.PatchLatency); n != 1 {
		t.Errorf("patch latency histogram has %d series", n)
	}
}

func TestNewestStatusWinsAfterOutage(t *testing.T) {
	r, client, rec, m := startRelay(t, 3)
	// The API server is away for the first three attempts; meanwhile the
	// machine changes twice more. Only the newest status may land.
	r.Publish(status(4, decide.ReasonAccepted))
	waitFor(t, "a failed attempt", func() bool { return testutil.ToFloat64(m.ResizeErrors.WithLabelValues("api_patch")) >= 1 })
	r.Publish(status(3, decide.ReasonAccepted))
	r.Publish(status(2, decide.ReasonEmergencyReduced))
	waitFor(t, "a successful patch", func() bool { return rec.count() >= 1 })
	waitFor(t, "no pending status", func() bool { return !r.Stats().Pending })
	n, _ := client.CoreV1().Nodes().Get(context.Background(), "worker-1", metav1.GetOptions{})
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("capacity cpu %s after the outage, want the newest (2)", q.String())
	}
	if rec.count() != 1 {
		t.Errorf("%d successful patches, want 1 (older statuses are superseded)", rec.count())
	}
	if got := testutil.ToFloat64(m.ResizeErrors.WithLabelValues("api_patch")); got != 3 {
		t.Errorf("api_patch errors = %v, want 3", got)
	}
}

func TestBurstOfPublishesIsOnePatch(t *testing.T) {
	r, _, rec, _ := startRelay(t, 0)
	rec.mu.Lock() // hold the first patch so the burst piles up behind it
	for i := range 512 {
		r.Publish(status(int64(1+i%4), decide.ReasonAccepted))
	}
	rec.mu.Unlock()
	waitFor(t, "no pending status", func() bool { return !r.Stats().Pending && rec.count() > 0 })
	if n := rec.count(); n > 2 {
		t.Errorf("%d patches for a burst of 512 publishes, want at most 2", n)
	}
}

func TestRepublishWhenTheKubeletRevertsCapacity(t *testing.T) {
	r, _, rec, _ := startRelay(t, 0)
	s := status(2, decide.ReasonEmergencyReduced)
	r.Publish(s)
	waitFor(t, "the first patch", func() bool { return rec.count() == 1 && !r.Stats().Pending })
	v := NodeView{Capacity: s.Capacity, Allocatable: s.Allocatable, Condition: &s.Condition}
	r.Republish(v) // the Node shows what we sent: nothing to do
	time.Sleep(20 * time.Millisecond)
	if rec.count() != 1 {
		t.Fatalf("republished a status the Node already shows")
	}
	v.Capacity = resources.List{"cpu": 4000, "memory": 8 << 30} // the kubelet's boot-time view
	r.Republish(v)
	waitFor(t, "a second patch", func() bool { return rec.count() == 2 })
}
