package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/topology"
)

const (
	giB = 1 << 30
	miB = 1 << 20
)

// zoneCPUs returns the online CPUs ids, two to a core, on one socket.
func zoneCPUs(ids ...int) []topology.CPU {
	out := make([]topology.CPU, len(ids))
	for i, id := range ids {
		out[i] = topology.CPU{ID: id, CoreID: id / 2}
	}
	return out
}

// twoNodes is a machine of two NUMA nodes: 0 with CPUs 0-3 and 4 GiB, 1
// with CPUs 4-5 (6 and 7 offline) and 2 GiB, 512 × 2 MiB hugepages on
// node 1, SLIT distances 10/21.
func twoNodes() *topology.Snapshot {
	return &topology.Snapshot{
		CPUs: topology.CPUs{Online: topology.CPUSet{0, 1, 2, 3, 4, 5}},
		Nodes: []topology.Node{
			{ID: 0, CPUs: zoneCPUs(0, 1, 2, 3), MemTotal: 4 * giB, Distances: []int{10, 21}},
			{ID: 1, CPUs: zoneCPUs(4, 5), MemTotal: 2 * giB, Distances: []int{21, 10},
				Hugepages: []topology.Hugepages{{PageSize: 2 * miB, Count: 512}}},
		},
		MemTotal: 6 * giB,
	}
}

