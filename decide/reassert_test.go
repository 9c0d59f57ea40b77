package decide

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// clampedTo1CPU is the input of a node whose 4 CPUs went down to 1 and
// whose clamp is settled: Previous records it, as a state file would.
func clampedTo1CPU(t *testing.T) Input {
	t.Helper()
	n := newNode(t, machine(4, 16*Gi), types.Configured{})
	n.step(nil)
	n.step(func(in *Input) { in.Physical = machine(1, 16*Gi); in.Now = t0.Add(time.Minute) })
	n.settle()
	in := n.in
	in.Now = t0.Add(time.Hour)
	return in
}

func TestReassertAfterStart(t *testing.T) {
	base := clampedTo1CPU(t)
	want := KubepodsLimits(withPID(base.Previous.Applied, base.Physical.Capacity[resources.PID]), base.Reservations)
	for4 := KubepodsLimits(machine(4, 16*Gi).Capacity, base.Reservations)
	page := int64(4096)
	failed := func(in *Input, failures int, ago time.Duration) {
		in.Previous.LimitsFailed, in.Previous.LimitsFailures = "set memory.max: device busy", failures
		in.Previous.LimitsFailedAt = in.Now.Add(-ago)
	}
	for _, tc := range []struct {
		name    string
		mut     func(in *Input)
		actions []ActionKind
		differ  []string // of the ReassertCgroups
		reason  string   // in its Reason
		requeue time.Duration
	}{
		{name: "cpu.weight rewritten while down", mut: func(in *Input) {
			in.Reassert, in.Enforced = true, CgroupLimits{MemoryMax: want.MemoryMax, CPUWeight: for4.CPUWeight}
		}, actions: []ActionKind{KindReassertCgroups}, differ: []string{"cpu.weight"}, reason: "started"},
		{name: "memory.max raised while down", mut: func(in *Input) {
			in.Reassert, in.Enforced = true, CgroupLimits{MemoryMax: want.MemoryMax + 1<<30, CPUWeight: want.CPUWeight}
		}, actions: []ActionKind{KindReassertCgroups}, differ: []string{"memory.max"}},
		{name: "memory.max lowered while down", mut: func(in *Input) {
			in.Reassert, in.Enforced = true, CgroupLimits{MemoryMax: want.MemoryMax - 1<<20, CPUWeight: want.CPUWeight}
		}, actions: []ActionKind{KindReassertCgroups}, differ: []string{"memory.max"}},
		{name: "both rewritten", mut: func(in *Input) {
			in.Reassert, in.Enforced = true, CgroupLimits{MemoryMax: want.MemoryMax + 1<<30, CPUWeight: for4.CPUWeight}
		}, actions: []ActionKind{KindReassertCgroups}, differ: []string{"memory.max", "cpu.weight"}},
		{name: "holding, memory.max rounded down to a page", mut: func(in *Input) {
			in.Reassert, in.Enforced = true, CgroupLimits{MemoryMax: want.MemoryMax / page * page, CPUWeight: want.CPUWeight}
		}, actions: []ActionKind{KindReassertCgroups}},
		{name: "unknown limits (kubepods not there yet)", mut: func(in *Input) {
			in.Reassert = true
		}, actions: []ActionKind{KindReassertCgroups}},
		{name: "not asked for", mut: func(in *Input) {
			in.Enforced = for4
		}},
		{name: "the machine shrank again while down: the clamp writes", mut: func(in *Input) {
			in.Reassert, in.Enforced, in.Physical = true, for4, machine(1, 8*Gi)
		}, actions: []ActionKind{KindClampCgroups, KindEmitEvent, KindEvict}},
		{name: "the machine grew back while down: the grow writes", mut: func(in *Input) {
			in.Reassert, in.Enforced, in.Physical = true, for4, machine(4, 16*Gi)
		}, actions: []ActionKind{KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent}},
		{name: "failed write, retry not due", mut: func(in *Input) {
			failed(in, 3, time.Second)
		}, requeue: 3 * time.Second},
		{name: "failed write, retry due", mut: func(in *Input) {
			failed(in, 3, 4*time.Second)
		}, actions: []ActionKind{KindReassertCgroups}, reason: "retry 3: set memory.max: device busy"},
		{name: "failed write before the restart", mut: func(in *Input) {
			failed(in, 1, 0)
			in.Reassert = true
		}, actions: []ActionKind{KindReassertCgroups}, reason: "the last write failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.Previous = base.Previous.clone()
			tc.mut(&in)
			d := Decide(in)
			checkInvariants(t, in, d)
			if got := kinds(d.Actions); !reflect.DeepEqual(got, append([]ActionKind{}, tc.actions...)) {
				t.Fatalf("actions %v, want %v", got, tc.actions)
			}
			if d.RequeueAfter != tc.requeue {
				t.Errorf("requeue after %v, want %v", d.RequeueAfter, tc.requeue)
			}
			re, ok := find[ReassertCgroups](d.Actions)
			if !ok {
				return
			}
			if !reflect.DeepEqual(re.Limits, want) || !re.Capacity.Equal(base.Previous.Applied) || re.Generation != base.Previous.Generation {
				t.Errorf("reassert %+v, want the limits %+v of the applied %v, generation %d", re, want, base.Previous.Applied, base.Previous.Generation)
			}
			var differ []string
			for _, s := range re.Differ {
				differ = append(differ, strings.Fields(s)[0])
			}
			if !slices.Equal(differ, tc.differ) {
				t.Errorf("differ %q, want %v", re.Differ, tc.differ)
			}
			if !strings.Contains(re.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", re.Reason, tc.reason)
			}
			if !statesEqual(d.Next, in.Previous) {
				t.Errorf("the reassert changed the state:\n%+v\n%+v", in.Previous, d.Next)
			}
		})
	}
}

