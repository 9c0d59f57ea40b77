package resources

import (
	"iter"
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

// Limit names the limit the kubelet writes on the kubepods cgroup from a
// resource's allocatable amount, in its cgroup v2 spelling.
type Limit string

// Kubepods limits.
const (
	// LimitNone: the resource sets no kubepods limit.
	LimitNone Limit = ""
	// LimitMemory is memory.max (v1: memory.limit_in_bytes).
	LimitMemory Limit = "memory.max"
	// LimitCPU is cpu.weight (v1: cpu.shares).
	LimitCPU Limit = "cpu.weight"
	// LimitPids is pids.max.
	LimitPids Limit = "pids.max"
	// LimitHugeTLB is hugetlb.<size>.max (v1: hugetlb.<size>.limit_in_bytes),
	// one per page size.
	LimitHugeTLB Limit = "hugetlb.max"
)

// kind is one row of the table: one resource or, for huge pages, the family
// of every page size, with each fact the rest of node-resized asks about it.
type kind struct {
	// name is the resource name or, for a family, the prefix of its
	// members' names.
	name string
	// family is true when name is a prefix; size is how people write the
	// rest of a member's name ("<size>"), and members are the members a
	// person most often names (x86-64's huge page sizes), in the order a
	// command line offers them.
	family  bool
	size    string
	members []string

	// milli is true when the base unit is a thousandth of the resource's
	// unit (cpu: millicores).
	milli bool
	// format is the quantity format the kubelet renders the resource in.
	format resource.Format
	unit   Unit
	// lead places the resource ahead of the others in displays and
	// one-line summaries, lowest first; resources with 0 follow them, by
	// name.
	lead int
	// example is a quantity of the resource as a person writes it, for
	// help texts.
	example string

	// published resources appear in Node status capacity and
	// allocatable and are managed by node-resized.
	published bool
	// configurable resources are accepted in the configured capacity
	// (the KEP's well-known types); node-resized ignores any other name.
	configurable bool
	// reservable resources may be given in the kubelet's systemReserved
	// and kubeReserved (its parseResourceList).
	reservable bool
	// limit is the kubepods cgroup limit the kubelet writes from the
	// resource.
	limit Limit
	// jitter is true when the amount drifts by itself (MemTotal moves as
	// the kernel allocates): a difference under the memory-jitter
	// tolerance is no change.
	jitter bool
	// qos resources decide a pod's QoS class (the kubelet's
	// supportedQoSComputeResources).
	qos bool
	// podLevel resources may be set in a pod's spec.resources
	// (component-helpers' IsPodLevelResourcesSet).
	podLevel bool
}

// table is every resource node-resized knows, in display order. A new
// resource is one more row here, and its reader in package topology.
var table = []kind{
	{
		name: CPU, milli: true, format: resource.DecimalSI, unit: UnitCore, lead: 1, example: "4, 1500m",
		published: true, configurable: true, reservable: true, limit: LimitCPU, qos: true, podLevel: true,
	},
	{
		name: Memory, format: resource.BinarySI, unit: UnitByte, lead: 2, example: "8Gi",
		published: true, configurable: true, reservable: true, limit: LimitMemory, jitter: true, qos: true, podLevel: true,
	},
	{
		name: EphemeralStorage, format: resource.BinarySI, unit: UnitByte, example: "100Gi",
		published: true, configurable: true, reservable: true,
	},
	{
		name: HugePagesPrefix, family: true, size: "<size>", members: []string{"2Mi", "1Gi"},
		format: resource.BinarySI, unit: UnitByte, example: "1Gi",
		published: true, configurable: true, limit: LimitHugeTLB, podLevel: true,
	},
	{
		name: PID, format: resource.DecimalSI, unit: UnitInteger,
		reservable: true, limit: LimitPids,
	},
}

// byName indexes the table's single resources; families are matched by
// prefix in kindOf.
var byName = func() map[string]*kind {
	m := make(map[string]*kind, len(table))
	for i := range table {
		if !table[i].family {
			m[table[i].name] = &table[i]
		}
	}
	return m
}()

// unknown is the kind of a name the table does not hold: it has none of
// the facts.
var unknown = kind{format: resource.DecimalSI}

func kindOf(name string) (*kind, bool) {
	if k, ok := byName[name]; ok {
		return k, true
	}
	for i := range table {
		if table[i].family && strings.HasPrefix(name, table[i].name) {
			return &table[i], true
		}
	}
	return &unknown, false
}

// Names yields, in display order, the resource names for which fact holds:
// every single resource of the table and, for huge pages, the page sizes
// people most often name (hugepages-2Mi, hugepages-1Gi; a machine may have
// others). fact is one of the predicates of this package: Published,
// Configurable, Reservable, Jitters, QoSCompute, PodLevel, Headline.
func Names(fact func(name string) bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := range table {
			k := &table[i]
			if !fact(k.name) {
				continue
			}
			if !k.family {
				if !yield(k.name) {
					return
				}
				continue
			}
			for _, m := range k.members {
				if !yield(k.name + m) {
					return
				}
			}
		}
	}
}

