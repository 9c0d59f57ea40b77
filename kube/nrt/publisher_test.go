package nrt

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/metrics"
)

// applyRecorder stands in for the API server's NodeResourceTopology
// endpoint: it records each apply and fails the first fail of them.
type applyRecorder struct {
	mu      sync.Mutex
	fail    int
	tries   int
	applies []k8stesting.PatchActionImpl
	got     chan struct{}
}

func (a *applyRecorder) react(act k8stesting.Action) (bool, runtime.Object, error) {
	pa := act.(k8stesting.PatchActionImpl)
	a.mu.Lock()
	defer func() {
		a.mu.Unlock()
		a.got <- struct{}{}
	}()
	a.tries++
	if a.fail > 0 {
		a.fail--
		return true, nil, errors.New("connection refused")
	}
	a.applies = append(a.applies, pa)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(pa.GetPatch()); err != nil {
		return true, nil, err
	}
	return true, u, nil
}

func (a *applyRecorder) snapshot() (tries int, applies []k8stesting.PatchActionImpl) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tries, append([]k8stesting.PatchActionImpl(nil), a.applies...)
}

func startPublisher(t *testing.T, fail int) (*Publisher, *applyRecorder, *metrics.Metrics) {
	t.Helper()
	return startPublisherWith(t, fail, Options{})
}

// startPublisherWith starts a publisher with opts, for Node worker-1.
func startPublisherWith(t *testing.T, fail int, opts Options) (*Publisher, *applyRecorder, *metrics.Metrics) {
	t.Helper()
	node := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "worker-1", "uid": "0f7c-node-uid"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{objects.Nodes: "NodeList", Resource: "NodeResourceTopologyList"}, node)
	rec := &applyRecorder{fail: fail, got: make(chan struct{}, 100)}
	client.PrependReactor("patch", "noderesourcetopologies", rec.react)
	m := metrics.New()
	opts.NodeName, opts.Metrics = "worker-1", m
	opts.MinBackoff, opts.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	p := New(client, opts)
	kubetest.Run(t, p.Run)
	return p, rec, m
}

// TestPublisherRetriesTheNewest: writes that fail are retried
// with backoff, and what is finally applied is the newest model, with
// server-side apply forced under node-resized's field manager and the
// Node's UID in the owner reference. The same model again costs no write.
func TestPublisherRetriesTheNewest(t *testing.T) {
	p, rec, m := startPublisher(t, 3)
	first := twoNodes()
	p.Publish(first, time.Now())
	<-rec.got // the first try failed; a smaller machine arrives meanwhile
	second := twoNodes()
	second.Nodes[0].CPUs = zoneCPUs(0, 1)
	p.Publish(second, time.Now())
	kubetest.WaitFor(t, "an apply", func() bool { _, a := rec.snapshot(); return len(a) == 1 })
	tries, applies := rec.snapshot()
	if tries != 4 {
		t.Errorf("%d tries, want 4 (3 failed)", tries)
	}
	if got := testutil.ToFloat64(m.ResizeErrors.WithLabelValues("api_topology")); got != 3 {
		t.Errorf("node_resized_resize_errors_total{subsystem=api_topology} = %v, want 3", got)
	}
	a := applies[0]
	if a.GetPatchType() != types.ApplyPatchType || a.GetName() != "worker-1" {
		t.Errorf("patch %s of %q, want a server-side apply of worker-1", a.GetPatchType(), a.GetName())
	}
	if a.PatchOptions.FieldManager != "node-resized" || a.PatchOptions.Force == nil || !*a.PatchOptions.Force {
		t.Errorf("patch options %+v, want field manager node-resized, forced", a.PatchOptions)
	}
	var got NodeResourceTopology
	if err := json.Unmarshal(a.GetPatch(), &got); err != nil {
		t.Fatal(err)
	}
	if o := got.Metadata.OwnerReferences; len(o) != 1 || o[0].UID != "0f7c-node-uid" || o[0].Kind != "Node" {
		t.Errorf("owner references %+v, want the Node's UID", o)
	}
	if z := zoneLines(got.Zones); z[0] != "node-0 Node [node-0=10 node-1=21] cpu=2/2/2 memory=4Gi/4Gi/4Gi" {
		t.Errorf("applied zone %q, want the newest model's 2 CPUs", z[0])
	}
	kubetest.WaitFor(t, "nothing pending", func() bool { return !p.Stats().Pending })
	if s := p.Stats(); s.Applies != 1 || s.LastError != "" {
		t.Errorf("stats %+v, want 1 apply, no error", s)
	}

	// The same machine again (a change the object does not show): no write.
	same := twoNodes()
	same.Nodes[0].CPUs = zoneCPUs(0, 1)
	same.MemoryBlockSize = 128 * miB
	p.Publish(same, time.Time{})
	kubetest.WaitFor(t, "nothing pending", func() bool { return !p.Stats().Pending })
	if tries2, _ := rec.snapshot(); tries2 != tries {
		t.Errorf("an unchanged object was applied again (%d tries, had %d)", tries2, tries)
	}
	// A different one: written.
	p.Publish(twoNodes(), time.Time{})
	kubetest.WaitFor(t, "a second apply", func() bool { _, a := rec.snapshot(); return len(a) == 2 })

	// A write that fails may have reached the API server or not: the
	// model written before it is written again.
	kubetest.WaitFor(t, "nothing pending", func() bool { return !p.Stats().Pending })
	for len(rec.got) > 0 {
		<-rec.got
	}
	rec.mu.Lock()
	rec.fail = 1
	rec.mu.Unlock()
	p.Publish(second, time.Time{})
	<-rec.got // failed; before the retry (50ms on), the machine is back
	p.Publish(twoNodes(), time.Time{})
	kubetest.WaitFor(t, "a third apply", func() bool { _, a := rec.snapshot(); return len(a) == 3 })
	_, applies = rec.snapshot()
	if err := json.Unmarshal(applies[2].GetPatch(), &got); err != nil {
		t.Fatal(err)
	}
	if z := zoneLines(got.Zones); z[0] != "node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi" {
		t.Errorf("applied zone %q after a failed write, want the 4 CPUs again", z[0])
	}
}

