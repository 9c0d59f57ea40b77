package nrt

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
func zoneLines(zones []Zone) []string {
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

func TestBuild(t *testing.T) {
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
			o := Build("worker-1", "uid-1", tc.snap, tc.kt, "")
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

// TestBuildWire pins the JSON the API server receives for one
// zone: the field names of topology.node.k8s.io/v1alpha2 and the
// quantities as the kubelet writes them.
func TestBuildWire(t *testing.T) {
	snap := &topology.Snapshot{Nodes: []topology.Node{{ID: 0, CPUs: zoneCPUs(0, 1), MemTotal: 2 * giB, Distances: []int{10}}}}
	b, err := json.Marshal(Build("worker-1", "uid-1", snap, KubeletTopology{ReservedCPUs: topology.CPUSet{1}}, ""))
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

// The pod fingerprint goes where node-feature-discovery writes it and the
// scheduler plugin reads it: the two attributes, after the topology
// manager's, and the legacy annotation.
func TestBuildFingerprint(t *testing.T) {
	const fp = "pfp0v001ef2fc57a9e1fcd5e"
	o := Build("worker-1", "uid-1", nil, KubeletTopology{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod"}, fp)
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology",` +
		`"metadata":{"name":"worker-1","annotations":{"topology.node.k8s.io/fingerprint":"` + fp + `"},` +
		`"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"worker-1","uid":"uid-1"}]},"zones":[],` +
		`"attributes":[{"name":"topologyManagerPolicy","value":"single-numa-node"},{"name":"topologyManagerScope","value":"pod"},` +
		`{"name":"nodeTopologyPodsFingerprint","value":"` + fp + `"},{"name":"nodeTopologyPodsFingerprintMethod","value":"all"}],` +
		`"topologyPolicies":["SingleNUMANodePodLevel"]}`
	if string(b) != want {
		t.Errorf("wire form\n%s\nwant\n%s", b, want)
	}
	if o := Build("worker-1", "uid-1", nil, KubeletTopology{}, ""); o.Attributes != nil || o.Metadata.Annotations != nil {
		t.Errorf("no fingerprint: attributes %v, annotations %v; want neither", o.Attributes, o.Metadata.Annotations)
	}
}