// Kinds yields, in display order, the kinds of resource for which fact
// holds, as people write them: a resource by its name, huge pages as
// "hugepages-<size>". It is for messages and help ("cpu, memory,
// ephemeral-storage, hugepages-<size>").
func Kinds(fact func(name string) bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := range table {
			k := &table[i]
			if fact(k.name) && !yield(k.name+k.size) {
				return
			}
		}
	}
}

// Known reports whether name is a resource node-resized knows.
func Known(name string) bool {
	_, ok := kindOf(name)
	return ok
}

// Published reports whether name is a resource that node-resized publishes
// in Node status and manages (cpu, memory, ephemeral-storage, hugepages-*).
func Published(name string) bool {
	k, _ := kindOf(name)
	return k.published
}

// Configurable reports whether the configured capacity may give name (cpu,
// memory, ephemeral-storage, hugepages-*); any other name in it is ignored.
func Configurable(name string) bool {
	k, _ := kindOf(name)
	return k.configurable
}

// Reservable reports whether name may be given in the kubelet's
// systemReserved and kubeReserved (cpu, memory, ephemeral-storage, pid).
func Reservable(name string) bool {
	k, _ := kindOf(name)
	return k.reservable
}

// KubepodsLimit returns the kubepods cgroup limit the kubelet writes from
// name's allocatable amount (LimitNone for ephemeral-storage and unknown
// names).
func KubepodsLimit(name string) Limit {
	k, _ := kindOf(name)
	return k.limit
}

// Jitters reports whether name's amount drifts by itself, so that a
// difference under the memory-jitter tolerance is no change (memory).
func Jitters(name string) bool {
	k, _ := kindOf(name)
	return k.jitter
}

// QoSCompute reports whether name's requests and limits decide a pod's QoS
// class (cpu, memory).
func QoSCompute(name string) bool {
	k, _ := kindOf(name)
	return k.qos
}

// PodLevel reports whether name may be set in a pod's spec.resources (cpu,
// memory, hugepages-*).
func PodLevel(name string) bool {
	k, _ := kindOf(name)
	return k.podLevel
}

// Headline reports whether name leads displays and is shown in one-line
// summaries (cpu, memory).
func Headline(name string) bool {
	k, _ := kindOf(name)
	return k.lead > 0
}

// Example returns a quantity of name as a person writes it, for help texts
// ("8Gi" for memory; "" for an unknown name).
func Example(name string) string {
	k, _ := kindOf(name)
	return k.example
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

// compareDisplay orders resource names for display: the leading resources
// first (cpu, then memory), then the rest by name.
func compareDisplay(a, b string) int {
	ka, _ := kindOf(a)
	kb, _ := kindOf(b)
	if la, lb := ka.leadRank(), kb.leadRank(); la != lb {
		if la < lb {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// leadRank is lead with the unranked last.
func (k *kind) leadRank() int {
	if k.lead == 0 {
		return len(table) + 1
	}
	return k.lead
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