// zoneLines renders zones as "node-0 [node-0=10 node-1=21] cpu=4/3/3 memory=..."
// (capacity/allocatable/available).
func zoneLines(zones []TopologyZone) []string {
	var out []string
	for _, z := range zones {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s [", z.Name, z.Type)
		for i, c := range z.Costs {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", c.Name, c.Value)
		}
		b.WriteByte(']')
		for _, r := range z.Resources {
			fmt.Fprintf(&b, " %s=%s/%s/%s", r.Name, r.Capacity.String(), r.Allocatable.String(), r.Available.String())
		}
		out = append(out, b.String())
	}
	return out
}

func TestBuildTopology(t *testing.T) {
	noNUMA := &topology.Snapshot{CPUs: topology.CPUs{Online: topology.CPUSet{0, 1}}, MemTotal: 4 * giB}
	oddDistances := twoNodes()
	oddDistances.Nodes[1].Distances = []int{21} // a short distance file
	for _, tc := range []struct {
		name     string
		snap     *topology.Snapshot
		kt       KubeletTopology
		zones    []string
		attrs    string // "name=value ..."
		policies string
	}{
		{
			name: "two nodes, the kubelet's defaults unknown",
			snap: twoNodes(),
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/2/2 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/1Gi/1Gi",
			},
		},
		{
			name: "reservedSystemCPUs on both nodes, one of them offline",
			snap: twoNodes(),
			kt:   KubeletTopology{ReservedCPUs: topology.CPUSet{0, 4, 7}},
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/3/3 memory=4Gi/4Gi/4Gi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/1/1 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/1Gi/1Gi",
			},
		},
		{
			name: "reservedMemory for memory and hugepages",
			snap: twoNodes(),
			kt: KubeletTopology{ReservedMemory: map[int]map[string]uint64{
				0: {"memory": 512 * miB},
				1: {"memory": 256 * miB, "hugepages-2Mi": 4 * miB},
			}},
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/3584Mi/3584Mi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/2/2 hugepages-2Mi=1Gi/1020Mi/1020Mi memory=2Gi/768Mi/768Mi",
			},
		},
		{
			name: "reservations above the node's capacity leave nothing",
			snap: twoNodes(),
			kt: KubeletTopology{ReservedCPUs: topology.CPUSet{4, 5}, ReservedMemory: map[int]map[string]uint64{
				1: {"memory": 2 * giB},
			}},
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/0/0 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/0/0",
			},
		},
		{
			name:     "single-numa-node, pod scope",
			snap:     twoNodes(),
			kt:       KubeletTopology{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod"},
			attrs:    "topologyManagerPolicy=single-numa-node topologyManagerScope=pod",
			policies: "SingleNUMANodePodLevel",
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/2/2 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/1Gi/1Gi",
			},
		},
		{
			name:     "none, the default scope",
			snap:     twoNodes(),
			kt:       KubeletTopology{TopologyManagerPolicy: "none"},
			attrs:    "topologyManagerPolicy=none topologyManagerScope=container",
			policies: "None",
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi",
				"node-1 Node [node-0=21 node-1=10] cpu=2/2/2 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/1Gi/1Gi",
			},
		},
		{
			name:  "restricted, container scope; a distance file that does not name every node gives no costs",
			snap:  oddDistances,
			kt:    KubeletTopology{TopologyManagerPolicy: "restricted", TopologyManagerScope: "container"},
			attrs: "topologyManagerPolicy=restricted topologyManagerScope=container", policies: "RestrictedContainerLevel",
			zones: []string{
				"node-0 Node [node-0=10 node-1=21] cpu=4/4/4 memory=4Gi/4Gi/4Gi",
				"node-1 Node [] cpu=2/2/2 hugepages-2Mi=1Gi/1Gi/1Gi memory=2Gi/1Gi/1Gi",
			},
		},
		{
			name:  "a policy topologyPolicies has no name for",
			snap:  noNUMA,
			kt:    KubeletTopology{TopologyManagerPolicy: "future-policy"},
			attrs: "topologyManagerPolicy=future-policy topologyManagerScope=container",
		},
		{name: "no NUMA node directories: no zones", snap: noNUMA},
		{name: "no model yet", snap: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := BuildTopology("worker-1", "uid-1", tc.snap, tc.kt)
			if o.APIVersion != "topology.node.k8s.io/v1alpha2" || o.Kind != "NodeResourceTopology" || o.Metadata.Name != "worker-1" {
				t.Errorf("object %s %s %q", o.APIVersion, o.Kind, o.Metadata.Name)
			}
			want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "worker-1", UID: "uid-1"}}
			if fmt.Sprint(o.Metadata.OwnerReferences) != fmt.Sprint(want) {
				t.Errorf("owner references %+v, want %+v", o.Metadata.OwnerReferences, want)
			}
			if got := zoneLines(o.Zones); strings.Join(got, "\n") != strings.Join(tc.zones, "\n") {
				t.Errorf("zones:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.zones, "\n"))
			}
			var attrs []string
			for _, a := range o.Attributes {
				attrs = append(attrs, a.Name+"="+a.Value)
			}
			if got := strings.Join(attrs, " "); got != tc.attrs {
				t.Errorf("attributes %q, want %q", got, tc.attrs)
			}
			if got := strings.Join(o.TopologyPolicies, " "); got != tc.policies {
				t.Errorf("topologyPolicies %q, want %q", got, tc.policies)
			}
			// The wire form: zones is required by the CRD, even empty.
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"zones":[`) {
				t.Errorf("no zones field in %s", b)
			}
		})
	}
}

// TestBuildTopologyWire pins the JSON the API server receives for one
// zone: the field names of topology.node.k8s.io/v1alpha2 and the
// quantities as the kubelet writes them.
func TestBuildTopologyWire(t *testing.T) {
	snap := &topology.Snapshot{Nodes: []topology.Node{{ID: 0, CPUs: zoneCPUs(0, 1), MemTotal: 2 * giB, Distances: []int{10}}}}
	b, err := json.Marshal(BuildTopology("worker-1", "uid-1", snap, KubeletTopology{ReservedCPUs: topology.CPUSet{1}}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology",` +
		`"metadata":{"name":"worker-1","ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"worker-1","uid":"uid-1"}]},` +
		`"zones":[{"name":"node-0","type":"Node","costs":[{"name":"node-0","value":10}],"resources":[` +
		`{"name":"cpu","capacity":"2","allocatable":"1","available":"1"},` +
		`{"name":"memory","capacity":"2Gi","allocatable":"2Gi","available":"2Gi"}]}]}`
	if string(b) != want {
		t.Errorf("wire form\n%s\nwant\n%s", b, want)
	}
}

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

func startPublisher(t *testing.T, fail int) (*TopologyPublisher, *applyRecorder, *metrics.Metrics) {
	t.Helper()
	node := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "worker-1", "uid": "0f7c-node-uid"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{objects.Nodes: "NodeList", NodeResourceTopologyResource: "NodeResourceTopologyList"}, node)
	rec := &applyRecorder{fail: fail, got: make(chan struct{}, 100)}
	client.PrependReactor("patch", "noderesourcetopologies", rec.react)
	m := metrics.New()
	p := NewTopologyPublisher(client, TopologyOptions{NodeName: "worker-1", Metrics: m,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	kubetest.Run(t, p.Run)
	return p, rec, m
}

// TestTopologyPublisherRetriesTheNewest: writes that fail are retried
// with backoff, and what is finally applied is the newest model, with
// server-side apply forced under node-resized's field manager and the
// Node's UID in the owner reference. The same model again costs no write.
func TestTopologyPublisherRetriesTheNewest(t *testing.T) {
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
