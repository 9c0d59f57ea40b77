package resources

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Resource names, spelled as the Node API spells them.
const (
	CPU              = "cpu"
	Memory           = "memory"
	EphemeralStorage = "ephemeral-storage"
	// PID is the kubelet's internal resource for the kubepods pids.max
	// limit (its capacity is the kernel's pid_max). It is never published
	// in Node status.
	PID = "pid"
	// HugePagesPrefix starts every huge page resource name, e.g. "hugepages-2Mi".
	HugePagesPrefix = "hugepages-"
)

// Unit is the unit a resource is counted in, as metrics name it (the
// kube-state-metrics convention).
type Unit string

// Units.
const (
	UnitCore    Unit = "core"
	UnitByte    Unit = "byte"
	UnitInteger Unit = "integer"
)

// kind describes one resource: how its base amount is counted and rendered
// and whether the Node's status carries it.
type kind struct {
	// milli is true when the base unit is a thousandth of the resource's
	// unit (cpu: millicores).
	milli bool
	// format is the quantity format the kubelet renders the resource in.
	format resource.Format
	unit   Unit
	// published resources appear in Node status capacity and
	// allocatable and are managed by node-resized.
	published bool
}

// kinds is the table of every resource node-resized knows. Huge page sizes
// are one entry, looked up by prefix.
var kinds = map[string]kind{
	CPU:              {milli: true, format: resource.DecimalSI, unit: UnitCore, published: true},
	Memory:           {format: resource.BinarySI, unit: UnitByte, published: true},
	EphemeralStorage: {format: resource.BinarySI, unit: UnitByte, published: true},
	PID:              {format: resource.DecimalSI, unit: UnitInteger},
	HugePagesPrefix:  {format: resource.BinarySI, unit: UnitByte, published: true},
}

func kindOf(name string) (kind, bool) {
	if IsHugePages(name) {
		return kinds[HugePagesPrefix], true
	}
	k, ok := kinds[name]
	return k, ok
}

// Known reports whether name is a resource node-resized knows.
func Known(name string) bool {
	_, ok := kindOf(name)
	return ok
}

// Published reports whether name is a resource that node-resized publishes
// in Node status and manages (cpu, memory, ephemeral-storage, hugepages-*).
func Published(name string) bool {
	k, ok := kindOf(name)
	return ok && k.published
}

// UnitOf returns the unit name is counted in ("" for an unknown name).
func UnitOf(name string) Unit {
	k, _ := kindOf(name)
	return k.unit
}

// Milli reports whether name's base unit is a thousandth of its unit.
func Milli(name string) bool {
	k, _ := kindOf(name)
	return k.milli
}

// IsHugePages reports whether name is a huge page resource ("hugepages-2Mi").
func IsHugePages(name string) bool {
	return strings.HasPrefix(name, HugePagesPrefix)
}

// HugePagesName is the one way to name the huge page resource of a page
// size in bytes, as the kubelet names it: 2097152 → "hugepages-2Mi".
func HugePagesName(pageSize int64) string {
	return HugePagesPrefix + resource.NewQuantity(pageSize, resource.BinarySI).String()
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

// Canonical returns the name the kubelet uses for a resource: huge page
// sizes are renamed to their canonical spelling ("hugepages-2048Ki" →
// "hugepages-2Mi"); other names are returned as they are. It returns false
// for a malformed huge page name.
func Canonical(name string) (string, bool) {
	if !IsHugePages(name) {
		return name, true
	}
	size, ok := HugePageSize(name)
	if !ok {
		return "", false
	}
	return HugePagesName(size), true
}
