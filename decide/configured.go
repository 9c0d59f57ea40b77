package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/node-resized/node-resized/resources"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Configured is the configured capacity as read from the API
// (spec.configuredCapacity, or the node-resized.io/configured-capacity
// annotation), kept as the user wrote it so that a malformed value is judged
// here. A Configured value is safe for concurrent reads.
type Configured struct {
	// Present is false when the field (or annotation) is absent: the node
	// then follows its physical capacity.
	Present bool `json:"present"`
	// Raw maps resource names to quantities exactly as written.
	Raw map[string]string `json:"raw,omitempty"`
	// Invalid, when not empty, says why the value is not a ResourceList at
	// all (an annotation that is not a JSON object of strings). The whole
	// request is then malformed, hence Infeasible.
	Invalid string `json:"invalid,omitempty"`
}

// Key returns a canonical string for the request, used to recognise the same
// spec value across passes and daemon restarts: "" when absent, otherwise the
// JSON object of the recognised entries, as written, keys sorted. Unknown
// resource names do not take part: adding one does not make a new request.
func (c Configured) Key() string {
	if !c.Present {
		return ""
	}
	if c.Invalid != "" {
		b, _ := json.Marshal(map[string]string{"invalid": c.Invalid})
		return string(b)
	}
	m := make(map[string]string)
	for k, v := range c.Raw {
		if recognised(k) {
			m[k] = v
		}
	}
	b, err := json.Marshal(m) // sorted keys
	if err != nil {
		// A map of strings always marshals.
		panic(err)
	}
	return string(b)
}

// recognised reports whether a configured-capacity key is one node-resized
// validates (the KEP's well-known types); everything else is ignored.
func recognised(name string) bool {
	return resources.Configurable(name)
}

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
func evaluate(c Configured, phys resources.List, swapActive bool, r Reservations, reservedCPUs []int) evaluation {
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
		if !recognised(name) {
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
