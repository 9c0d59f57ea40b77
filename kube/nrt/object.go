package nrt

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// Resource is the NodeResourceTopology custom resource
// (topology.node.k8s.io/v1alpha2, cluster-scoped) that node-feature-
// discovery's topology-updater writes and the scheduler-plugins'
// NodeResourceTopologyMatch plugin reads.
var Resource = schema.GroupVersionResource{
	Group: "topology.node.k8s.io", Version: "v1alpha2", Resource: "noderesourcetopologies",
}

// The NodeResourceTopology v1alpha2 wire types, as the upstream API
// (github.com/k8stopologyawareschedwg/noderesourcetopology-api) defines
// them: only what node-resized writes.

// NodeResourceTopology is the object for one Node, named after it.
type NodeResourceTopology struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   Meta        `json:"metadata"`
	Zones      []Zone      `json:"zones"`
	Attributes []Attribute `json:"attributes,omitempty"`
	// TopologyPolicies is deprecated upstream in favour of Attributes;
	// written as node-feature-discovery writes it, for older schedulers.
	TopologyPolicies []string `json:"topologyPolicies,omitempty"`
}

// Meta is the part of the object's metadata node-resized owns.
type Meta struct {
	Name            string                  `json:"name"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// Zone is one NUMA node.
type Zone struct {
	Name      string         `json:"name"`
	Type      string         `json:"type"`
	Costs     []Cost         `json:"costs,omitempty"`
	Resources []ResourceInfo `json:"resources,omitempty"`
}

// Cost is the distance from the zone to another (SLIT).
type Cost struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// ResourceInfo is one resource of a zone.
type ResourceInfo struct {
	Name        string            `json:"name"`
	Capacity    resource.Quantity `json:"capacity"`
	Allocatable resource.Quantity `json:"allocatable"`
	Available   resource.Quantity `json:"available"`
}

// Attribute is a name and a value.
type Attribute struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ZoneTypeNode is the zone type of a NUMA node.
const ZoneTypeNode = "Node"

// KubeletTopology is what the kubelet's configuration says about the
// machine's topology, for the NodeResourceTopology object.
type KubeletTopology struct {
	// TopologyManagerPolicy and TopologyManagerScope are the kubelet's
	// (none, best-effort, restricted, single-numa-node; container, pod).
	// An empty policy leaves the attributes and topologyPolicies out.
	TopologyManagerPolicy string
	TopologyManagerScope  string
	// ReservedCPUs is reservedSystemCPUs: those CPUs are no zone's
	// allocatable.
	ReservedCPUs topology.CPUSet
	// ReservedMemory is reservedMemory, by NUMA node and resource name
	// (memory, hugepages-<size>), in bytes.
	ReservedMemory map[int]map[string]uint64
}

// Build builds the NodeResourceTopology object of Node node (uid)
// from the machine model. It reads nothing.
//
// One zone per NUMA node, "node-<id>", of type Node, with the SLIT
// distances as costs ("node-<id>" of each node, itself included). Its
// resources mean what they mean in the Node's status, for the node's
// share of the machine:
//
//   - cpu: capacity is the node's online CPUs; allocatable leaves out
//     those in reservedSystemCPUs;
//   - memory: capacity is the node's MemTotal (nodeN/meminfo);
//     allocatable leaves out the node's hugepage pools and its
//     reservedMemory for memory;
//   - hugepages-<size>: capacity is the node's pool; allocatable leaves
//     out its reservedMemory for that size.
//
// Available is allocatable: node-resized follows the machine, not the
// pods, and does not subtract what running pods hold. A machine without
// NUMA node directories has no zones.
//
// fingerprint, when not "", is the pod fingerprint (PodFingerprint) of
// the pods the kubelet runs, written as node-feature-discovery writes it:
// the attributes nodeTopologyPodsFingerprint and
// nodeTopologyPodsFingerprintMethod ("all"), after the topology
// manager's, and the legacy annotation topology.node.k8s.io/fingerprint.
func Build(node string, uid types.UID, snap *topology.Snapshot, kt KubeletTopology, fingerprint string) NodeResourceTopology {
	o := NodeResourceTopology{
		APIVersion: Resource.GroupVersion().String(),
		Kind:       "NodeResourceTopology",
		Metadata: Meta{
			Name: node,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: uid,
			}},
		},
		Zones: []Zone{},
	}
	if kt.TopologyManagerPolicy != "" {
		scope := kt.TopologyManagerScope
		if scope == "" {
			scope = "container" // the kubelet's default
		}
		o.Attributes = []Attribute{
			{Name: "topologyManagerPolicy", Value: kt.TopologyManagerPolicy},
			{Name: "topologyManagerScope", Value: scope},
		}
		if p := topologyPolicy(kt.TopologyManagerPolicy, scope); p != "" {
			o.TopologyPolicies = []string{p}
		}
	}
	if fingerprint != "" {
		o.Attributes = append(o.Attributes,
			Attribute{Name: FingerprintAttribute, Value: fingerprint},
			Attribute{Name: FingerprintMethodAttribute, Value: FingerprintMethodAll})
		o.Metadata.Annotations = map[string]string{FingerprintAnnotation: fingerprint}
	}
	if snap == nil {
		return o
	}
	for _, n := range snap.Nodes {
		o.Zones = append(o.Zones, zone(n, snap.Nodes, kt))
	}
	return o
}

// zone builds NUMA node n's zone.
func zone(n topology.Node, all []topology.Node, kt KubeletTopology) Zone {
	z := Zone{Name: zoneName(n.ID), Type: ZoneTypeNode}
	if len(n.Distances) == len(all) {
		for i, d := range n.Distances {
			z.Costs = append(z.Costs, Cost{Name: zoneName(all[i].ID), Value: int64(d)})
		}
	}
	reserved := kt.ReservedMemory[n.ID]
	add := func(name string, capacity, allocatable int64) {
		allocatable = max(allocatable, 0)
		z.Resources = append(z.Resources, ResourceInfo{
			Name:        name,
			Capacity:    resources.Quantity(name, capacity),
			Allocatable: resources.Quantity(name, allocatable),
			Available:   resources.Quantity(name, allocatable),
		})
	}
	cpus := int64(len(n.CPUs))
	held := int64(0)
	for _, c := range n.CPUs {
		if kt.ReservedCPUs.Contains(c.ID) {
			held++
		}
	}
	add(resources.CPU, cpus*1000, (cpus-held)*1000)
	var huge int64
	for _, p := range n.Hugepages {
		name := resources.HugePagesName(int64(p.PageSize))
		size := int64(p.PageSize * p.Count)
		huge += size
		add(name, size, size-int64(reserved[name]))
	}
	add(resources.Memory, int64(n.MemTotal), int64(n.MemTotal)-huge-int64(reserved[resources.Memory]))
	slices.SortFunc(z.Resources, func(a, b ResourceInfo) int { return strings.Compare(a.Name, b.Name) })
	return z
}

func zoneName(id int) string { return "node-" + strconv.Itoa(id) }

// topologyPolicy is the deprecated topologyPolicies value for the
// kubelet's topology manager policy and scope, as node-feature-discovery
// derives it; "" for a policy it does not know.
func topologyPolicy(policy, scope string) string {
	level := "ContainerLevel"
	if scope == "pod" {
		level = "PodLevel"
	}
	switch policy {
	case "none":
		return "None"
	case "best-effort":
		return "BestEffort" + level
	case "restricted":
		return "Restricted" + level
	case "single-numa-node":
		return "SingleNUMANode" + level
	}
	return ""
}
