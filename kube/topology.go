package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// NodeResourceTopologyResource is the NodeResourceTopology custom resource
// (topology.node.k8s.io/v1alpha2, cluster-scoped) that node-feature-
// discovery's topology-updater writes and the scheduler-plugins'
// NodeResourceTopologyMatch plugin reads.
var NodeResourceTopologyResource = schema.GroupVersionResource{
	Group: "topology.node.k8s.io", Version: "v1alpha2", Resource: "noderesourcetopologies",
}

// FieldManager is the field manager of every write node-resized makes.
const FieldManager = "node-resized"

// The NodeResourceTopology v1alpha2 wire types, as the upstream API
// (github.com/k8stopologyawareschedwg/noderesourcetopology-api) defines
// them: only what node-resized writes.

// NodeResourceTopology is the object for one Node, named after it.
type NodeResourceTopology struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Metadata   NodeResourceMeta    `json:"metadata"`
	Zones      []TopologyZone      `json:"zones"`
	Attributes []TopologyAttribute `json:"attributes,omitempty"`
	// TopologyPolicies is deprecated upstream in favour of Attributes;
	// written as node-feature-discovery writes it, for older schedulers.
	TopologyPolicies []string `json:"topologyPolicies,omitempty"`
}

// NodeResourceMeta is the part of the object's metadata node-resized owns.
type NodeResourceMeta struct {
	Name            string                  `json:"name"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// TopologyZone is one NUMA node.
type TopologyZone struct {
	Name      string                 `json:"name"`
	Type      string                 `json:"type"`
	Costs     []TopologyCost         `json:"costs,omitempty"`
	Resources []TopologyResourceInfo `json:"resources,omitempty"`
}

// TopologyCost is the distance from the zone to another (SLIT).
type TopologyCost struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// TopologyResourceInfo is one resource of a zone.
type TopologyResourceInfo struct {
	Name        string            `json:"name"`
	Capacity    resource.Quantity `json:"capacity"`
	Allocatable resource.Quantity `json:"allocatable"`
	Available   resource.Quantity `json:"available"`
}

// TopologyAttribute is a name and a value.
type TopologyAttribute struct {
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

// BuildTopology builds the NodeResourceTopology object of Node node (uid)
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
func BuildTopology(node string, uid types.UID, snap *topology.Snapshot, kt KubeletTopology) NodeResourceTopology {
	o := NodeResourceTopology{
		APIVersion: NodeResourceTopologyResource.GroupVersion().String(),
		Kind:       "NodeResourceTopology",
		Metadata: NodeResourceMeta{
			Name: node,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: uid,
			}},
		},
		Zones: []TopologyZone{},
	}
	if kt.TopologyManagerPolicy != "" {
		scope := kt.TopologyManagerScope
		if scope == "" {
			scope = "container" // the kubelet's default
		}
		o.Attributes = []TopologyAttribute{
			{Name: "topologyManagerPolicy", Value: kt.TopologyManagerPolicy},
			{Name: "topologyManagerScope", Value: scope},
		}
		if p := topologyPolicy(kt.TopologyManagerPolicy, scope); p != "" {
			o.TopologyPolicies = []string{p}
		}
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
func zone(n topology.Node, all []topology.Node, kt KubeletTopology) TopologyZone {
	z := TopologyZone{Name: zoneName(n.ID), Type: ZoneTypeNode}
	if len(n.Distances) == len(all) {
		for i, d := range n.Distances {
			z.Costs = append(z.Costs, TopologyCost{Name: zoneName(all[i].ID), Value: int64(d)})
		}
	}
	reserved := kt.ReservedMemory[n.ID]
	add := func(name string, capacity, allocatable int64) {
		allocatable = max(allocatable, 0)
		z.Resources = append(z.Resources, TopologyResourceInfo{
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
	slices.SortFunc(z.Resources, func(a, b TopologyResourceInfo) int { return strings.Compare(a.Name, b.Name) })
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

// TopologyOptions configure the TopologyPublisher.
type TopologyOptions struct {
	// NodeName is the Node the object is for and named after.
	NodeName string
	// Kubelet is what the kubelet's configuration says about topology.
	Kubelet KubeletTopology
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// MinBackoff and MaxBackoff bound the retry delay after a failed
	// write (defaults 200ms and 30s), doubled and jittered as the
	// relay's (see retryJitter).
	MinBackoff, MaxBackoff time.Duration
	// Clock is the publisher's clock (default the real one).
	Clock clock.Clock
}

// TopologyPublisher keeps the Node's NodeResourceTopology object equal to
// the newest machine model, with server-side apply (field manager
// node-resized, forced) and an owner reference to the Node, so that the
// object goes when the Node does. It is safe for concurrent use; Run must
// be called once.
type TopologyPublisher struct {
	opts  TopologyOptions
	nodes dynamic.NamespaceableResourceInterface
	nrts  dynamic.NamespaceableResourceInterface
	log   *slog.Logger
	m     *metrics.Metrics
	clock clock.Clock
	wake  chan struct{}

	mu      sync.Mutex // guards the fields below
	want    *topology.Snapshot
	since   time.Time // the first hardware event the wanted model has not yet been written for
	written []byte    // the last object the API server acknowledged, as applied
	applies uint64
	lastErr error
}

// NewTopologyPublisher returns a publisher that reads the Node and writes
// its NodeResourceTopology through client.
func NewTopologyPublisher(client dynamic.Interface, opts TopologyOptions) *TopologyPublisher {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &TopologyPublisher{
		opts:  opts,
		nodes: client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}),
		nrts:  client.Resource(NodeResourceTopologyResource),
		log:   opts.Logger,
		m:     opts.Metrics,
		clock: opts.Clock,
		wake:  make(chan struct{}, 1),
	}
}

// TopologyPublisher returns a publisher that uses the relay's API
// connection.
func (r *Relay) TopologyPublisher(opts TopologyOptions) *TopologyPublisher {
	return NewTopologyPublisher(r.dyn, opts)
}

// Publish sets the model the object should show; since is the arrival of
// the hardware event that changed it (zero for none). It never blocks: the
// worker writes the newest model, so a burst of changes costs one write.
func (p *TopologyPublisher) Publish(snap *topology.Snapshot, since time.Time) {
	p.mu.Lock()
	// Keep the earliest unwritten hardware change for the latency.
	if p.want == nil || (!since.IsZero() && (p.since.IsZero() || since.Before(p.since))) {
		p.since = since
	}
	p.want = snap
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// TopologyStats are the publisher's counters.
type TopologyStats struct {
	Applies   uint64
	Pending   bool
	LastError string
}

// Stats returns the publisher's counters.
func (p *TopologyPublisher) Stats() TopologyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := TopologyStats{Applies: p.applies, Pending: p.want != nil}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	return s
}

// Run writes the wanted models until ctx is done. A failed write is
// retried with jittered exponential backoff, always with the newest
// model; a newer model is written at once. It returns nil once ctx is
// done.
func (p *TopologyPublisher) Run(ctx context.Context) error {
	backoff := retryBackoff(p.opts.MinBackoff, p.opts.MaxBackoff)
	var retry clock.Timer
	defer func() { stopTimer(retry) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-timerC(retry):
		}
		stopTimer(retry)
		retry = nil
		p.mu.Lock()
		want, since := p.want, p.since
		p.mu.Unlock()
		if want == nil {
			continue
		}
		err := p.write(ctx, want, since)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			delay := backoff.Step()
			p.failed(err, delay)
			retry = p.clock.NewTimer(delay)
			continue
		}
		backoff = retryBackoff(p.opts.MinBackoff, p.opts.MaxBackoff)
	}
}

// write reads the Node's UID (a Node deleted and created again under the
// same name gets the new one) and applies the object built from snap,
// unless the API server already has exactly that object from this
// publisher.
func (p *TopologyPublisher) write(ctx context.Context, snap *topology.Snapshot, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	node, err := p.nodes.Get(ctx, p.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Node %s for its UID: %w", p.opts.NodeName, err)
	}
	obj := BuildTopology(p.opts.NodeName, node.GetUID(), snap, p.opts.Kubelet)
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode NodeResourceTopology %s: %w", p.opts.NodeName, err)
	}
	p.mu.Lock()
	same := slices.Equal(data, p.written)
	p.mu.Unlock()
	if !same {
		force := true
		_, err = p.nrts.Patch(ctx, p.opts.NodeName, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("apply NodeResourceTopology %s: %w (is the %s CRD installed?)", p.opts.NodeName, err, NodeResourceTopologyResource.GroupResource())
		}
		if err != nil {
			return fmt.Errorf("apply NodeResourceTopology %s: %w", p.opts.NodeName, err)
		}
	}
	p.mu.Lock()
	p.lastErr = nil
	p.written = data
	if !same {
		p.applies++
	}
	if p.want == snap {
		p.want, p.since = nil, time.Time{} // nothing newer arrived meanwhile
	}
	p.mu.Unlock()
	if same {
		return nil
	}
	args := []any{"node", p.opts.NodeName, "zones", zoneSummary(obj.Zones)}
	if !since.IsZero() {
		args = append(args, "latency", p.clock.Since(since))
	}
	p.log.Info("NodeResourceTopology applied", args...)
	return nil
}

// failed records a failed write.
func (p *TopologyPublisher) failed(err error, retryIn time.Duration) {
	p.mu.Lock()
	p.lastErr = err
	p.written = nil // the object may have changed or gone meanwhile
	p.mu.Unlock()
	p.m.ResizeErrors.WithLabelValues("api_topology").Inc()
	p.log.Warn("publish NodeResourceTopology; will retry", "node", p.opts.NodeName, "err", err, "in", retryIn)
}

// zoneSummary is "node-0 cpu 2 memory 2Gi, node-1 ..." for the log.
func zoneSummary(zones []TopologyZone) string {
	parts := make([]string, len(zones))
	for i, z := range zones {
		var b strings.Builder
		b.WriteString(z.Name)
		for _, r := range z.Resources {
			if resources.Headline(r.Name) {
				fmt.Fprintf(&b, " %s %s", r.Name, r.Capacity.String())
			}
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, ", ")
}
