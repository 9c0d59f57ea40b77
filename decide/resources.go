package decide

import (
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/resources"
)

// Physical is the node's physical capacity, measured the way the kubelet's
// cAdvisor measures it. A Physical value is safe for concurrent reads.
type Physical struct {
	// Capacity is what the machine has, in the one resource vocabulary:
	// cpu (online logical CPUs, in millicores), memory (MemTotal × 1024),
	// every huge page size's pre-allocated pool (an empty pool listed
	// with 0, as the kubelet lists it), ephemeral-storage (the filesystem
	// that holds the kubelet's root directory; absent when the node
	// publishes none or it could not be measured) and pid (the kernel's
	// pid_max, which only feeds the kubepods pids.max limit).
	Capacity resources.List `json:"capacity"`
	// SwapActive reports whether any swap is in use on the node.
	SwapActive bool `json:"swapActive,omitempty"`
	// OnlineCPUs are the ids of the online CPUs; nil when not known.
	OnlineCPUs []int `json:"onlineCPUs,omitempty"`
}

// published returns the capacity the kubelet would publish for this
// machine (cadvisor.CapacityFromMachineInfo plus ephemeral-storage): the
// published resources, huge page names canonicalised (a malformed one is
// dropped).
func (p Physical) published() resources.List {
	c := resources.List{}
	for name, v := range p.Capacity {
		if !resources.Published(name) {
			continue
		}
		if n, ok := resources.Canonical(name); ok {
			c[n] = satAdd(c[n], v)
		}
	}
	return c
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
	v, err := resources.FromQuantity("", q) // rounded up
	if err != nil {
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

// resourcesMilli is q in millis, rounded up, and false on overflow.
func resourcesMilli(q resource.Quantity) (int64, bool) {
	v, err := resources.FromQuantity(resources.CPU, q)
	return v, err == nil
}

// resourcesValue is q in whole units, rounded up, and false on overflow.
func resourcesValue(q resource.Quantity) (int64, bool) {
	v, err := resources.FromQuantity(resources.Memory, q)
	return v, err == nil
}
