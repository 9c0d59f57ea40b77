package cgroup

import "github.com/node-resized/node-resized/decide"

// Kind says what a write of the kubepods limits is for. A Change records
// it as its Action.
type Kind string

// The kinds of write.
const (
	// KindClamp lowers at least one limit: a loss of hardware (Path B)
	// or a configured capacity below it (Path A2).
	KindClamp Kind = "ClampCgroups"
	// KindGrow lowers none: the hardware or the configured capacity grew.
	KindGrow Kind = "GrowCgroups"
	// KindReassert writes the limits already applied again, where
	// kubepods does not hold them: after the daemon started with a state
	// to resume from, and to retry a write that failed.
	KindReassert Kind = "ReassertCgroups"
	// KindRestore puts back what the kubelet writes for the machine as it
	// is (Restore).
	KindRestore Kind = "RestoreKubeletLimits"
)

// Request is one write of the kubepods limits, as the decision core
// planned it: which limits, what for, and the decision's generation. The
// Enforcer adds only what needs the files themselves (the order of the
// writes, which cpusets carry a list of their own). It is a plain value.
type Request struct {
	Kind       Kind
	Generation int64
	// Limits are what the kubelet would write for the target capacity
	// (decide.KubepodsLimits); a zero limit is left alone.
	Limits decide.CgroupLimits
}
