package resources

import (
	"slices"
	"testing"
)

// TestFacts pins what the table says of each resource: every question the
// rest of node-resized asks about one.
func TestFacts(t *testing.T) {
	type facts struct {
		known, published, configurable, reservable, jitters, qos, podLevel, headline, milli bool

		limit   Limit
		unit    Unit
		example string
	}
	tests := map[string]facts{
		CPU: {known: true, published: true, configurable: true, reservable: true, qos: true, podLevel: true, headline: true, milli: true,
			limit: LimitCPU, unit: UnitCore, example: "4, 1500m"},
		Memory: {known: true, published: true, configurable: true, reservable: true, jitters: true, qos: true, podLevel: true, headline: true,
			limit: LimitMemory, unit: UnitByte, example: "8Gi"},
		EphemeralStorage: {known: true, published: true, configurable: true, reservable: true,
			unit: UnitByte, example: "100Gi"},
		"hugepages-2Mi": {known: true, published: true, configurable: true, podLevel: true,
			limit: LimitHugeTLB, unit: UnitByte, example: "1Gi"},
		"hugepages-64Ki": {known: true, published: true, configurable: true, podLevel: true,
			limit: LimitHugeTLB, unit: UnitByte, example: "1Gi"},
		PID: {known: true, reservable: true,
			limit: LimitPids, unit: UnitInteger},
		"pods":            {},
		"example.com/gpu": {},
		"":                {},
	}
	for name, want := range tests {
		got := facts{
			known: Known(name), published: Published(name), configurable: Configurable(name), reservable: Reservable(name),
			jitters: Jitters(name), qos: QoSCompute(name), podLevel: PodLevel(name), headline: Headline(name), milli: Milli(name),
			limit: KubepodsLimit(name), unit: UnitOf(name), example: Example(name),
		}
		if got != want {
			t.Errorf("%q:\n got %+v\nwant %+v", name, got, want)
		}
	}
}

// TestNames: the loops over a fact go in display order, and offer the
// usual huge page sizes, smaller first.
func TestNames(t *testing.T) {
	tests := []struct {
		fact      string
		names     []string
		kinds     []string
		predicate func(string) bool
	}{
		{"Published", []string{CPU, Memory, EphemeralStorage, "hugepages-2Mi", "hugepages-1Gi"},
			[]string{CPU, Memory, EphemeralStorage, "hugepages-<size>"}, Published},
		{"Configurable", []string{CPU, Memory, EphemeralStorage, "hugepages-2Mi", "hugepages-1Gi"},
			[]string{CPU, Memory, EphemeralStorage, "hugepages-<size>"}, Configurable},
		{"Reservable", []string{CPU, Memory, EphemeralStorage, PID},
			[]string{CPU, Memory, EphemeralStorage, PID}, Reservable},
		{"Jitters", []string{Memory}, []string{Memory}, Jitters},
		{"QoSCompute", []string{CPU, Memory}, []string{CPU, Memory}, QoSCompute},
		{"PodLevel", []string{CPU, Memory, "hugepages-2Mi", "hugepages-1Gi"},
			[]string{CPU, Memory, "hugepages-<size>"}, PodLevel},
		{"Headline", []string{CPU, Memory}, []string{CPU, Memory}, Headline},
	}
	for _, tt := range tests {
		if got := slices.Collect(Names(tt.predicate)); !slices.Equal(got, tt.names) {
			t.Errorf("Names(%s) = %q, want %q", tt.fact, got, tt.names)
		}
		if got := slices.Collect(Kinds(tt.predicate)); !slices.Equal(got, tt.kinds) {
			t.Errorf("Kinds(%s) = %q, want %q", tt.fact, got, tt.kinds)
		}
	}
	for range Names(Published) {
		break // stopping early must not panic
	}
	for range Kinds(Published) {
		break
	}
}

// TestTable checks the table's own consistency: its order is the display
// order, names and limits are unique, a family's usual members are
// canonical names, and what is configurable or leads displays is published.
func TestTable(t *testing.T) {
	names := make([]string, len(table))
	limits := map[Limit]string{}
	leads := map[int]string{}
	for i, k := range table {
		names[i] = k.name
		if k.name == "" || k.format == "" || k.unit == "" {
			t.Errorf("row %d (%q) lacks a name, format or unit", i, k.name)
		}
		if k.limit != LimitNone {
			if o, dup := limits[k.limit]; dup {
				t.Errorf("%s and %s both set the kubepods limit %s", o, k.name, k.limit)
			}
			limits[k.limit] = k.name
		}
		if k.lead != 0 {
			if o, dup := leads[k.lead]; dup {
				t.Errorf("%s and %s both lead at %d", o, k.name, k.lead)
			}
			leads[k.lead] = k.name
		}
		if (k.configurable || k.lead != 0) && !k.published {
			t.Errorf("%s is configurable or leads displays but is not published", k.name)
		}
		if k.configurable && k.example == "" {
			t.Errorf("%s is configurable but has no example for help texts", k.name)
		}
		if k.family != (k.size != "") || k.family != (len(k.members) > 0) {
			t.Errorf("%s: family %v, size %q, members %q: a family has both, a single resource neither", k.name, k.family, k.size, k.members)
		}
		for _, m := range k.members {
			if c, ok := Canonical(k.name + m); !ok || c != k.name+m {
				t.Errorf("%s: member %q is not a canonical name (%q, %v)", k.name, k.name+m, c, ok)
			}
		}
	}
	if !slices.IsSortedFunc(names, compareDisplay) {
		t.Errorf("the table's rows %q are not in display order", names)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("a name appears twice in %q", names)
	}
}

// TestStringOrder: a List renders cpu and memory first, the rest by name.
func TestStringOrder(t *testing.T) {
	l := List{PID: 32768, "hugepages-2Mi": 0, "example.com/gpu": 1, EphemeralStorage: 100 << 30, Memory: 8 << 30, CPU: 4000, "hugepages-1Gi": 1 << 30}
	want := "cpu=4, memory=8Gi, ephemeral-storage=100Gi, example.com/gpu=1, hugepages-1Gi=1Gi, hugepages-2Mi=0, pid=32768"
	if got := l.String(); got != want {
		t.Errorf("String() = %q\nwant %q", got, want)
	}
}
