package types

// TaintKey is the NoSchedule taint that keeps new pods off the node while
// the kubelet has not adopted a loss of capacity: a stock kubelet reverts
// status.capacity to its start-up view within about 10 s, and the scheduler
// and the kubelet's admission would place pods against the old, larger
// machine meanwhile.
const TaintKey = "node-resized.io/capacity-changing"

// EventType is the type of a Kubernetes event.
type EventType string

// Event types, as in the Kubernetes API.
const (
	EventNormal  EventType = "Normal"
	EventWarning EventType = "Warning"
)

// Event reasons node-resized emits on the Node.
const (
	// EventEmergencyCapacityReduced (Warning): the hardware fell below the
	// applied capacity; kubepods was clamped at once (Path B).
	EventEmergencyCapacityReduced = "EmergencyCapacityReduced"
	// EventCapacityInfeasible (Warning): a configured capacity was refused.
	EventCapacityInfeasible = "CapacityInfeasible"
	// EventCapacityAccepted (Normal): a capacity is applied and stable.
	EventCapacityAccepted = "CapacityAccepted"
	// EventKubeletRestartFailed (Warning): the kubelet restarted to adopt
	// a capacity failed, or did not come back Ready with it in time; it is
	// not restarted again for that change.
	EventKubeletRestartFailed = "KubeletRestartFailed"
	// EventKubeletCheckpointRolledBack (Warning): the kubelet refused the
	// CPU or memory manager checkpoint node-resized had rewritten for it;
	// the files were restored from their backups and it was started again.
	EventKubeletCheckpointRolledBack = "KubeletCheckpointRolledBack"
	// EventKubeletRecovered (Warning): node-resized found the kubelet left
	// stopped by a restart of its own that did not finish (the daemon
	// killed after the stop) and started it.
	EventKubeletRecovered = "KubeletRecovered"
	// EventKubeletRestartBlocked (Warning): the kubelet needs a restart to
	// adopt the capacity, and node-resized will not do it until an
	// operator acts: a CPU or memory manager checkpoint cannot be made
	// safe for the machine, or is in a layout node-resized does not know.
	EventKubeletRestartBlocked = "KubeletRestartBlocked"
	// EventCapacityReleased (Normal): a planned release took the CPUs and
	// memory above the configured capacity offline; the message names
	// what may now be unplugged.
	EventCapacityReleased = "CapacityReleased"
	// EvictionReason is the reason carried by evictions for lost capacity.
	EvictionReason = "NodeCapacityExceeded"
)
