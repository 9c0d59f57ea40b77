package decide

import (
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// ActionKind names an action type.
type ActionKind string

// The action kinds.
const (
	KindClampCgroups    ActionKind = "ClampCgroups"
	KindGrowCgroups     ActionKind = "GrowCgroups"
	KindReassertCgroups ActionKind = "ReassertCgroups"
	KindPatchNodeStatus ActionKind = "PatchNodeStatus"
	KindEmitEvent       ActionKind = "EmitEvent"
	KindEvict           ActionKind = "Evict"
	KindRestartKubelet  ActionKind = "RestartKubelet"
	KindRelease         ActionKind = "Release"
	KindGiveBack        ActionKind = "GiveBack"
)

// Action is one step of a Decision, to be carried out in list order. The
// concrete types are ClampCgroups, GrowCgroups, ReassertCgroups,
// PatchNodeStatus, EmitEvent, Evict, RestartKubelet, Release and GiveBack; the set is closed. Actions are plain values, safe
// for concurrent reads.
type Action interface {
	Kind() ActionKind
	// Actuates reports whether the action changes the node (cgroups, pods,
	// the kubelet) rather than only reporting.
	Actuates() bool
	isAction()
}

// ClampCgroups writes the kubepods cgroup limits when at least one of them
// shrinks: Limits, what the kubelet would write for Capacity, with the
// online CPUs for a kubepods cpuset that carries a list of its own. On a
// loss (Path B) it is the first action; on a configured capacity below the
// hardware (Path A2) it follows the status patch.
type ClampCgroups struct {
	Generation int64          `json:"generation"`
	Capacity   resources.List `json:"capacity"`
	Limits     CgroupLimits   `json:"limits"`
}

// GrowCgroups writes the kubepods cgroup limits when none shrinks: Limits,
// what the kubelet would write for Capacity, with the online CPUs, which
// bring a hot-added CPU into a kubepods cpuset that carries a list of its
// own (nothing else adds it). It comes before the status patch.
type GrowCgroups struct {
	Generation int64          `json:"generation"`
	Capacity   resources.List `json:"capacity"`
	Limits     CgroupLimits   `json:"limits"`
}

// ReassertCgroups writes the kubepods limits of the target already applied
// again, where kubepods does not hold them: on the first pass of a daemon
// that resumed from its state (the limits may have been rewritten while it
// was not running), and after a write of them failed (see
// State.LimitsFailed). Limits are what the kubelet would write for
// Capacity, as for ClampCgroups; Differ names the limits read at start
// that did not hold them (empty when none did, or on a retry); Reason says
// why the write is made. It is the first action of its pass.
type ReassertCgroups struct {
	Generation int64          `json:"generation"`
	Capacity   resources.List `json:"capacity"`
	Limits     CgroupLimits   `json:"limits"`
	Differ     []string       `json:"differ,omitempty"`
	Reason     string         `json:"reason"`
}

// PatchNodeStatus publishes capacity, allocatable and the CapacityConfigured
// condition in Node status. Only the resources listed are touched (pods and
// extended resources stay the kubelet's). Taint says whether the Node is to
// carry the NoSchedule taint TaintKey (always false unless
// Policy.TaintWhileStale).
type PatchNodeStatus struct {
	Generation  int64           `json:"generation"`
	Capacity    resources.List  `json:"capacity"`
	Allocatable resources.List  `json:"allocatable"`
	Condition   types.Condition `json:"condition"`
	Taint       bool            `json:"taint,omitempty"`
}

// EmitEvent records an event on the Node.
type EmitEvent struct {
	Type    types.EventType `json:"type"`
	Reason  string          `json:"reason"`
	Message string          `json:"message"`
}

// Evict asks the evictor to bring the pods within Allocatable, in the
// kubelet's memory-pressure order, with reason NodeCapacityExceeded (CPU is
// compressible: only Guaranteed pods whose exclusive CPUs are gone go). The
// evictor reports progress for Generation through Input.Eviction; an Evict of
// an older generation is void once the generation moves on. Its first
// report on a generation comes from its first look at the pods, before it
// evicts any: Done when they fit as they are.
//
// Hold asks for that first look only: no pod is evicted until an Evict of
// the same generation without Hold follows (Path A2 holds, so that the
// status is lowered before any pod goes).
type Evict struct {
	Generation  int64          `json:"generation"`
	Capacity    resources.List `json:"capacity"`
	Allocatable resources.List `json:"allocatable"`
	Reason      string         `json:"reason"`
	Hold        bool           `json:"hold,omitempty"`
	// Release says that the CPUs the evictor is given for online are
	// those a planned release leaves online: a Guaranteed pod's exclusive
	// CPU missing from them is about to be released, not gone. The agent
	// sets it when it passes those CPUs.
	Release bool `json:"release,omitempty"`
}

// RestartKubelet restarts kubelet.service so that it re-reads the machine and
// adopts Capacity (which equals the physical capacity). The actuator checks
// the CPU manager state first so that the kubelet will start.
type RestartKubelet struct {
	Generation int64          `json:"generation"`
	Capacity   resources.List `json:"capacity"`
}

// Release takes the CPUs and memory blocks above Capacity (cpu, memory)
// offline: the planned release of the request Spec (see decide.Release).
// It follows the evictions of the planned shrink, and the releaser reports
// its progress for Generation (a State.ReleaseGeneration) through
// Input.Release.Report. The kubepods limits are at Capacity already.
type Release struct {
	Generation int64          `json:"generation"`
	Capacity   resources.List `json:"capacity"`
	Spec       string         `json:"spec"`
}

// GiveBack brings back online the CPUs and memory blocks node-resized
// released and that are still present, and only those; the releaser
// reports for Generation when it is done.
type GiveBack struct {
	Generation int64 `json:"generation"`
}

func (Release) Kind() ActionKind  { return KindRelease }
func (GiveBack) Kind() ActionKind { return KindGiveBack }
func (Release) Actuates() bool    { return true }
func (GiveBack) Actuates() bool   { return true }
func (Release) isAction()         {}
func (GiveBack) isAction()        {}

func (ClampCgroups) Kind() ActionKind    { return KindClampCgroups }
func (GrowCgroups) Kind() ActionKind     { return KindGrowCgroups }
func (ReassertCgroups) Kind() ActionKind { return KindReassertCgroups }
func (PatchNodeStatus) Kind() ActionKind { return KindPatchNodeStatus }
func (EmitEvent) Kind() ActionKind       { return KindEmitEvent }
func (Evict) Kind() ActionKind           { return KindEvict }
func (RestartKubelet) Kind() ActionKind  { return KindRestartKubelet }

func (ClampCgroups) Actuates() bool    { return true }
func (GrowCgroups) Actuates() bool     { return true }
func (ReassertCgroups) Actuates() bool { return true }
func (PatchNodeStatus) Actuates() bool { return false }
func (EmitEvent) Actuates() bool       { return false }
func (Evict) Actuates() bool           { return true }
func (RestartKubelet) Actuates() bool  { return true }

func (ClampCgroups) isAction()    {}
func (GrowCgroups) isAction()     {}
func (ReassertCgroups) isAction() {}
func (PatchNodeStatus) isAction() {}
func (EmitEvent) isAction()       {}
func (Evict) isAction()           {}
func (RestartKubelet) isAction()  {}

var (
	_ Action = ClampCgroups{}
	_ Action = GrowCgroups{}
	_ Action = ReassertCgroups{}
	_ Action = PatchNodeStatus{}
	_ Action = EmitEvent{}
	_ Action = Evict{}
	_ Action = RestartKubelet{}
)
