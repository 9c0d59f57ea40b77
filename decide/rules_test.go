package decide

import (
	"errors"
	"github.com/node-resized/node-resized/types"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"
)

// TestValidationRules walks SPEC.md's validation rules, one case each, on a
// node that has settled on its hardware (4 CPUs, 16Gi) with no configured
// capacity.
func TestValidationRules(t *testing.T) {
	hw := machine(4, 16*Gi)
	hwPages := hw.with("hugepages-2Mi", 2*Gi)
	hwSwap := hw
	hwSwap.SwapActive = true

	tests := []struct {
		name       string
		phys       Physical
		conf       types.Configured
		reason     types.Reason
		target     resources.List // entries that must match
		actuates   bool
		err        bool
		msg        string // part of the condition message
		ignored    []string
		noActions  bool
		firstPhase types.Reason // the condition of the first pass, when it differs from reason
	}{
		{
			name: "field absent: physical, nothing to reconcile", phys: hw, conf: types.Configured{},
			reason: types.ReasonAccepted, target: resources.List{"cpu": 4000, "memory": 16 * Gi}, noActions: true,
		},
		{
			name: "field present but empty: physical for every resource", phys: hw, conf: spec(),
			reason: types.ReasonAccepted, target: resources.List{"cpu": 4000, "memory": 16 * Gi},
		},
		{
			name: "key absent: physical for that resource", phys: hw, conf: spec("cpu", "2"),
			reason: types.ReasonAccepted, target: resources.List{"cpu": 2000, "memory": 16 * Gi}, actuates: true,
			firstPhase: types.ReasonInProgress,
		},
		{
			name: "zero is malformed: Infeasible for the whole request", phys: hw, conf: spec("cpu", "2", "memory", "0"),
			reason: types.ReasonInfeasible, target: resources.List{"cpu": 4000, "memory": 16 * Gi}, err: true, msg: "must be positive",
		},
		{
			name: "negative is malformed", phys: hw, conf: spec("memory", "-1Gi"),
			reason: types.ReasonInfeasible, target: resources.List{"memory": 16 * Gi}, err: true, msg: "must be positive",
		},
		{
			name: "not a ResourceList at all is malformed", phys: hw, conf: types.Configured{Present: true, Invalid: "annotation is not a JSON object"},
			reason: types.ReasonInfeasible, target: resources.List{"cpu": 4000}, err: true, msg: "not a JSON object",
		},
		{
			name: "unparsable is malformed", phys: hw, conf: spec("cpu", "2", "memory", "lots"),
			reason: types.ReasonInfeasible, target: resources.List{"cpu": 4000}, err: true, msg: "is not a quantity",
		},
		{
			name: "bad huge page name is malformed", phys: hw, conf: spec("hugepages-big", "1Gi"),
			reason: types.ReasonInfeasible, err: true, msg: "not a valid huge page resource name",
		},
		{
			name: "cpu above physical: Infeasible, held at physical", phys: hw, conf: spec("cpu", "8"),
			reason: types.ReasonInfeasible, target: resources.List{"cpu": 4000}, msg: "cpu 8 > physical 4",
		},
		{
			name: "memory above physical: Infeasible", phys: hw, conf: spec("memory", "17Gi"),
			reason: types.ReasonInfeasible, target: resources.List{"memory": 16 * Gi}, msg: "exceeds physical capacity",
		},
		{
			name: "huge pages within the pool", phys: hwPages, conf: spec("hugepages-2Mi", "1Gi"),
			reason: types.ReasonAccepted, target: resources.List{"hugepages-2Mi": Gi}, actuates: true, firstPhase: types.ReasonInProgress,
		},
		{
			name: "huge pages spelled differently are the same pool", phys: hwPages, conf: spec("hugepages-2048Ki", "2Gi"),
			reason: types.ReasonAccepted, target: resources.List{"hugepages-2Mi": 2 * Gi},
		},
		{
			name: "huge pages above the pool", phys: hwPages, conf: spec("hugepages-2Mi", "3Gi"),
			reason: types.ReasonInfeasible, target: resources.List{"hugepages-2Mi": 2 * Gi}, msg: "hugepages-2Mi 3Gi > physical 2Gi",
		},
		{
			name: "huge pages of a size with no pool", phys: hw, conf: spec("hugepages-1Gi", "1Gi"),
			reason: types.ReasonInfeasible, msg: "hugepages-1Gi",
		},
		{
			name: "ephemeral-storage within the root filesystem", phys: hw, conf: spec("ephemeral-storage", "50G"),
			reason: types.ReasonAccepted, target: resources.List{"ephemeral-storage": 50_000_000_000}, actuates: true, firstPhase: types.ReasonInProgress,
		},
		{
			name: "ephemeral-storage above the root filesystem", phys: hw, conf: spec("ephemeral-storage", "200G"),
			reason: types.ReasonInfeasible, target: resources.List{"ephemeral-storage": 100_000_000_000},
		},
		{
			name: "unknown names are ignored", phys: hw, conf: spec("cpu", "4", "nvidia.com/gpu", "garbage", "pods", "-1"),
			reason: types.ReasonAccepted, target: resources.List{"cpu": 4000}, ignored: []string{"nvidia.com/gpu", "pods"},
		},
		{
			name: "memory while swap is active", phys: hwSwap, conf: spec("memory", "8Gi"),
			reason: types.ReasonInfeasible, target: resources.List{"memory": 16 * Gi}, err: true, msg: "swap-enabled nodes are not supported",
		},
		{
			name: "cpu only while swap is active is fine", phys: hwSwap, conf: spec("cpu", "4"),
			reason: types.ReasonAccepted, target: resources.List{"cpu": 4000},
		},
		{
			name: "memory below the reservations is rejected", phys: hw, conf: spec("memory", "800Mi"),
			reason: types.ReasonInfeasible, target: resources.List{"memory": 16 * Gi}, err: true, msg: "below the kubelet's reservations",
		},
		{
			name: "cpu below the reservations is rejected", phys: hw, conf: spec("cpu", "50m"),
			reason: types.ReasonInfeasible, target: resources.List{"cpu": 4000}, err: true, msg: "cpu 50m < 100m",
		},
		{
			name: "memory exactly at the reservations is allowed", phys: hw, conf: spec("memory", "868Mi"),
			reason: types.ReasonAccepted, target: resources.List{"memory": 868 * Mi}, actuates: true, firstPhase: types.ReasonInProgress,
		},
		{
			name: "memory one byte under the reservations is rejected", phys: hw, conf: spec("memory", "910163967"),
			reason: types.ReasonInfeasible, err: true, msg: "below the kubelet's reservations",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.phys, types.Configured{})
			n.step(nil) // settled on the hardware, no configured capacity
			d := n.step(func(in *Input) { in.Configured = tc.conf })
			first := tc.firstPhase
			if first == "" {
				first = tc.reason
			}
			if d.Condition.Reason != first {
				t.Fatalf("condition %s (%s), want %s", d.Condition.Reason, d.Condition.Message, first)
			}
			if tc.actuates != actuates(d) {
				t.Fatalf("actuates = %v, want %v (%v)", actuates(d), tc.actuates, kinds(d.Actions))
			}
			if tc.noActions && len(d.Actions) != 0 {
				t.Fatalf("actions %v, want none", kinds(d.Actions))
			}
			d = n.settle()
			if d.Condition.Reason != tc.reason {
				t.Fatalf("settled condition %s (%s), want %s", d.Condition.Reason, d.Condition.Message, tc.reason)
			}
			for name, v := range tc.target {
				if d.Target[name] != v {
					t.Fatalf("target %s = %d, want %d (target %v)", name, d.Target[name], v, d.Target)
				}
			}
			var rej *RejectedError
			if got := errors.As(d.Err, &rej); got != tc.err {
				t.Fatalf("Err = %v, want an error: %v", d.Err, tc.err)
			}
			if !strings.Contains(d.Condition.Message, tc.msg) {
				t.Fatalf("message %q does not contain %q", d.Condition.Message, tc.msg)
			}
			if strings.Join(d.Ignored, ",") != strings.Join(tc.ignored, ",") {
				t.Fatalf("ignored %v, want %v", d.Ignored, tc.ignored)
			}
		})
	}
}

