package decide

import (
	"github.com/node-resized/node-resized/types"
	"testing"

	"github.com/node-resized/node-resized/resources"
)

// Every condition decided while a configured capacity is present names it,
// whatever the path, so that whoever set it can tell a condition decided for
// it from one left from an earlier value.
func TestConditionNamesTheRequest(t *testing.T) {
	other := spec("cpu", "3")
	check := func(t *testing.T, d Decision, conf types.Configured, reason types.Reason) {
		t.Helper()
		if d.Condition.Reason != reason {
			t.Fatalf("condition %s (%s), want %s", d.Condition.Reason, d.Condition.Message, reason)
		}
		if !d.Condition.DecidedFor(conf) {
			t.Errorf("%s %q: not decided for %+v", reason, d.Condition.Message, conf)
		}
		for _, o := range []types.Configured{other, {}, spec("cpu", "4", "memory", "8Gi")} {
			if o.Key() != conf.Key() && d.Condition.DecidedFor(o) {
				t.Errorf("%s %q: decided for %+v too", reason, d.Condition.Message, o)
			}
		}
	}

	t.Run("absent", func(t *testing.T) {
		n := newNode(t, machine(4, 16*Gi), types.Configured{})
		check(t, n.step(nil), types.Configured{}, types.ReasonAccepted)
	})
	t.Run("accepted", func(t *testing.T) {
		n := newNode(t, machine(4, 16*Gi), spec("cpu", "4"))
		check(t, n.step(nil), spec("cpu", "4"), types.ReasonAccepted)
		// An equal value written anew is the same request.
		if !n.last.Condition.DecidedFor(spec("cpu", "4")) {
			t.Error("not decided for an equal value")
		}
	})
	t.Run("infeasible", func(t *testing.T) {
		n := newNode(t, machine(4, 16*Gi), types.Configured{})
		n.step(nil)
		check(t, n.step(func(in *Input) { in.Configured = spec("cpu", "16") }), spec("cpu", "16"), types.ReasonInfeasible)
	})
	t.Run("in progress and accepted after a shrink", func(t *testing.T) {
		n := newNode(t, machine(8, 16*Gi), spec("cpu", "8"))
		n.step(nil)
		check(t, n.step(func(in *Input) { in.Configured = spec("cpu", "4") }), spec("cpu", "4"), types.ReasonInProgress)
		check(t, n.settle(), spec("cpu", "4"), types.ReasonAccepted)
	})
	t.Run("emergency reduced", func(t *testing.T) {
		n := newNode(t, machine(8, 16*Gi), spec("cpu", "8"))
		n.step(nil)
		n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 4000) })
		check(t, n.settle(), spec("cpu", "8"), types.ReasonEmergencyReduced)
	})
}
