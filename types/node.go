package types

import (
	"time"

	"github.com/node-resized/node-resized/resources"
)

// Configured-capacity sources, for NodeView.Source.
const (
	// AnnotationConfiguredCapacity holds the configured capacity as a
	// JSON ResourceList ({"cpu":"4","memory":"8Gi"}) where the API server
	// does not serve Node.spec.configuredCapacity.
	AnnotationConfiguredCapacity = "node-resized.io/configured-capacity"
	SourceSpec                   = "spec.configuredCapacity"
	SourceAnnotation             = "annotation " + AnnotationConfiguredCapacity
)

// NodeView is what the daemon needs of its Node, as the API server has it.
// It is a plain value, safe for concurrent reads.
type NodeView struct {
	Name            string
	ResourceVersion string
	// Configured is the configured capacity, and Source where it came from
	// (empty when absent).
	Configured Configured
	Source     string
	// Capacity and Allocatable are status.capacity and status.allocatable
	// as they stand.
	Capacity    resources.List
	Allocatable resources.List
	// KubeletVersion is status.nodeInfo.kubeletVersion, as the kubelet
	// reports itself ("v1.37.2"); empty until it has.
	KubeletVersion string
	// Ready is the Ready condition's status.
	Ready bool
	// Condition is the CapacityConfigured condition as published, if any.
	Condition *Condition
	// CapacityOwners maps each status.capacity resource to the field
	// manager that last changed its value (metadata.managedFields): a
	// write that leaves a value as it was does not take it over.
	CapacityOwners map[string]string
	// StatusWrites maps each field manager that wrote the Node's status to
	// when it last changed something there (to the second).
	StatusWrites map[string]time.Time
}

// NodeStatus is the Node status the daemon wants published: the managed
// resources in capacity and allocatable, and its condition. It is a plain
// value, safe for concurrent reads.
type NodeStatus struct {
	Capacity    resources.List
	Allocatable resources.List
	Condition   Condition
	// Taint says whether the Node is to carry the NoSchedule taint
	// TaintKey; the relay acts on it only where the taint is turned on.
	Taint bool
	// Since is when the hardware change behind this status was first seen
	// (the first uevent); zero when it did not come from a hardware change.
	// It feeds the event-to-acknowledged-patch latency.
	Since time.Time
}

// RelayStats are the API relay's counters, as the local API shows them. It
// is a plain value.
type RelayStats struct {
	Patches   uint64    `json:"patches"`
	LastPatch time.Time `json:"lastPatch,omitempty"`
	LastError string    `json:"lastError,omitempty"`
	Pending   bool      `json:"pending"`
	// NodeSynced is whether the Node watch has listed the Node once.
	NodeSynced bool `json:"nodeSynced"`
}

// AnnotationRelease on the Node asks, for the configured capacity it
// stands beside, for a planned release: node-resized takes the CPUs and
// memory blocks above the configured capacity offline itself, so that the
// kubelet adopts the smaller machine and the hypervisor can unplug them.
// Only the value "true" asks; the node must also allow it (the daemon's
// --release). Removing it, or the configured capacity, gives back what was
// released.
const AnnotationRelease = "node-resized.io/release"
