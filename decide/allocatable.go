package decide

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/resources"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Threshold is a hard eviction threshold held the way the kubelet holds it
// (evictionapi.ThresholdValue): either an absolute quantity or a percentage of
// capacity. The zero value is "no threshold". A Threshold is a plain value,
// safe for concurrent use.
type Threshold struct {
	// Quantity is the absolute threshold in whole base units, rounded
	// down. When Quantity or QuantityNanos is non-zero the quantity wins
	// over Percentage, as in the kubelet.
	Quantity int64 `json:"quantity,omitempty"`
	// QuantityNanos is the part of the absolute threshold below one base
	// unit, in billionths of a unit (0 to 999999999): the kubelet keeps a
	// threshold such as 0.3Gi (322122547.2 bytes) or 500m (half a byte)
	// exactly, so Quantity + QuantityNanos/1e9 is the threshold it holds.
	QuantityNanos int64 `json:"quantityNanos,omitempty"`
	// Percentage is the fraction of capacity (0.05 for "5%"), kept as the
	// float32 the kubelet's parsePercentage produces.
	Percentage float32 `json:"percentage,omitempty"`
}

// isQuantity reports whether t is an absolute threshold.
func (t Threshold) isQuantity() bool {
	return t.Quantity != 0 || t.QuantityNanos != 0
}

// value returns the threshold for a resource whose capacity is capacity,
// exactly as evictionapi.GetThresholdQuantity computes it: the quantity
// itself, or int64(float64(capacity) × float64(percentage)), truncated.
func (t Threshold) value(capacity int64) exact {
	if t.isQuantity() {
		return newExact(t.Quantity, t.QuantityNanos)
	}
	return exact{whole: int64(float64(capacity) * float64(t.Percentage))}
}

// String renders the threshold as written in a KubeletConfiguration.
func (t Threshold) String() string {
	switch {
	case t.isQuantity():
		q := resource.NewQuantity(t.Quantity, resource.BinarySI)
		if t.QuantityNanos != 0 {
			q.Add(*resource.NewScaledQuantity(t.QuantityNanos, resource.Nano))
		}
		return q.String()
	case t.Percentage != 0:
		return strconv.FormatFloat(float64(t.Percentage)*100, 'g', -1, 32) + "%"
	}
	return "none"
}

// ParseThreshold parses one evictionHard value exactly as the kubelet's
// parseThresholdStatement does. ok is false for "0%" and "100%", which the
// kubelet ignores. A percentage must lie in [0%, 100%]; a quantity must be
// positive. A quantity is kept exactly, its fraction of a byte in
// QuantityNanos: the kubelet adds it exactly to the reservations before it
// rounds, and a threshold below one byte ("0.1", "500m") is still a threshold
// (one that changes no integer allocatable).
func ParseThreshold(val string) (t Threshold, ok bool, err error) {
	if strings.HasSuffix(val, "%") {
		if val == "0%" || val == "100%" {
			return Threshold{}, false, nil
		}
		f, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
		if err != nil {
			return Threshold{}, false, err
		}
		p := float32(f) / 100
		if p < 0 {
			return Threshold{}, false, fmt.Errorf("eviction percentage threshold must be >= 0%%: %s", val)
		}
		if p > 1 {
			return Threshold{}, false, fmt.Errorf("eviction percentage threshold must be <= 100%%: %s", val)
		}
		return Threshold{Percentage: p}, true, nil
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return Threshold{}, false, err
	}
	if q.Sign() <= 0 {
		return Threshold{}, false, fmt.Errorf("eviction threshold must be positive: %s", val)
	}
	whole, nanos, fits := splitValue(q)
	if !fits {
		return Threshold{}, false, fmt.Errorf("eviction threshold %s does not fit in int64 bytes", val)
	}
	return Threshold{Quantity: whole, QuantityNanos: nanos}, true, nil
}

// ParseReservationExact parses one systemReserved/kubeReserved entry exactly
// as the kubelet's parseResourceList does: only cpu, memory,
// ephemeral-storage and pid may be reserved; negative values are refused; cpu
// is rounded to the nearest millicore ((µcores + 500) / 1000), as the kubelet
// rounds it. Other amounts are kept exactly, as the kubelet keeps them: whole
// base units (rounded down) plus the rest in billionths of a unit (0 to
// 999999999; always 0 for cpu).
func ParseReservationExact(name, val string) (whole, nanos int64, err error) {
	if !resources.Reservable(name) {
		return 0, 0, fmt.Errorf("cannot reserve %q resource", name)
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return 0, 0, fmt.Errorf("failed to parse quantity %q for %q resource: %w", val, name, err)
	}
	if q.Sign() == -1 {
		return 0, 0, fmt.Errorf("resource quantity for %q cannot be negative: %v", name, val)
	}
	if resources.Milli(name) {
		if _, ok := resourcesMilli(q); !ok {
			return 0, 0, fmt.Errorf("quantity %q for %q resource does not fit in int64 millicores", val, name)
		}
		micro := q.ScaledValue(resource.Micro)
		if micro < 0 || micro > math.MaxInt64-500 {
			return 0, 0, fmt.Errorf("quantity %q for %q resource does not fit in int64 microcores", val, name)
		}
		return (micro + 500) / 1000, 0, nil
	}
	whole, nanos, ok := splitValue(q)
	if !ok {
		return 0, 0, fmt.Errorf("quantity %q for %q resource does not fit in int64", val, name)
	}
	return whole, nanos, nil
}

