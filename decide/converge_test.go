package decide

import (
	"github.com/node-resized/node-resized/types"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"
)

func TestEnforcedCapacity(t *testing.T) {
	r := testReservations() // cpu 100m, memory 768Mi reserved
	phys := machine(4, 8*Gi).Capacity
	limits := func(cpus, mem int64) CgroupLimits { return KubepodsLimits(machine(cpus, mem).Capacity, r) }
	for _, tc := range []struct {
		name string
		l    CgroupLimits
		r    Reservations
		want resources.List
	}{
		{name: "what the kubelet writes for the hardware", l: limits(4, 8*Gi)},
		{name: "unknown", l: CgroupLimits{}},
		{name: "smaller than the hardware's", l: limits(2, 4*Gi)},
		{name: "a larger machine's", l: limits(8, 16*Gi), want: resources.List{"cpu": 8000, "memory": 16 * Gi}},
		{name: "memory only", l: CgroupLimits{MemoryMax: 16*Gi - 768*Mi}, want: resources.List{"memory": 16 * Gi}},
		{name: "memory within the jitter", l: CgroupLimits{MemoryMax: 8*Gi - 768*Mi + 50*Mi}},
		{name: "memory at the jitter", l: CgroupLimits{MemoryMax: 8*Gi - 768*Mi + 100*Mi}, want: resources.List{"memory": 8*Gi + 100*Mi}},
		{name: "one CPU more", l: CgroupLimits{CPUWeight: limits(5, 8*Gi).CPUWeight}, want: resources.List{"cpu": 5000}},
		{name: "a weight between two CPU counts is the larger", l: CgroupLimits{CPUWeight: limits(6, 8*Gi).CPUWeight - 1}, want: resources.List{"cpu": 6000}},
		{name: "a weight the kubelet never writes", l: CgroupLimits{CPUWeight: MaxWeight + 1}},
		{name: "pods not enforced: memory.max is the capacity", l: CgroupLimits{MemoryMax: 16 * Gi},
			r: Reservations{PodsNotEnforced: true}, want: resources.List{"memory": 16 * Gi}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := r
			if tc.r.PodsNotEnforced {
				rr = tc.r
			}
			got := EnforcedCapacity(tc.l, phys, rr, DefaultJitterMemory)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("EnforcedCapacity(%+v) = %v, want %v", tc.l, got, tc.want)
			}
		})
	}
}