// An Infeasible spec value is terminal: the same value is not retried; a new
// value is evaluated afresh.
func TestInfeasibleIsTerminalForThatSpecValue(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), spec("cpu", "0"))
	d := n.step(nil)
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	if e := d.Actions[1].(EmitEvent); e.Type != types.EventWarning || e.Reason != types.EventCapacityInfeasible {
		t.Fatalf("event %+v, want a Warning %s", e, types.EventCapacityInfeasible)
	}
	// Time passes, passes repeat (resyncs): nothing is retried.
	for i := 1; i <= 5; i++ {
		d = n.step(func(in *Input) { in.Now = t0.Add(minutes(i)) })
		n.expect(d, types.ReasonInfeasible)
	}
	// Same value in another spelling is another value, evaluated afresh.
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "0m") })
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	// A valid value is applied.
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "2") })
	n.expect(d, types.ReasonInProgress, KindEvict)
	n.expect(n.settle(), types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
}

func TestMemoryJitter(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), types.Configured{})
	n.step(nil)
	for _, drift := range []int64{+50 * Mi, -50 * Mi, +99 * Mi, -99 * Mi, +1, -4096} {
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi+drift) })
		n.expect(d, types.ReasonAccepted)
		if d.Target[resources.Memory] != 16*Gi {
			t.Fatalf("drift %d moved the target to %d", drift, d.Target[resources.Memory])
		}
	}
	// 150Mi gone is a change: an unplanned loss, clamped at once.
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi-150*Mi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	if d.Target[resources.Memory] != 16*Gi-150*Mi {
		t.Fatalf("target memory %d, want %d", d.Target[resources.Memory], 16*Gi-150*Mi)
	}
	// Drift is measured from the last accepted reading, so it cannot creep.
	n.settle()
	for i := 0; i < 3; i++ {
		n.step(func(in *Input) { in.Physical.Capacity[resources.Memory] -= 60 * Mi })
	}
	if got := n.in.Previous.Applied[resources.Memory]; got >= 16*Gi-150*Mi {
		t.Fatalf("three drifts of 60Mi left the target at %d", got)
	}
	// A configured value exactly at the old reading does not turn a small
	// downward drift into an emergency.
	m := newNode(t, machine(4, 16*Gi), spec("memory", "16Gi"))
	m.step(nil)
	d = m.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi-40*Mi) })
	m.expect(d, types.ReasonAccepted)

	// The tolerance is configurable.
	k := newNode(t, machine(4, 16*Gi), types.Configured{})
	k.in.JitterMemory = 10 * Mi
	k.step(nil)
	d = k.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi-50*Mi) })
	k.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
}

