package decide

import (
	"encoding/json"
	"fmt"
	"github.com/node-resized/node-resized/types"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// machine is a test node: cpus online CPUs, mem bytes, empty huge page pools
// of both sizes, a 100G root filesystem.
func machine(cpus, mem int64) Physical {
	return Physical{Capacity: resources.List{
		resources.CPU:              cpus * 1000,
		resources.Memory:           mem,
		"hugepages-2Mi":            0,
		"hugepages-1Gi":            0,
		resources.EphemeralStorage: 100_000_000_000,
		resources.PID:              4194304,
	}}
}

// with returns a copy of p with the named amount set.
func (p Physical) with(name string, v int64) Physical {
	p.Capacity = p.Capacity.Clone()
	p.Capacity[name] = v
	return p
}

// testReservations are typical kubeadm-like reservations.
func testReservations() Reservations {
	tenPct, _, _ := ParseThreshold("10%")
	return Reservations{
		SystemReserved:  resources.List{"cpu": 100, "memory": 512 * Mi},
		KubeReserved:    resources.List{"memory": 256 * Mi},
		MemoryAvailable: Threshold{Quantity: 100 * Mi},
		NodeFsAvailable: tenPct,
	}
}

// spec builds a present configured capacity from name, value pairs.
func spec(kv ...string) types.Configured {
	c := types.Configured{Present: true, Raw: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Raw[kv[i]] = kv[i+1]
	}
	return c
}

func kinds(actions []Action) []ActionKind {
	out := make([]ActionKind, 0, len(actions))
	for _, a := range actions {
		out = append(out, a.Kind())
	}
	return out
}

func find[T Action](actions []Action) (T, bool) {
	for _, a := range actions {
		if v, ok := a.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// node drives Decide the way the daemon does: each step feeds the previous
// Next back, and every step is immediately repeated to check that an
// unchanged input yields no new actions.
type node struct {
	t    *testing.T
	in   Input
	last Decision
}

func newNode(t *testing.T, p Physical, c types.Configured) *node {
	t.Helper()
	return &node{t: t, in: Input{Physical: p, Configured: c, Reservations: testReservations(), Now: t0}}
}

func (n *node) step(mut func(in *Input)) Decision {
	n.t.Helper()
	if mut != nil {
		mut(&n.in)
	}
	d := Decide(n.in)
	checkInvariants(n.t, n.in, d)
	n.in.Previous = d.Next
	again := Decide(n.in)
	if len(again.Actions) > 0 {
		n.t.Fatalf("same input decided twice: second pass has actions %v (first: %v)", kinds(again.Actions), kinds(d.Actions))
	}
	if !reflect.DeepEqual(again.Next, d.Next) {
		n.t.Fatalf("same input decided twice: state moved\nfirst  %+v\nsecond %+v", d.Next, again.Next)
	}
	n.last = d
	return d
}

// settle reports every eviction done until the node is quiet.
func (n *node) settle() Decision {
	n.t.Helper()
	d := n.last
	for i := 0; i < 10; i++ {
		if !n.in.Previous.Evicting {
			return d
		}
		d = n.step(func(in *Input) {
			in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Done: true}
		})
	}
	n.t.Fatalf("node did not settle: %+v", n.in.Previous)
	return d
}

// evicting reports the evictor's first look at the pods of the shrink in
// flight: some have to go (not Done, nothing blocked).
func (n *node) evicting() Decision {
	n.t.Helper()
	return n.step(func(in *Input) {
		in.Eviction = types.EvictionReport{Generation: in.Previous.Generation}
	})
}

func (n *node) expect(d Decision, reason types.Reason, want ...ActionKind) {
	n.t.Helper()
	if d.Condition.Reason != reason {
		n.t.Fatalf("condition %s (%s), want %s", d.Condition.Reason, d.Condition.Message, reason)
	}
	if got := kinds(d.Actions); !reflect.DeepEqual(got, append([]ActionKind{}, want...)) {
		n.t.Fatalf("actions %v, want %v (condition %s: %s)", got, want, d.Condition.Reason, d.Condition.Message)
	}
}

// checkInvariants holds for every decision, whatever the input.
func checkInvariants(t *testing.T, in Input, d Decision) {
	t.Helper()
	jitter := in.JitterMemory
	if jitter <= 0 {
		jitter = DefaultJitterMemory
	}
	if d.Err != nil && strings.HasPrefix(d.Err.Error(), "physical capacity") {
		if len(d.Actions) != 0 {
			t.Fatalf("nonsense physical reading actuated: %v", kinds(d.Actions))
		}
		return
	}
	raw := in.Physical.published()
	for name, v := range d.Target {
		if v < 0 {
			t.Fatalf("negative target %s=%d", name, v)
		}
		if v > d.Physical[name] {
			t.Fatalf("target %s=%d above the physical capacity used %d", name, v, d.Physical[name])
		}
		limit := raw[name]
		if name == resources.Memory {
			limit += jitter
		}
		if v > limit {
			t.Fatalf("target %s=%d above measured physical %d (+jitter for memory)", name, v, raw[name])
		}
		if a := d.Allocatable[name]; a > v || a < 0 {
			t.Fatalf("allocatable %s=%d not within [0, target %d]", name, a, v)
		}
	}
	// (A planned shrink checked before the spec turned Infeasible is
	// published and clamped once the pods are looked at; what a planned
	// release took offline is given back whatever the new request.)
	if d.Condition.Reason == types.ReasonInfeasible && actuates(d, KindReassertCgroups, KindGiveBack) && !in.Previous.Checking {
		t.Fatalf("Infeasible decision actuates: %v", kinds(d.Actions))
	}
	switch {
	case d.Next.Checking:
		// The shrink is not published before the evictor has looked
		// at the pods.
		if hasKind(d.Actions, KindPatchNodeStatus) {
			t.Fatalf("a status patch while the pods are checked: %v", kinds(d.Actions))
		}
		if d.Condition.Reason != types.ReasonInProgress || !d.Next.Condition.Same(in.Previous.Condition) {
			t.Fatalf("checking: condition %+v, Next.Condition %+v; want InProgress and the one published before", d.Condition, d.Next.Condition)
		}
	case !d.Next.Condition.Same(d.Condition):
		t.Fatalf("Next.Condition %+v differs from Condition %+v", d.Next.Condition, d.Condition)
	}
	if d.Next.Tainted && !in.Policy.TaintWhileStale {
		t.Fatalf("tainted with the taint turned off")
	}
	if !d.Next.Applied.Equal(d.Target) {
		t.Fatalf("Next.Applied %v differs from Target %v", d.Next.Applied, d.Target)
	}
	before := in.Previous.Applied
	if before == nil {
		before, _ = firstBaseline(in, d.Physical, jitter)
	}
	moved := !zeroFilledEqual(before, d.Target)
	for _, a := range d.Actions {
		switch a := a.(type) {
		case PatchNodeStatus:
			if !a.Condition.Same(d.Condition) {
				t.Fatalf("patched condition %+v differs from the decision's %+v", a.Condition, d.Condition)
			}
		case ClampCgroups, Evict:
			// A planned shrink's clamp and evictions come after its
			// status, once the pods are checked.
			if !moved && !in.Previous.Checking {
				t.Fatalf("%s without a change of target (%v)", a.Kind(), d.Target)
			}
		case GrowCgroups:
			if !moved {
				t.Fatalf("%s without a change of target (%v)", a.Kind(), d.Target)
			}
		}
	}
	// The restart budget holds, whatever the input: no restart while the
	// window holds the budget's worth.
	pol := in.Policy.withDefaults()
	if hasKind(d.Actions, KindRestartKubelet) {
		var within int
		for _, at := range in.Previous.Restarts {
			if in.Now.Sub(at) < pol.RestartBudgetWindow {
				within++
			}
		}
		if within >= pol.RestartBudget {
			t.Fatalf("a kubelet restart with %d restarts in the last %s already (budget %d)", within, pol.RestartBudgetWindow, pol.RestartBudget)
		}
	}
	if len(d.Next.Restarts) > pol.RestartBudget {
		t.Fatalf("%d restarts kept, more than the budget %d", len(d.Next.Restarts), pol.RestartBudget)
	}
	// State survives a JSON round trip (it is written to a file).
	b, err := json.Marshal(d.Next)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !statesEqual(back, d.Next) {
		t.Fatalf("state changed across JSON:\n%+v\n%+v", d.Next, back)
	}
}

func statesEqual(a, b State) bool {
	norm := func(s State) string {
		s.Condition.LastTransitionTime = s.Condition.LastTransitionTime.UTC()
		s.ChangedAt, s.RestartAt, s.RestartFailedAt = s.ChangedAt.UTC(), s.RestartAt.UTC(), s.RestartFailedAt.UTC()
		s.LimitsFailedAt = s.LimitsFailedAt.UTC()
		if len(s.Applied) == 0 {
			s.Applied = nil
		}
		if len(s.Physical) == 0 {
			s.Physical = nil
		}
		if len(s.EmergencyTarget) == 0 {
			s.EmergencyTarget = nil
		}
		// The restart history's times, as the clock gave them.
		s.Restarts = slices.Clone(s.Restarts)
		for i := range s.Restarts {
			s.Restarts[i] = s.Restarts[i].UTC()
		}
		return fmt.Sprintf("%+v", s)
	}
	return norm(a) == norm(b)
}

func minutes(i int) time.Duration { return time.Duration(i) * time.Minute }

// zeroFilledEqual compares two resources.List, a missing name counting as 0.
func zeroFilledEqual(a, b resources.List) bool {
	for _, n := range union(a, b) {
		if a[n] != b[n] {
			return false
		}
	}
	return true
}

// actuates reports whether any of the decision's actions changes the node,
// those of the kinds in but left aside.
func actuates(d Decision, but ...ActionKind) bool {
	for _, a := range d.Actions {
		if a.Actuates() && !slices.Contains(but, a.Kind()) {
			return true
		}
	}
	return false
}