// The machine shrank while node-resized was not running and there is no
// state file: the kubepods limits read at start are the evidence, and the
// first pass clamps them as Path B.
func TestConvergeAtStart(t *testing.T) {
	r := testReservations()
	big := KubepodsLimits(machine(8, 16*Gi).Capacity, r)
	for _, tc := range []struct {
		name     string
		enforced CgroupLimits
		conf     types.Configured
		first    types.Reason
		actions  []ActionKind
		message  string // a part of the first condition's message
		settled  types.Reason
	}{{
		name: "no configured capacity: clamp, warn, evict, then follow the hardware", enforced: big,
		first: types.ReasonInProgress, actions: []ActionKind{KindClampCgroups, KindEmitEvent, KindEvict},
		message: "cpu 8 → 4, memory 16Gi → 8Gi", settled: types.ReasonAccepted,
	}, {
		name: "a configured capacity that was met: EmergencyReduced", enforced: big, conf: spec("cpu", "8", "memory", "16Gi"),
		first: types.ReasonInProgress, actions: []ActionKind{KindClampCgroups, KindEmitEvent, KindEvict},
		message: "while node-resized was not running", settled: types.ReasonEmergencyReduced,
	}, {
		name:     "a configured capacity never met: held Infeasible (Path A1), nothing clamped",
		enforced: KubepodsLimits(machine(4, 8*Gi).Capacity, r), conf: spec("cpu", "8"),
		first: types.ReasonInfeasible, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, settled: types.ReasonInfeasible,
	}, {
		name: "limits for the hardware as it is", enforced: KubepodsLimits(machine(4, 8*Gi).Capacity, r),
		first: types.ReasonAccepted, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, settled: types.ReasonAccepted,
	}, {
		name: "limits unknown", first: types.ReasonAccepted, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, settled: types.ReasonAccepted,
	}, {
		name: "memory.max alone", enforced: CgroupLimits{MemoryMax: big.MemoryMax},
		first: types.ReasonInProgress, actions: []ActionKind{KindClampCgroups, KindEmitEvent, KindEvict},
		message: "memory 16Gi → 8Gi", settled: types.ReasonAccepted,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, machine(4, 8*Gi), tc.conf)
			n.in.Enforced = tc.enforced
			d := n.step(nil)
			n.expect(d, tc.first, tc.actions...)
			if !strings.Contains(d.Condition.Message, tc.message) {
				t.Fatalf("message %q, want it to contain %q", d.Condition.Message, tc.message)
			}
			if c, ok := find[ClampCgroups](d.Actions); ok {
				if want := KubepodsLimits(withPID(d.Target, 4194304), r); !reflect.DeepEqual(c.Limits, want) {
					t.Fatalf("clamp %+v, want what the kubelet writes for the hardware %+v", c.Limits, want)
				}
				e, _ := find[EmitEvent](d.Actions)
				if e.Type != types.EventWarning || e.Reason != types.EventEmergencyCapacityReduced {
					t.Fatalf("event %+v", e)
				}
			}
			if d.Target[resources.CPU] != 4000 && tc.first != types.ReasonInfeasible {
				t.Fatalf("target %v", d.Target)
			}
			if d = n.settle(); d.Condition.Reason != tc.settled {
				t.Fatalf("settled %s (%s), want %s", d.Condition.Reason, d.Condition.Message, tc.settled)
			}
			// The limits are evidence on the first pass only: later passes
			// have what was applied.
			d = n.step(func(in *Input) { in.Enforced = KubepodsLimits(machine(16, 64*Gi).Capacity, r) })
			if len(d.Actions) > 0 {
				t.Fatalf("enforced limits acted on after the first pass: %v", kinds(d.Actions))
			}
		})
	}
}