func TestNonsensePhysicalReadingIsRefused(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), spec("cpu", "4"))
	n.step(nil)
	before := n.in.Previous
	for _, p := range []Physical{
		machine(0, 16*Gi),
		machine(4, 0),
		machine(-1, 16*Gi),
		machine(4, 500*Mi), // below the reservations
	} {
		d := n.step(func(in *Input) { in.Physical = p })
		var rej *RejectedError
		if !errors.As(d.Err, &rej) || rej.What != "physical capacity" {
			t.Fatalf("reading %+v: Err = %v, want a refused physical capacity", p, d.Err)
		}
		if len(d.Actions) != 0 || !statesEqual(d.Next, before) {
			t.Fatalf("reading %+v acted: %v", p, kinds(d.Actions))
		}
		if !d.Target.Equal(before.Applied) {
			t.Fatalf("reading %+v moved the target to %v", p, d.Target)
		}
	}
}

func TestFirstPassBootstrapParity(t *testing.T) {
	// The configured value wins over the hardware at start-up, even when the
	// kubelet started on the bigger machine.
	n := newNode(t, machine(8, 32*Gi), spec("memory", "20Gi"))
	n.in.Kubelet = Kubelet{Known: true, Ready: true, Capacity: resources.List{"cpu": 8000, "memory": 32 * Gi, "pods": 110}}
	d := n.step(nil)
	n.expect(d, types.ReasonInProgress, KindEvict)
	if d.Target[resources.Memory] != 20*Gi || d.Target[resources.CPU] != 8000 {
		t.Fatalf("target %v", d.Target)
	}
	d = n.settle()
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
	if !strings.Contains(d.Condition.Message, "not restarted") {
		t.Fatalf("message %q should say the kubelet is not restarted for an under-reported target", d.Condition.Message)
	}

	// Hardware that shrank while nobody watched is an emergency on the
	// first pass.
	m := newNode(t, machine(4, 16*Gi), types.Configured{})
	m.in.Kubelet = Kubelet{Known: true, Ready: true, Capacity: resources.List{"cpu": 8000, "memory": 16 * Gi}}
	d = m.step(nil)
	m.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
}
