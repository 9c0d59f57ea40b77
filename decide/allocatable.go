package decide

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Threshold is a hard eviction threshold held the way the kubelet holds it
// (evictionapi.ThresholdValue): either an absolute quantity or a percentage of
// capacity. The zero value is "no threshold". A Threshold is a plain value,
// safe for concurrent use.
type Threshold struct {
	// Quantity is the absolute threshold in base units. When non-zero it wins
	// over Percentage, as in the kubelet.
	Quantity int64 `json:"quantity,omitempty"`
	// Percentage is the fraction of capacity (0.05 for "5%"), kept as the
	// float32 the kubelet's parsePercentage produces.
	Percentage float32 `json:"percentage,omitempty"`
}

// Amount returns the threshold in base units for a resource whose capacity is
// capacity, exactly as evictionapi.GetThresholdQuantity computes it: the
// quantity itself, or int64(float64(capacity) × float64(percentage)),
// truncated.
func (t Threshold) Amount(capacity int64) int64 {
	if t.Quantity != 0 {
		return t.Quantity
	}
	return int64(float64(capacity) * float64(t.Percentage))
}

// String renders the threshold as written in a KubeletConfiguration.
func (t Threshold) String() string {
	switch {
	case t.Quantity != 0:
		return resource.NewQuantity(t.Quantity, resource.BinarySI).String()
	case t.Percentage != 0:
		return strconv.FormatFloat(float64(t.Percentage)*100, 'g', -1, 32) + "%"
	}
	return "none"
}

// ParseThreshold parses one evictionHard value exactly as the kubelet's
// parseThresholdStatement does. ok is false for "0%" and "100%", which the
// kubelet ignores. A percentage must lie in [0%, 100%]; a quantity must be
// positive. A fractional quantity is rounded down to whole bytes (see
// ParseReservation for why that reproduces the kubelet's integer results).
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
	v, fits := floorValue(q)
	if !fits {
		return Threshold{}, false, fmt.Errorf("eviction threshold %s does not fit in int64 bytes", val)
	}
	if v == 0 {
		// Below one byte: the kubelet keeps a sub-byte quantity, which
		// changes no integer result. Keep it as one byte so that the
		// threshold stays "set".
		v = 1
	}
	return Threshold{Quantity: v}, true, nil
}

// ParseReservation parses one systemReserved/kubeReserved entry exactly as the
// kubelet's parseResourceList does: only cpu, memory, ephemeral-storage and pid
// may be reserved; negative values are refused; cpu is rounded to the nearest
// millicore ((µcores + 500) / 1000). Other amounts are rounded down to whole
// units: the kubelet subtracts the exact quantity and the integer everybody
// reads back (Quantity.Value, which rounds up) is capacity − floor(reserved).
func ParseReservation(name, val string) (int64, error) {
	switch name {
	case ResourceCPU, ResourceMemory, ResourceEphemeralStorage, ResourcePID:
	default:
		return 0, fmt.Errorf("cannot reserve %q resource", name)
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return 0, fmt.Errorf("failed to parse quantity %q for %q resource: %w", val, name, err)
	}
	if q.Sign() == -1 {
		return 0, fmt.Errorf("resource quantity for %q cannot be negative: %v", name, val)
	}
	if name == ResourceCPU {
		if _, ok := wholeMilli(q); !ok {
			return 0, fmt.Errorf("quantity %q for %q resource does not fit in int64 millicores", val, name)
		}
		micro := q.ScaledValue(resource.Micro)
		if micro < 0 || micro > math.MaxInt64-500 {
			return 0, fmt.Errorf("quantity %q for %q resource does not fit in int64 microcores", val, name)
		}
		return (micro + 500) / 1000, nil
	}
	v, ok := floorValue(q)
	if !ok {
		return 0, fmt.Errorf("quantity %q for %q resource does not fit in int64", val, name)
	}
	return v, nil
}

// Reservations are the kubelet's static reservations: what it subtracts from
// capacity to get allocatable and to size the kubepods cgroup. A Reservations
// value is safe for concurrent reads.
type Reservations struct {
	// SystemReserved and KubeReserved hold cpu (millicores), memory,
	// ephemeral-storage (bytes) and pid amounts. The kubelet's reservedSystemCPUs
	// override is already applied (see kubeletconfig).
	SystemReserved Resources `json:"systemReserved,omitempty"`
	KubeReserved   Resources `json:"kubeReserved,omitempty"`
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

// Static returns systemReserved + kubeReserved for one resource.
func (r Reservations) Static(name string) int64 {
	return satAdd(r.SystemReserved[name], r.KubeReserved[name])
}

// Eviction returns the hard eviction reservation for one resource of the
// given capacity, as the kubelet's hardEvictionReservation computes it:
// memory.available for memory, nodefs.available for ephemeral-storage, none
// for anything else.
func (r Reservations) Eviction(name string, capacity int64) int64 {
	switch name {
	case ResourceMemory:
		return r.MemoryAvailable.Amount(capacity)
	case ResourceEphemeralStorage:
		return r.NodeFsAvailable.Amount(capacity)
	}
	return 0
}

// Total returns everything the kubelet holds back from a resource of the
// given capacity: systemReserved + kubeReserved + the hard eviction threshold.
// The kubelet refuses to start when capacity < Total (validateNodeAllocatable).
func (r Reservations) Total(name string, capacity int64) int64 {
	return satAdd(r.Static(name), r.Eviction(name, capacity))
}

// Allocatable returns the allocatable resources the kubelet would publish for
// the given capacity (nodestatus.MachineInfo with
// GetNodeAllocatableReservation): for every resource, capacity −
// systemReserved − kubeReserved − hard eviction threshold, clamped at 0; then
// allocatable memory loses every huge page capacity, clamped at 0 after each.
func Allocatable(capacity Resources, r Reservations) Resources {
	out := make(Resources, len(capacity))
	for name, v := range capacity {
		a := v - r.Total(name, capacity[name])
		if a < 0 {
			a = 0
		}
		out[name] = a
	}
	for _, name := range capacity.Names() {
		if !IsHugePages(name) {
			continue
		}
		m := out[ResourceMemory] - capacity[name]
		if m < 0 {
			m = 0
		}
		out[ResourceMemory] = m
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
// systemReserved − kubeReserved clamped at 0 (no eviction threshold, no huge
// pages subtracted from memory); memory.max is that memory, cpu.shares is
// MilliCPUToShares of that cpu, cpu.weight follows from the shares, pids.max is
// that pid amount (capacity["pid"] being pid_max) and every huge page size is
// limited to its capacity.
func KubepodsLimits(capacity Resources, r Reservations) CgroupLimits {
	base := make(Resources, len(capacity))
	for name, v := range capacity {
		if !r.PodsNotEnforced {
			v -= r.Static(name)
			if v < 0 {
				v = 0
			}
		}
		base[name] = v
	}
	var l CgroupLimits
	if v, ok := base[ResourceMemory]; ok {
		l.MemoryMax = v
	}
	if v, ok := base[ResourceCPU]; ok {
		l.CPUShares = MilliCPUToShares(v)
		l.CPUWeight = SharesToWeight(l.CPUShares)
	}
	if v, ok := base[ResourcePID]; ok {
		l.PidsMax = v
	}
	for name, v := range base {
		size, ok := HugePageSize(name)
		if !ok {
			continue
		}
		if l.HugeTLB == nil {
			l.HugeTLB = make(map[int64]int64)
		}
		l.HugeTLB[size] += v
	}
	return l
}