// A daemon with no state to resume from converges instead: nothing is
// applied to re-assert.
func TestReassertNeedsAState(t *testing.T) {
	in := Input{Physical: machine(4, 16*Gi), Reservations: testReservations(), Now: t0, Reassert: true}
	d := Decide(in)
	if _, ok := find[ReassertCgroups](d.Actions); ok {
		t.Fatalf("actions %v: a reassert with nothing applied", kinds(d.Actions))
	}
}

// An Infeasible spec holds what is applied, and the limits of what is held
// are re-asserted too.
func TestReassertWhileInfeasible(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), spec("cpu", "8"))
	n.step(nil)
	in := n.in
	in.Reassert = true
	d := Decide(in)
	checkInvariants(t, in, d)
	if d.Condition.Reason != types.ReasonInfeasible || !slices.Equal(kinds(d.Actions), []ActionKind{KindReassertCgroups}) {
		t.Fatalf("%s, actions %v; want Infeasible with a reassert only", d.Condition.Reason, kinds(d.Actions))
	}
}

func TestLimitsRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {1000, time.Minute}} {
		if got := LimitsRetryAfter(tc.failures); got != tc.want {
			t.Errorf("LimitsRetryAfter(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestLimitsWritten(t *testing.T) {
	s := State{Version: StateVersion, Applied: resources.List{resources.CPU: 1000}}
	s = s.LimitsWritten(errors.New("EBUSY"), t0)
	s = s.LimitsWritten(errors.New("EBUSY again"), t0.Add(time.Second))
	if s.LimitsFailed != "EBUSY again" || s.LimitsFailures != 2 || !s.LimitsFailedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("after two failures: %q, %d, %v", s.LimitsFailed, s.LimitsFailures, s.LimitsFailedAt)
	}
	if s = s.LimitsWritten(nil, t0.Add(2*time.Second)); s.LimitsFailed != "" || s.LimitsFailures != 0 || !s.LimitsFailedAt.IsZero() {
		t.Fatalf("after a write that landed: %q, %d, %v", s.LimitsFailed, s.LimitsFailures, s.LimitsFailedAt)
	}
	if err := (State{Version: StateVersion, LimitsFailures: -1}).Validate(t0); err == nil {
		t.Error("negative limitsFailures accepted")
	}
	if err := (State{Version: StateVersion, LimitsFailedAt: t0.Add(time.Hour)}).Validate(t0); err == nil {
		t.Error("limitsFailedAt in the future accepted")
	}
}