// Reservations are the kubelet's static reservations: what it subtracts from
// capacity to get allocatable and to size the kubepods cgroup. A Reservations
// value is safe for concurrent reads.
//
// The kubelet adds its reservations and thresholds as exact decimal
// quantities and rounds once, when it reads the result back as an integer;
// so do the methods below and Allocatable and KubepodsLimits, with the
// fractions of a unit held in SystemReservedNanos, KubeReservedNanos and
// Threshold.QuantityNanos.
type Reservations struct {
	// SystemReserved and KubeReserved hold cpu (millicores), memory,
	// ephemeral-storage (bytes) and pid amounts, in whole units rounded
	// down. The kubelet's reservedSystemCPUs override is already applied
	// (see package kubelet).
	SystemReserved resources.List `json:"systemReserved,omitempty"`
	KubeReserved   resources.List `json:"kubeReserved,omitempty"`
	// SystemReservedNanos and KubeReservedNanos hold, per resource, the
	// part of the reservation below one unit, in billionths of a unit (0 to
	// 999999999), for amounts that are not a whole number of units: 0.6Gi
	// of memory (644245094.4 bytes) is 644245094 in SystemReserved and
	// 400000000 here. They are nil when every amount is whole, which is the
	// usual case.
	SystemReservedNanos map[string]int64 `json:"systemReservedNanos,omitempty"`
	KubeReservedNanos   map[string]int64 `json:"kubeReservedNanos,omitempty"`
	// MemoryAvailable is evictionHard["memory.available"].
	MemoryAvailable Threshold `json:"memoryAvailable"`
	// NodeFsAvailable is evictionHard["nodefs.available"].
	NodeFsAvailable Threshold `json:"nodeFsAvailable"`
	// PodsNotEnforced is true when the kubelet does not enforce node
	// allocatable on the kubepods cgroup (cgroupsPerQOS off, or
	// enforceNodeAllocatable without "pods"); kubepods then gets the raw
	// capacity. The zero value is the kubelet's default.
	PodsNotEnforced bool `json:"podsNotEnforced,omitempty"`
}

// static returns systemReserved + kubeReserved for one resource, exactly.
func (r Reservations) static(name string) exact {
	sys := newExact(r.SystemReserved[name], r.SystemReservedNanos[name])
	return sys.plus(newExact(r.KubeReserved[name], r.KubeReservedNanos[name]))
}

// eviction returns the hard eviction reservation for one resource, exactly.
func (r Reservations) eviction(name string, capacity int64) exact {
	switch name {
	case resources.Memory:
		return r.MemoryAvailable.value(capacity)
	case resources.EphemeralStorage:
		return r.NodeFsAvailable.value(capacity)
	}
	return exact{}
}

// total returns systemReserved + kubeReserved + the hard eviction
// threshold for one resource, exactly.
func (r Reservations) total(name string, capacity int64) exact {
	return r.static(name).plus(r.eviction(name, capacity))
}

// Eviction returns the hard eviction reservation for one resource of the
// given capacity, as the kubelet's hardEvictionReservation computes it:
// memory.available for memory, nodefs.available for ephemeral-storage, none
// for anything else; rounded down to whole units.
func (r Reservations) Eviction(name string, capacity int64) int64 {
	return r.eviction(name, capacity).floor()
}

// Total returns everything the kubelet holds back from a resource of the
// given capacity: systemReserved + kubeReserved + the hard eviction threshold,
// added exactly and rounded up to whole units. The kubelet refuses to start
// when capacity < Total (validateNodeAllocatable: capacity − the exact
// reservation is negative).
func (r Reservations) Total(name string, capacity int64) int64 {
	return r.total(name, capacity).ceil()
}

