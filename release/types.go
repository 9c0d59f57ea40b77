package release

import (
	"fmt"
	"strings"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// Input is the machine and what the agent wants of it. Choose, GiveBack and
// Unpluggable only read it.
type Input struct {
	// Machine is the model (online CPUs, memory blocks, MemTotal);
	// required.
	Machine *topology.Snapshot
	// Hotplug is the on-demand read of online files, SMT siblings and
	// memory devices (topology.FS.Hotplug); nil means none known, and no
	// CPU can then be taken offline.
	Hotplug *topology.Hotplug
	// TargetCPUs is the number of online CPUs wanted; 0: no CPU target
	// (release none; give back every released CPU).
	TargetCPUs int
	// TargetMemory is the MemTotal wanted, in bytes: the release ends at
	// or at most one block below it; 0: no memory target.
	TargetMemory uint64
	// ReservedCPUs are the kubelet's reservedSystemCPUs: never released.
	ReservedCPUs topology.CPUSet
	// Exclusive maps a CPU to the UID of the pod that holds it
	// exclusively, from the kubelet's CPU manager checkpoint.
	Exclusive map[int]string
	// Skip are CPUs and blocks that failed to go offline before: Choose
	// leaves them and picks others.
	Skip Set
	// Released is what the agent took offline before and has not given
	// back (its record); read by GiveBack and Unpluggable.
	Released Set
}

// Set names logical CPUs and memory blocks.
type Set struct {
	CPUs   topology.CPUSet `json:"cpus,omitempty"`
	Blocks []int           `json:"blocks,omitempty"`
}

// IsEmpty reports a set with neither CPUs nor blocks.
func (s Set) IsEmpty() bool { return len(s.CPUs) == 0 && len(s.Blocks) == 0 }

// DeviceKind says what kind of device a memory block belongs to.
type DeviceKind string

const (
	// DIMM is an ACPI memory device (PNP0C80), unplugged whole.
	DIMM DeviceKind = "dimm"
	// VirtioMem is a virtio-mem device, which gives back block by block.
	VirtioMem DeviceKind = "virtio-mem"
	// NoDevice is memory of no known device: boot memory, or memory of a
	// device that could not be identified.
	NoDevice DeviceKind = ""
)

// Plan is what Choose decides: the CPUs and blocks to take offline, in
// order, the pods to evict first, the machine expected afterwards, and
// what cannot be reached.
type Plan struct {
	// CPUs to take offline, in order.
	CPUs []CPUStep `json:"cpus,omitempty"`
	// Blocks to take offline (write "offline" to memoryN/state), in order.
	Blocks []BlockStep `json:"blocks,omitempty"`
	// EvictFirst are the UIDs of the pods whose exclusive CPUs the plan
	// takes: evict them before offlining the steps that name them.
	EvictFirst []string `json:"evictFirst,omitempty"`
	// OnlineCPUs is the number of online CPUs once the plan is done.
	OnlineCPUs int `json:"onlineCPUs"`
	// MemTotal is the MemTotal expected once the plan is done: at most
	// TargetMemory, by less than one block, unless memory falls short.
	MemTotal uint64 `json:"memTotalBytes"`
	// Shortfalls say what cannot be reached and why; none when the plan
	// reaches both targets.
	Shortfalls []Shortfall `json:"shortfalls,omitempty"`
	// Notes say what the operator should know that is not a shortfall
	// (virtio-mem memory that could not be identified, or only as one
	// group of several devices).
	Notes []string `json:"notes,omitempty"`
}

// CPUStep is one CPU to take offline.
type CPUStep struct {
	ID int `json:"id"`
	// AfterEvicting is the UID of the pod that holds the CPU
	// exclusively: offline it only once that pod is gone.
	AfterEvicting string `json:"afterEvicting,omitempty"`
}

// BlockStep is one memory block to take offline or bring online.
type BlockStep struct {
	ID     int        `json:"id"`
	Kind   DeviceKind `json:"kind,omitempty"`
	Device string     `json:"device,omitempty"` // "PNP0C80:01", "virtio0"; "" for NoDevice
	// WholeDevice says that the plan takes the block's DIMM whole.
	WholeDevice bool `json:"wholeDevice,omitempty"`
}

// Shortfall is what a plan cannot reach for one resource.
type Shortfall struct {
	Resource string `json:"resource"` // "cpu" or "memory"
	// Missing is how much more should go offline: CPUs, or bytes.
	Missing int64 `json:"missing"`
	// Reason says why, in words an operator reads.
	Reason string `json:"reason"`
}

// String is the shortfall as one sentence: "memory: 512Mi more to take
// offline, but the other online blocks are in zone Normal (32 blocks, 4Gi)".
func (s Shortfall) String() string {
	amount := fmt.Sprintf("%d more CPUs", s.Missing)
	if s.Resource == resources.CPU && s.Missing == 1 {
		amount = "1 more CPU"
	}
	if s.Resource == resources.Memory {
		amount = resources.Format(resources.Memory, s.Missing) + " more"
	}
	return fmt.Sprintf("%s: %s to take offline, but %s", s.Resource, amount, s.Reason)
}

// String is the plan's shortfalls and notes, for a condition message; ""
// when it reaches its targets and has nothing to note.
func (p Plan) String() string {
	var parts []string
	for _, s := range p.Shortfalls {
		parts = append(parts, s.String())
	}
	parts = append(parts, p.Notes...)
	return strings.Join(parts, "; ")
}

// reasons joins "why" clauses as an operator reads them: "a", "a and b",
// "a, b and c".
func reasons(clauses []string) string {
	switch len(clauses) {
	case 0:
		return ""
	case 1:
		return clauses[0]
	}
	return strings.Join(clauses[:len(clauses)-1], ", ") + " and " + clauses[len(clauses)-1]
}
