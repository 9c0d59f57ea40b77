package decide

import (
	"fmt"
	"github.com/node-resized/node-resized/types"
	"slices"
	"sort"
	"strings"

	"github.com/node-resized/node-resized/resources"

	"k8s.io/apimachinery/pkg/api/resource"
)

// evaluation is a configured capacity judged against the machine.
type evaluation struct {
	key     string
	present bool
	// values holds the well-formed recognised entries, by canonical name.
	values resources.List
	// ignored lists unknown resource names, sorted.
	ignored []string
	// malformed, swap and below make the request Infeasible whatever the
	// hardware does; over depends on the hardware.
	malformed []string
	swap      bool
	below     []string
	over      []string // canonical names whose value exceeds physical, sorted
}

// rejected reports whether the request is refused outright (not merely above
// the current hardware).
func (e evaluation) rejected() bool {
	return len(e.malformed) > 0 || e.swap || len(e.below) > 0
}

// problems describes why the request is Infeasible, for the condition message.
func (e evaluation) problems(phys resources.List) string {
	var parts []string
	if len(e.malformed) > 0 {
		parts = append(parts, "malformed: "+strings.Join(e.malformed, "; "))
	}
	if e.swap {
		parts = append(parts, "memory is configured but swap is active: swap-enabled nodes are not supported")
	}
	if len(e.below) > 0 {
		parts = append(parts, "below the kubelet's reservations: "+strings.Join(e.below, "; "))
	}
	if len(e.over) > 0 {
		var over []string
		for _, n := range e.over {
			over = append(over, fmt.Sprintf("%s %s > physical %s", n, resources.Format(n, e.values[n]), resources.Format(n, phys[n])))
		}
		parts = append(parts, "exceeds physical capacity: "+strings.Join(over, "; "))
	}
	return strings.Join(parts, "; ")
}

// evaluate applies the per-resource validation rules to a configured capacity.
// A cpu value with fewer CPUs than reservedCPUs names would take a reserved
// CPU away: the kubelet would refuse it, so it is refused and the CPUs are
// named.
func evaluate(c types.Configured, phys resources.List, swapActive bool, r Reservations, reservedCPUs []int) evaluation {
	e := evaluation{key: c.Key(), present: c.Present, values: resources.List{}}
	if !c.Present {
		return e
	}
	if c.Invalid != "" {
		e.malformed = append(e.malformed, c.Invalid)
		return e
	}
	names := make([]string, 0, len(c.Raw))
	for k := range c.Raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		raw := c.Raw[name]
		if !resources.Configurable(name) {
			e.ignored = append(e.ignored, name)
			continue
		}
		if name == resources.Memory && swapActive {
			e.swap = true
		}
		canon := name
		if resources.IsHugePages(name) {
			n, ok := resources.Canonical(name)
			if !ok {
				e.malformed = append(e.malformed, fmt.Sprintf("%q is not a valid huge page resource name", name))
				continue
			}
			canon = n
		}
		q, err := resource.ParseQuantity(raw)
		if err != nil {
			e.malformed = append(e.malformed, fmt.Sprintf("%s: %q is not a quantity", name, raw))
			continue
		}
		if q.Sign() <= 0 {
			e.malformed = append(e.malformed, fmt.Sprintf("%s: %q must be positive", name, raw))
			continue
		}
		var v int64
		var ok bool
		if resources.Milli(name) {
			v, ok = resourcesMilli(q)
		} else {
			v, ok = resourcesValue(q)
		}
		if !ok {
			e.malformed = append(e.malformed, fmt.Sprintf("%s: %q is out of range", name, raw))
			continue
		}
		if _, dup := e.values[canon]; dup {
			e.malformed = append(e.malformed, fmt.Sprintf("%s: given twice under different names", canon))
			continue
		}
		e.values[canon] = v
		switch {
		case canon == resources.CPU && len(reservedTaken(reservedCPUs, v)) > 0:
			taken := reservedTaken(reservedCPUs, v)
			n := len(slices.Compact(slices.Sorted(slices.Values(reservedCPUs))))
			e.below = append(e.below, fmt.Sprintf("cpu %s would take away reserved CPU%s %s: the kubelet's reservedSystemCPUs %s are %d CPUs, and the kubelet refuses to start without them; "+
				"configure cpu %d or more, or change reservedSystemCPUs",
				resources.Format(canon, v), plural(len(taken)), cpuList(taken), cpuList(reservedCPUs), n, n))
		case resources.Reservable(canon):
			if total := r.Total(canon, v); v < total {
				e.below = append(e.below, fmt.Sprintf("%s %s < %s (systemReserved + kubeReserved + evictionHard)",
					canon, resources.Format(canon, v), resources.Format(canon, total)))
			}
		}
		if v > phys[canon] {
			e.over = append(e.over, canon)
		}
	}
	sort.Strings(e.over)
	return e
}