// Allocatable returns the allocatable resources the kubelet would publish for
// the given capacity (nodestatus.MachineInfo with
// GetNodeAllocatableReservation): for every resource, capacity −
// (systemReserved + kubeReserved + hard eviction threshold, added exactly),
// clamped at 0 and read back as Quantity.Value reads it (rounded up); then
// allocatable memory loses every huge page capacity, clamped at 0 after
// each.
func Allocatable(capacity resources.List, r Reservations) resources.List {
	out := make(resources.List, len(capacity))
	for name, v := range capacity {
		out[name] = r.total(name, v).minusClamped(v)
	}
	for _, name := range capacity.Names() {
		if !resources.IsHugePages(name) {
			continue
		}
		// Huge page capacities are whole bytes: subtracting them after
		// the rounding gives what the kubelet gets subtracting them
		// before it.
		out[resources.Memory] = max(satSub(out[resources.Memory], capacity[name]), 0)
	}
	return out
}

// Kubelet cgroup constants (pkg/kubelet/cm/helpers_linux.go).
const (
	MinShares     = 2
	MaxShares     = 262144
	SharesPerCPU  = 1024
	MilliCPUToCPU = 1000
	// MaxWeight is the largest cgroup v2 cpu.weight.
	MaxWeight = 10000
)

// MilliCPUToShares converts millicores to cgroup v1 cpu.shares exactly as the
// kubelet does: 0 → 2, else milliCPU × 1024 / 1000 clamped to [2, 262144].
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return MinShares
	}
	if milliCPU > math.MaxInt64/SharesPerCPU {
		return MaxShares
	}
	shares := (milliCPU * SharesPerCPU) / MilliCPUToCPU
	if shares < MinShares {
		return MinShares
	}
	if shares > MaxShares {
		return MaxShares
	}
	return uint64(shares)
}

// SharesToWeight converts cpu.shares to cgroup v2 cpu.weight exactly as the
// kubelet's getCPUWeight does (it sets the weight itself, so the OCI
// runtime's own conversion is not used): 1 + ((shares − 2) × 9999) / 262142,
// and 10000 from 262144 shares up. 0 shares means "unset" and gives 0.
func SharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	if shares >= MaxShares {
		return MaxWeight
	}
	if shares < MinShares {
		shares = MinShares
	}
	return 1 + ((shares-2)*9999)/262142
}

// CgroupLimits are the limits the kubelet writes on the kubepods cgroup. A
// zero field is a limit the kubelet would leave unset. CgroupLimits is a
// plain value, safe for concurrent reads.
type CgroupLimits struct {
	// MemoryMax is memory.max (v2) / memory.limit_in_bytes (v1), in bytes.
	MemoryMax int64 `json:"memoryMax,omitempty"`
	// CPUShares is cpu.shares (v1).
	CPUShares uint64 `json:"cpuShares,omitempty"`
	// CPUWeight is cpu.weight (v2), derived from CPUShares.
	CPUWeight uint64 `json:"cpuWeight,omitempty"`
	// PidsMax is pids.max.
	PidsMax int64 `json:"pidsMax,omitempty"`
	// HugeTLB maps a huge page size in bytes to its hugetlb limit in bytes.
	HugeTLB map[int64]int64 `json:"hugeTLB,omitempty"`
}

// KubepodsLimits returns what the kubelet writes on the kubepods cgroup at
// start (enforceNodeAllocatableCgroups with getCgroupConfig) for the given
// capacity: unless r.PodsNotEnforced, every resource is capacity −
// (systemReserved + kubeReserved, added exactly) clamped at 0 and rounded up
// as Quantity.Value rounds (no eviction threshold, no huge pages subtracted
// from memory); memory.max is that memory, cpu.shares is
// MilliCPUToShares of that cpu, cpu.weight follows from the shares, pids.max is
// that pid amount (capacity["pid"] being pid_max) and every huge page size is
// limited to its capacity.
func KubepodsLimits(capacity resources.List, r Reservations) CgroupLimits {
	base := make(resources.List, len(capacity))
	for name, v := range capacity {
		if !r.PodsNotEnforced {
			v = r.static(name).minusClamped(v)
		}
		base[name] = v
	}
	var l CgroupLimits
	for name, v := range base {
		switch resources.KubepodsLimit(name) {
		case resources.LimitMemory:
			l.MemoryMax = v
		case resources.LimitCPU:
			l.CPUShares = MilliCPUToShares(v)
			l.CPUWeight = SharesToWeight(l.CPUShares)
		case resources.LimitPids:
			l.PidsMax = v
		case resources.LimitHugeTLB:
			size, ok := resources.HugePageSize(name)
			if !ok {
				continue
			}
			if l.HugeTLB == nil {
				l.HugeTLB = make(map[int64]int64)
			}
			l.HugeTLB[size] += v
		}
	}
	return l
}
