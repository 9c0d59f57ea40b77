package decide

import (
	"math"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Resource names, spelled as the Node API spells them.
const (
	ResourceCPU              = "cpu"
	ResourceMemory           = "memory"
	ResourceEphemeralStorage = "ephemeral-storage"
	// ResourcePID is the kubelet's internal resource for the kubepods
	// pids.max limit. It is never published in Node status.
	ResourcePID = "pid"
	// HugePagesPrefix starts every huge page resource name, e.g. "hugepages-2Mi".
	HugePagesPrefix = "hugepages-"
)

// Resources maps a Kubernetes resource name to an amount in base units: cpu
// in millicores, memory, hugepages-* and ephemeral-storage in bytes.
//
// A Resources value is a plain map: safe for concurrent reads, not for
// concurrent writes.
type Resources map[string]int64

// Clone returns a copy of r (nil for nil).
func (r Resources) Clone() Resources {
	if r == nil {
		return nil
	}
	out := make(Resources, len(r))
	for k, v := range r {
		out[k] = v
	}
	return out
}

// Equal reports whether r and o hold the same names with the same amounts.
func (r Resources) Equal(o Resources) bool {
	if len(r) != len(o) {
		return false
	}
	for k, v := range r {
		if w, ok := o[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Names returns the resource names of r, sorted.
func (r Resources) Names() []string {
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// String renders r as "cpu=4, memory=8Gi", names sorted, amounts in the
// canonical Kubernetes quantity form.
func (r Resources) String() string {
	var b strings.Builder
	for i, k := range r.Names() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(FormatAmount(k, r[k]))
	}
	return b.String()
}

// FormatAmount renders an amount of the named resource as the kubelet
// renders it: millicores for cpu ("3500m", "4"), decimal units for
// ephemeral-storage ("100G"), binary units for the rest ("8Gi", "1536Mi").
func FormatAmount(name string, v int64) string {
	switch name {
	case ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case ResourceEphemeralStorage, ResourcePID:
		return resource.NewQuantity(v, resource.DecimalSI).String()
	}
	return resource.NewQuantity(v, resource.BinarySI).String()
}

// IsHugePages reports whether name is a huge page resource ("hugepages-2Mi").
func IsHugePages(name string) bool {
	return strings.HasPrefix(name, HugePagesPrefix)
}

// HugePageSize returns the page size in bytes named by a huge page resource
// name, and false when name is not a well-formed huge page resource name.
func HugePageSize(name string) (int64, bool) {
	if !IsHugePages(name) {
		return 0, false
	}
	q, err := resource.ParseQuantity(strings.TrimPrefix(name, HugePagesPrefix))
	if err != nil || q.Sign() <= 0 {
		return 0, false
	}
	v, ok := wholeValue(q)
	if !ok || v <= 0 {
		return 0, false
	}
	return v, true
}

// CanonicalHugePagesName returns the name the kubelet uses for huge pages of
// the same size ("hugepages-2048Ki" → "hugepages-2Mi"), and false when name is
// not a well-formed huge page resource name.
func CanonicalHugePagesName(name string) (string, bool) {
	size, ok := HugePageSize(name)
	if !ok {
		return "", false
	}
	return HugePagesPrefix + resource.NewQuantity(size, resource.BinarySI).String(), true
}

// Physical is the node's physical capacity, measured the way the kubelet's
// cAdvisor measures it. A Physical value is safe for concurrent reads.
type Physical struct {
	// CPUs is the number of online logical CPUs.
	CPUs int64 `json:"cpus"`
	// MemoryBytes is MemTotal × 1024.
	MemoryBytes int64 `json:"memoryBytes"`
	// HugePages maps a huge page resource name to the size of its
	// pre-allocated pool in bytes (nr_hugepages × page size). Sizes the kernel
	// supports with an empty pool are listed with 0, as the kubelet lists them.
	HugePages Resources `json:"hugePages,omitempty"`
	// EphemeralStorageBytes is the capacity of the filesystem that holds the
	// kubelet's root directory. 0 means the node publishes no
	// ephemeral-storage (the kubelet's localStorageCapacityIsolation is off);
	// a caller that fails to read it must pass the last good value, not 0.
	EphemeralStorageBytes int64 `json:"ephemeralStorageBytes,omitempty"`
	// PIDMax is the kernel's pid_max. It only feeds the kubepods pids.max
	// limit; 0 leaves that limit out.
	PIDMax int64 `json:"pidMax,omitempty"`
	// SwapActive reports whether any swap is in use on the node.
	SwapActive bool `json:"swapActive,omitempty"`
}

// Capacity returns the capacity the kubelet would publish for this machine
// (cadvisor.CapacityFromMachineInfo plus ephemeral-storage): cpu, memory,
// every huge page size and, when known, ephemeral-storage. Huge page names are
// canonicalised; a malformed huge page name is dropped.
func (p Physical) Capacity() Resources {
	c := Resources{
		ResourceCPU:    satMul(p.CPUs, 1000),
		ResourceMemory: p.MemoryBytes,
	}
	for name, v := range p.HugePages {
		if n, ok := CanonicalHugePagesName(name); ok {
			c[n] = satAdd(c[n], v)
		}
	}
	if p.EphemeralStorageBytes > 0 {
		c[ResourceEphemeralStorage] = p.EphemeralStorageBytes
	}
	return c
}

var (
	maxMilliQuantity = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)
	maxValueQuantity = resource.NewQuantity(math.MaxInt64-1, resource.DecimalSI)
)

// wholeMilli is q.MilliValue() (rounded up, as Quantity rounds), with false on
// int64 overflow instead of a wrapped result.
func wholeMilli(q resource.Quantity) (int64, bool) {
	if q.Cmp(*maxMilliQuantity) > 0 || q.Cmp(*resource.NewMilliQuantity(math.MinInt64+1, resource.DecimalSI)) < 0 {
		return 0, false
	}
	return q.MilliValue(), true
}

// wholeValue is q.Value() (rounded up, as Quantity rounds), with false on int64
// overflow instead of a wrapped result.
func wholeValue(q resource.Quantity) (int64, bool) {
	if q.Cmp(*maxValueQuantity) > 0 || q.Cmp(*resource.NewQuantity(math.MinInt64+1, resource.DecimalSI)) < 0 {
		return 0, false
	}
	return q.Value(), true
}

// nanosPerUnit is the number of nano units in one base unit. A quantity that
// resource.ParseQuantity returns is a whole number of nano units (finer
// amounts are rounded up to 1n), so whole + nanos/nanosPerUnit holds it
// exactly.
const nanosPerUnit = 1_000_000_000

// splitValue returns q as whole base units, rounded down, plus the rest in
// nano units (0 ≤ nanos < 1e9), and false on overflow. whole + nanos/1e9 is q
// exactly for every quantity ParseQuantity returns.
func splitValue(q resource.Quantity) (whole, nanos int64, ok bool) {
	v, ok := wholeValue(q) // rounded up
	if !ok {
		return 0, 0, false
	}
	rest := q.DeepCopy()
	rest.Sub(*resource.NewQuantity(v, resource.DecimalSI)) // in (-1, 0]
	if rest.Sign() < 0 {
		v--
		rest.Add(*resource.NewQuantity(1, resource.DecimalSI)) // in (0, 1)
	}
	return v, rest.ScaledValue(resource.Nano), true
}

// exact is an amount of whole + nanos/1e9 base units, held exactly: the
// kubelet adds and subtracts its reservations as exact decimal quantities
// and rounds only once, when the result is read back as an integer. nanos is
// kept in [0, 1e9), so whole is the amount rounded down. The whole part
// saturates instead of wrapping.
type exact struct {
	whole, nanos int64
}

// newExact normalises whole + nanos/1e9 (nanos of any sign and size).
func newExact(whole, nanos int64) exact {
	carry := nanos / nanosPerUnit
	nanos -= carry * nanosPerUnit
	if nanos < 0 {
		carry--
		nanos += nanosPerUnit
	}
	return exact{whole: satAdd(whole, carry), nanos: nanos}
}

// plus returns e + o.
func (e exact) plus(o exact) exact {
	return newExact(satAdd(e.whole, o.whole), e.nanos+o.nanos)
}

// floor returns e rounded down to whole base units.
func (e exact) floor() int64 { return e.whole }

// ceil returns e rounded up to whole base units.
func (e exact) ceil() int64 {
	if e.nanos > 0 {
		return satAdd(e.whole, 1)
	}
	return e.whole
}

// minusClamped returns capacity − e as the kubelet reads it back:
// Quantity(capacity − e).Value(), which rounds up, and 0 when the exact
// difference is negative. For an integer capacity that is capacity −
// floor(e), clamped at 0.
func (e exact) minusClamped(capacity int64) int64 {
	return max(satSub(capacity, e.floor()), 0)
}

func satAdd(a, b int64) int64 {
	s := a + b
	if a > 0 && b > 0 && s < 0 {
		return math.MaxInt64
	}
	if a < 0 && b < 0 && s >= 0 {
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	p := a * b
	if p/b != a {
		if (a > 0) == (b > 0) {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return p
}

func minInt64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
