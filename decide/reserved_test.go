package decide

import (
	"github.com/node-resized/node-resized/types"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// online returns the machine with the given CPUs online.
func onlineMachine(mem int64, ids ...int) Physical {
	p := machine(int64(len(ids)), mem)
	p.OnlineCPUs = ids
	return p
}

func TestReservedCPUs(t *testing.T) {
	staleKubelet := Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 4000, "memory": 16 * Gi}}
	for _, tc := range []struct {
		name     string
		reserved []int
		after    Physical     // the machine after the loss
		reason   types.Reason // once settled and past the settle delay
		restart  bool
		message  string
	}{
		{name: "a reserved CPU goes: EmergencyReduced, named, no restart", reserved: []int{0, 3},
			after: onlineMachine(16*Gi, 0, 1, 2), reason: types.ReasonEmergencyReduced, message: "reserved CPU 3 (the kubelet's reservedSystemCPUs) offline"},
		{name: "two go", reserved: []int{2, 3},
			after: onlineMachine(16*Gi, 0, 1), reason: types.ReasonEmergencyReduced, message: "reserved CPUs 2-3"},
		{name: "another CPU goes: the kubelet is restarted", reserved: []int{0, 3},
			after: onlineMachine(16*Gi, 0, 1, 3), reason: types.ReasonInProgress, restart: true},
		{name: "online CPUs unknown: nothing to say", reserved: []int{0, 3},
			after: machine(3, 16*Gi), reason: types.ReasonInProgress, restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, onlineMachine(16*Gi, 0, 1, 2, 3), types.Configured{})
			n.in.ReservedCPUs = tc.reserved
			n.in.Kubelet = staleKubelet
			n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
			d := n.step(func(in *Input) { in.Physical = tc.after })
			n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
			if e, _ := find[EmitEvent](d.Actions); !strings.Contains(e.Message, tc.message) {
				t.Errorf("event %q, want it to name %q", e.Message, tc.message)
			}
			n.settle()
			d = n.step(func(in *Input) { in.Now = t0.Add(time.Hour) })
			if d.Condition.Reason != tc.reason || hasKind(d.Actions, KindRestartKubelet) != tc.restart {
				t.Fatalf("%s (%s), actions %v; want %s, restart %v", d.Condition.Reason, d.Condition.Message, kinds(d.Actions), tc.reason, tc.restart)
			}
			if !strings.Contains(d.Condition.Message, tc.message) {
				t.Fatalf("message %q, want it to contain %q", d.Condition.Message, tc.message)
			}
			if tc.restart {
				return
			}
			// The CPU comes back: the condition clears and the kubelet,
			// which never saw the loss, agrees again.
			d = n.step(func(in *Input) { in.Physical = onlineMachine(16*Gi, 0, 1, 2, 3); in.Now = t0.Add(2 * time.Hour) })
			n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
		})
	}
}

func TestReservedTaken(t *testing.T) {
	for _, tc := range []struct {
		reserved []int
		milli    int64
		want     []int
	}{
		{nil, 1000, nil},
		{[]int{0}, 1000, nil},
		{[]int{0}, 500, []int{0}},
		{[]int{3, 0, 3}, 1000, []int{3}},
		{[]int{0, 1, 2, 3}, 2500, []int{2, 3}},
		{[]int{0, 1}, 2000, nil},
	} {
		if got := reservedTaken(tc.reserved, tc.milli); !slices.Equal(got, tc.want) {
			t.Errorf("reservedTaken(%v, %dm) = %v, want %v", tc.reserved, tc.milli, got, tc.want)
		}
	}
}

func TestConfiguredCPUsBelowTheReservedCPUs(t *testing.T) {
	n := newNode(t, onlineMachine(16*Gi, 0, 1, 2, 3), spec("cpu", "1"))
	n.in.ReservedCPUs = []int{0, 3}
	d := n.step(nil)
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	if !strings.Contains(d.Condition.Message, "cpu 1 would take away reserved CPU 3: the kubelet's reservedSystemCPUs 0,3 are 2 CPUs") ||
		!strings.Contains(d.Condition.Message, "configure cpu 2 or more") {
		t.Fatalf("message %q, want the reserved CPU taken away named", d.Condition.Message)
	}
	// A fraction keeps whole CPUs only: 1500m takes CPU 3 away too.
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "1500m") })
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	if !strings.Contains(d.Condition.Message, "would take away reserved CPU 3:") {
		t.Fatalf("message %q, want CPU 3 named", d.Condition.Message)
	}
	// Two CPUs keep them: accepted (planned down, Path A2).
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "2") })
	n.expect(d, types.ReasonInProgress, KindEvict)
	n.expect(n.settle(), types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
}