// The NoSchedule taint is set with a loss's clamp and lifted once the
// kubelet has adopted the target, and only then.
func TestTaintWhileStale(t *testing.T) {
	taintOf := func(t *testing.T, d Decision) bool {
		t.Helper()
		p, ok := find[PatchNodeStatus](d.Actions)
		if !ok {
			t.Fatalf("no status patch in %v", kinds(d.Actions))
		}
		return p.Taint
	}
	stale := Kubelet{Known: true, Ready: true, RestartBlocked: "restarts are turned off",
		Capacity: resources.List{"cpu": 8000, "memory": 16 * Gi}}
	start := func(t *testing.T, k Kubelet, taint bool) *node {
		n := newNode(t, machine(8, 16*Gi), types.Configured{})
		n.in.Kubelet = k
		n.in.Policy.TaintWhileStale = taint
		n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
		return n
	}

	t.Run("lifted when the kubelet agrees", func(t *testing.T) {
		n := start(t, stale, true)
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 4000) })
		n.expect(d, types.ReasonInProgress, KindClampCgroups, KindPatchNodeStatus, KindEmitEvent, KindEvict)
		if !taintOf(t, d) || !d.Next.Tainted {
			t.Fatal("the clamp's patch does not carry the taint")
		}
		d = n.settle()
		if !d.Next.Tainted {
			t.Fatal("taint lifted while the kubelet still has its old view")
		}
		// Hours later, the kubelet still has not adopted it: still tainted.
		d = n.step(func(in *Input) { in.Now = in.Now.Add(minutes(600)) })
		if !d.Next.Tainted || len(d.Actions) > 0 {
			t.Fatalf("tainted %v, actions %v", d.Next.Tainted, kinds(d.Actions))
		}
		// The kubelet restarts (someone else did it) but is not Ready yet.
		d = n.step(func(in *Input) {
			in.Kubelet.Capacity = resources.List{"cpu": 4000, "memory": 16 * Gi}
			in.Kubelet.Ready = false
		})
		if !d.Next.Tainted {
			t.Fatal("taint lifted before the kubelet is Ready")
		}
		d = n.step(func(in *Input) { in.Kubelet.Ready = true })
		n.expect(d, types.ReasonAccepted, KindPatchNodeStatus)
		if taintOf(t, d) || d.Next.Tainted {
			t.Fatal("taint kept once the kubelet agrees")
		}
	})
	t.Run("turned off", func(t *testing.T) {
		n := start(t, stale, false)
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 4000) })
		if d.Next.Tainted || !d.Next.Checking || hasKind(d.Actions, KindPatchNodeStatus) {
			t.Fatalf("tainted %v, checking %v, actions %v: want the status once the pods are looked at, untainted",
				d.Next.Tainted, d.Next.Checking, kinds(d.Actions))
		}
		if d = n.settle(); taintOf(t, d) || d.Next.Tainted {
			t.Fatal("tainted with TaintWhileStale off")
		}
	})
	t.Run("growth does not taint", func(t *testing.T) {
		n := start(t, stale, true)
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 10000) })
		if taintOf(t, d) || d.Next.Tainted {
			t.Fatal("tainted on growth")
		}
	})
	t.Run("kubelet unknown: kept until it is seen with the target", func(t *testing.T) {
		n := start(t, Kubelet{}, true)
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 8*Gi) })
		if !d.Next.Tainted {
			t.Fatal("not tainted on a loss")
		}
		if d = n.settle(); !d.Next.Tainted {
			t.Fatal("taint lifted with nothing known of the kubelet")
		}
		// Its unit is known, its view of memory (what was lost) is not yet.
		d = n.step(func(in *Input) { in.Kubelet = Kubelet{Known: true, Ready: true, Capacity: resources.List{"cpu": 8000}} })
		if !d.Next.Tainted {
			t.Fatal("taint lifted without the kubelet's view of memory")
		}
		d = n.step(func(in *Input) { in.Kubelet.Capacity = resources.List{"cpu": 8000, "memory": 8 * Gi} })
		if d.Next.Tainted || taintOf(t, d) {
			t.Fatal("taint kept once the kubelet is seen with the target")
		}
	})
	t.Run("only what was lost must be seen", func(t *testing.T) {
		k := stale
		k.Capacity = resources.List{"cpu": 8000} // memory never learnt
		n := start(t, k, true)
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 4000) })
		if !d.Next.Tainted || !reflect.DeepEqual(d.Next.TaintFor, []string{"cpu"}) {
			t.Fatalf("tainted %v for %v, want for cpu", d.Next.Tainted, d.Next.TaintFor)
		}
		if d = n.settle(); !d.Next.Tainted {
			t.Fatal("taint lifted while the kubelet sees 8 CPUs")
		}
		d = n.step(func(in *Input) { in.Kubelet.Capacity = resources.List{"cpu": 4000} })
		if d.Next.Tainted || d.Next.TaintFor != nil {
			t.Fatalf("taint kept (for %v) once the kubelet sees the CPUs that are left", d.Next.TaintFor)
		}
	})
	t.Run("target below the hardware: no restart can help, lifted after the shrink", func(t *testing.T) {
		n := newNode(t, machine(8, 16*Gi), spec("memory", "12Gi"))
		n.in.Kubelet = stale
		n.in.Policy.TaintWhileStale = true
		n.step(nil)
		n.settle()
		d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 4000) })
		if !d.Next.Tainted {
			t.Fatal("not tainted on a loss")
		}
		if d = n.settle(); d.Next.Tainted {
			t.Fatal("taint kept for a target no kubelet restart can reach")
		}
	})
	t.Run("at start, the machine shrank", func(t *testing.T) {
		n := newNode(t, machine(4, 16*Gi), types.Configured{})
		n.in.Policy.TaintWhileStale = true
		n.in.Kubelet = stale
		n.in.Enforced = KubepodsLimits(machine(8, 16*Gi).Capacity, testReservations())
		d := n.step(nil)
		n.expect(d, types.ReasonInProgress, KindClampCgroups, KindPatchNodeStatus, KindEmitEvent, KindEvict)
		if !taintOf(t, d) {
			t.Fatal("the first pass's clamp does not taint")
		}
	})
}