// kubeletPods is a kubelet's pod-resources List that the test changes.
type kubeletPods struct {
	mu    sync.Mutex
	pods  []Pod
	err   error
	calls int
}

func (k *kubeletPods) list(context.Context) ([]Pod, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	return slices.Clone(k.pods), k.err
}

func (k *kubeletPods) set(pods []Pod, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods, k.err = pods, err
}

// fingerprintOf returns the fingerprint attributes and annotation of an
// applied object.
func fingerprintOf(t *testing.T, a k8stesting.PatchActionImpl) (attr, method, annotation string) {
	t.Helper()
	var got NodeResourceTopology
	if err := json.Unmarshal(a.GetPatch(), &got); err != nil {
		t.Fatal(err)
	}
	for _, at := range got.Attributes {
		switch at.Name {
		case FingerprintAttribute:
			attr = at.Value
		case FingerprintMethodAttribute:
			method = at.Value
		}
	}
	return attr, method, got.Metadata.Annotations[FingerprintAnnotation]
}

// The object carries the fingerprint of the pods the kubelet lists from
// its first write, and is written again when pods come and go, with no
// change of the machine. A List that fails keeps the last fingerprint.
func TestPublisherFollowsThePods(t *testing.T) {
	k := &kubeletPods{pods: []Pod{{"default", "web-0"}}}
	p, rec, _ := startPublisherWith(t, 0, Options{Pods: k.list, PodsEvery: 20 * time.Millisecond})
	p.Publish(twoNodes(), time.Time{})
	kubetest.WaitFor(t, "an apply", func() bool { _, a := rec.snapshot(); return len(a) == 1 })
	_, applies := rec.snapshot()
	check := func(a k8stesting.PatchActionImpl, pods []Pod) {
		t.Helper()
		want := PodFingerprint(pods)
		if attr, method, ann := fingerprintOf(t, a); attr != want || method != "all" || ann != want {
			t.Errorf("fingerprint attribute %q method %q annotation %q, want %s, all, %s", attr, method, ann, want, want)
		}
	}
	check(applies[0], []Pod{{"default", "web-0"}})

	// A pod comes: written again, the machine unchanged.
	two := []Pod{{"default", "web-0"}, {"kube-system", "coredns-0"}}
	k.set(two, nil)
	kubetest.WaitFor(t, "a second apply", func() bool { _, a := rec.snapshot(); return len(a) == 2 })
	_, applies = rec.snapshot()
	check(applies[1], two)

	// The kubelet does not answer: the last fingerprint stays, no write.
	k.set(nil, errors.New("connection refused"))
	k.mu.Lock()
	calls := k.calls
	k.mu.Unlock()
	kubetest.WaitFor(t, "three more Lists", func() bool { k.mu.Lock(); defer k.mu.Unlock(); return k.calls >= calls+3 })
	if _, a := rec.snapshot(); len(a) != 2 || p.Stats().PodsFingerprint != PodFingerprint(two) {
		t.Errorf("%d applies, fingerprint %s after failed Lists; want 2 and %s", len(a), p.Stats().PodsFingerprint, PodFingerprint(two))
	}

	// Both pods go.
	k.set(nil, nil)
	kubetest.WaitFor(t, "a third apply", func() bool { _, a := rec.snapshot(); return len(a) == 3 })
	_, applies = rec.snapshot()
	check(applies[2], nil)
}
