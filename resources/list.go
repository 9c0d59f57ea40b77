package resources

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// List maps a resource name to an amount in the resource's base unit:
// millicores for cpu, bytes for memory, hugepages-* and ephemeral-storage, a
// count for pid.
//
// In JSON a List is a Kubernetes ResourceList: {"cpu":"3500m",
// "memory":"8Gi"}, rendered by Format. A JSON number is read as an amount in
// the base unit (the form earlier state files used).
//
// A List is a plain map: safe for concurrent reads, not for concurrent
// writes.
type List map[string]int64

// Clone returns a copy of l (nil for nil).
func (l List) Clone() List {
	if l == nil {
		return nil
	}
	return maps.Clone(l)
}

// Equal reports whether l and o hold the same names with the same amounts.
func (l List) Equal(o List) bool {
	return len(l) == len(o) && maps.Equal(l, o)
}

// Names returns the resource names of l, sorted.
func (l List) Names() []string {
	return slices.Sorted(maps.Keys(l))
}

// Published returns the part of l that Node status carries.
func (l List) Published() List {
	if l == nil {
		return nil
	}
	out := make(List, len(l))
	for k, v := range l {
		if Published(k) {
			out[k] = v
		}
	}
	return out
}

// String renders l for people and logs with Format: "cpu=4, memory=8Gi,
// ephemeral-storage=100Gi", cpu and memory first, the rest by name.
func (l List) String() string {
	var b strings.Builder
	names := l.Names()
	slices.SortFunc(names, compareDisplay)
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(Format(k, l[k]))
	}
	return b.String()
}

// Strings renders every amount with Format: the ResourceList of a Node
// status patch.
func (l List) Strings() map[string]string {
	if l == nil {
		return nil
	}
	out := make(map[string]string, len(l))
	for k, v := range l {
		out[k] = Format(k, v)
	}
	return out
}

// Quantity returns the amount v of the named resource as the kubelet would
// hold it: cpu as millicores in DecimalSI, bytes in BinarySI, counts in
// DecimalSI.
func Quantity(name string, v int64) resource.Quantity {
	k, _ := kindOf(name)
	if k.milli {
		return *resource.NewMilliQuantity(v, k.format)
	}
	return *resource.NewQuantity(v, k.format)
}

// Format is the one renderer: the amount v of the named resource as the
// kubelet writes it in Node status ("3500m", "4", "16393012Ki", "8Gi").
func Format(name string, v int64) string {
	q := Quantity(name, v)
	return q.String()
}

// Value returns v in the resource's unit (cores, bytes, a count), for
// metrics and people.
func Value(name string, v int64) float64 {
	if Milli(name) {
		return float64(v) / 1000
	}
	return float64(v)
}

// FromQuantity converts a quantity of the named resource to its base unit,
// rounding up as the kubelet rounds (q.MilliValue() for cpu, q.Value()
// otherwise). It fails on an amount that does not fit in an int64.
func FromQuantity(name string, q resource.Quantity) (int64, error) {
	var v int64
	var ok bool
	if Milli(name) {
		v, ok = wholeMilli(q)
	} else {
		v, ok = wholeValue(q)
	}
	if !ok {
		return 0, fmt.Errorf("%s: %s is out of range", name, q.String())
	}
	return v, nil
}

// Parse parses a quantity string of the named resource to its base unit.
func Parse(name, s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a quantity: %w", name, s, err)
	}
	return FromQuantity(name, q)
}

// MarshalJSON renders l as a Kubernetes ResourceList.
func (l List) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	return json.Marshal(l.Strings())
}

// UnmarshalJSON reads a Kubernetes ResourceList (quantity strings) or, for
// earlier state files, amounts in base units as JSON numbers.
func (l *List) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*l = nil
		return nil
	}
	out := make(List, len(raw))
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			n, err := Parse(k, s)
			if err != nil {
				return err
			}
			out[k] = n
			continue
		}
		var n int64
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("%s: want a quantity string or an integer, got %s", k, v)
		}
		out[k] = n
	}
	*l = out
	return nil
}

var (
	maxMilliQuantity = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)
	minMilliQuantity = resource.NewMilliQuantity(math.MinInt64+1, resource.DecimalSI)
	maxValueQuantity = resource.NewQuantity(math.MaxInt64-1, resource.DecimalSI)
	minValueQuantity = resource.NewQuantity(math.MinInt64+1, resource.DecimalSI)
)

// wholeMilli is q.MilliValue() (rounded up, as Quantity rounds), with false on
// int64 overflow instead of a wrapped result.
func wholeMilli(q resource.Quantity) (int64, bool) {
	if q.Cmp(*maxMilliQuantity) > 0 || q.Cmp(*minMilliQuantity) < 0 {
		return 0, false
	}
	return q.MilliValue(), true
}

// wholeValue is q.Value() (rounded up, as Quantity rounds), with false on
// int64 overflow instead of a wrapped result.
func wholeValue(q resource.Quantity) (int64, bool) {
	if q.Cmp(*maxValueQuantity) > 0 || q.Cmp(*minValueQuantity) < 0 {
		return 0, false
	}
	return q.Value(), true
}
