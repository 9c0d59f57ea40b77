package api

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// DefaultSocket is where the daemon listens unless told otherwise.
const DefaultSocket = "/run/node-resized/node-resized.sock"

// Status is the answer to GET /v1/status.
type Status struct {
	Version  string `json:"version"`
	Hostname string `json:"hostname"`
	Mode     string `json:"mode"`
	// Epoch names this run of the daemon: change ids count from 1 in
	// each, so a change is (epoch, id); see GET /v1/events.
	Epoch string    `json:"epoch"`
	Now   time.Time `json:"now"`
	// Physical is the node's physical capacity exactly as the kubelet
	// computes it.
	Physical   resources.List   `json:"physical"`
	CPUs       topology.CPUs    `json:"cpus"`
	Memory     MemoryStatus     `json:"memory"`
	NUMANodes  []NUMANodeStatus `json:"numaNodes"`
	LastChange *monitor.Change  `json:"lastChange,omitempty"`
	Stats      monitor.Stats    `json:"stats"`
	// Kubernetes is what the daemon decided and, in Kubernetes mode,
	// published for its Node.
	Kubernetes *KubernetesStatus `json:"kubernetes,omitempty"`
	// Enforcement is the kubepods cgroup enforcer's status: what it found,
	// what it last changed and why.
	Enforcement json.RawMessage `json:"enforcement,omitempty"`
	// Kubelet is what the daemon knows of the running kubelet: its unit,
	// its view of the machine, whether that is stale, and its restarts.
	Kubelet *KubeletStatus `json:"kubelet,omitempty"`
	// Release is the planned release: whether the node allows it (the
	// daemon's --release), what is under way, and what node-resized holds
	// offline with what of it is safe to unplug; nil while none is
	// allowed and nothing is held released.
	Release *ReleaseStatus `json:"release,omitempty"`
}

// ReleaseStatus is the planned release's state.
type ReleaseStatus = agent.ReleaseStatus

// KubeletStatus is the running kubelet as the daemon sees it: its unit,
// its view of the machine, whether that view is stale, and its restarts.
type KubeletStatus = agent.KubeletStatus

// KubernetesStatus is what the daemon decided and published for its Node.
type KubernetesStatus struct {
	// NodeName is the Node; empty in standalone mode.
	NodeName string `json:"nodeName,omitempty"`
	// NodeNameSource is where the daemon found NodeName: flag
	// (--node-name), env ($NODE_NAME), kubeconfig client certificate,
	// kubeconfig user name, or hostname.
	NodeNameSource string `json:"nodeNameSource,omitempty"`
	// Configured is the configured capacity as written, and
	// ConfiguredSource where it was read (spec.configuredCapacity or the
	// annotation); empty when none is set.
	Configured       map[string]string `json:"configured,omitempty"`
	ConfiguredSource string            `json:"configuredSource,omitempty"`
	Target           resources.List    `json:"target,omitempty"`
	Allocatable      resources.List    `json:"allocatable,omitempty"`
	Condition        Condition         `json:"condition"`
	Error            string            `json:"error,omitempty"`
	Patches          uint64            `json:"patches"`
	LastPatch        time.Time         `json:"lastPatch,omitempty"`
	PatchError       string            `json:"patchError,omitempty"`
	PatchPending     bool              `json:"patchPending"`
	// Taint is the taint node-resized keeps on the Node until the kubelet
	// has adopted a loss (--taint-while-stale); empty when none.
	Taint string `json:"taint,omitempty"`
	// LimitsFailed says why the kubepods limits of the target did not
	// land (the write is retried); empty when they did.
	LimitsFailed string `json:"limitsFailed,omitempty"`
	// NodeSynced is whether the Node watch has listed the Node since the
	// daemon started (/readyz waits for it).
	NodeSynced bool `json:"nodeSynced"`
}

// Condition is the CapacityConfigured condition.
type Condition struct {
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime,omitempty"`
}

// MemoryStatus summarises the node's memory.
type MemoryStatus struct {
	TotalBytes     uint64 `json:"totalBytes"`
	SwapTotalBytes uint64 `json:"swapTotalBytes"`
	BlockSizeBytes uint64 `json:"blockSizeBytes"`
	BlocksOnline   int    `json:"blocksOnline"`
	BlocksOffline  int    `json:"blocksOffline"`
}

// NUMANodeStatus summarises one NUMA node.
type NUMANodeStatus struct {
	ID     int             `json:"id"`
	CPUs   topology.CPUSet `json:"cpus"`
	Memory uint64          `json:"memoryBytes"`
	// Capacity is the node's share of the capacity: cpu, memory and its
	// huge page pools.
	Capacity resources.List `json:"capacity"`
}

// StatusOf builds a Status from a model.
func StatusOf(snap *topology.Snapshot, c resources.List) Status {
	st := Status{
		Physical: c.Published(),
		CPUs:     snap.CPUs,
		Memory: MemoryStatus{
			TotalBytes:     snap.MemTotal,
			SwapTotalBytes: snap.SwapTotal,
			BlockSizeBytes: snap.MemoryBlockSize,
		},
		NUMANodes: []NUMANodeStatus{},
	}
	for _, b := range snap.MemoryBlocks {
		if b.State == "online" {
			st.Memory.BlocksOnline++
		} else {
			st.Memory.BlocksOffline++
		}
	}
	for i, nc := range snap.NodeCapacities() {
		n := snap.Nodes[i]
		ns := NUMANodeStatus{ID: n.ID, Memory: n.MemTotal, CPUs: topology.CPUSet{}, Capacity: nc.Capacity}
		for _, cpu := range n.CPUs {
			ns.CPUs = append(ns.CPUs, cpu.ID)
		}
		st.NUMANodes = append(st.NUMANodes, ns)
	}
	return st
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
	// Missed is set on a 410 Gone from GET /v1/events: the changes after
	// the one the client resumes from cannot all be given.
	Missed *Missed `json:"missed,omitempty"`
}

// Missed says why a client that resumes GET /v1/events missed changes,
// and where it can start again.
type Missed struct {
	// Reason is MissedRestarted or MissedExpired.
	Reason string `json:"reason"`
	// Epoch is the daemon's epoch now.
	Epoch string `json:"epoch"`
	// Oldest and Newest are the ids of the changes recorded now.
	Oldest uint64 `json:"oldest"`
	Newest uint64 `json:"newest"`
}

// Reasons of a Missed.
const (
	// MissedRestarted: the change is of another epoch; the daemon has
	// restarted since, and what happened meanwhile is not known.
	MissedRestarted = "restarted"
	// MissedExpired: the changes after it have left the history
	// (--history).
	MissedExpired = "expired"
)

// Event is a recorded change with the epoch of its id: GET /v1/events
// answers a list of them, and a stream one a line.
type Event struct {
	Epoch string `json:"epoch"`
	monitor.Change
}

// streamLine is one NDJSON line of GET /v1/events?follow=1: a change, or a
// final line that says why the daemon ended the stream.
type streamLine struct {
	Event
	Error string `json:"error,omitempty"`
}

// FormatBytes renders a byte count for people: "23.5GiB", "128.0MiB", "512B".
func FormatBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(b)/float64(div), 'f', 1, 64) + string("KMGTPE"[exp]) + "iB"
}
