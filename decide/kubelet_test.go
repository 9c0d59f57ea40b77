package decide

import (
	"github.com/node-resized/node-resized/types"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// restarted brings a node to the pass that restarts its kubelet: 4 CPUs
// grow to 8, the kubelet still sees 4, the change settles. It returns the
// node and the time of the restart.
func restarted(t *testing.T) (*node, time.Time) {
	t.Helper()
	n := newNode(t, machine(4, 16*Gi), types.Configured{})
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 4000, "memory": 16 * Gi}}
	n.step(nil)
	n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 8000) })
	at := t0.Add(DefaultSettleDelay)
	d := n.step(func(in *Input) { in.Now = at })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	return n, at
}

// TestKubeletRestartOutcomes: how an outstanding restart ends, and that a
// failed one is reported once and not tried again until the target
// changes.
func TestKubeletRestartOutcomes(t *testing.T) {
	type step struct {
		after   time.Duration // since the restart
		mut     func(in *Input, at time.Time)
		reason  types.Reason
		actions []ActionKind
		message string // a part of the condition's message
	}
	back := func(in *Input, _ time.Time) {
		in.Kubelet.Capacity = resources.List{"cpu": 8000, "memory": 16 * Gi}
		in.Kubelet.Ready = true
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "back Ready with the target",
		steps: []step{
			{after: 5 * time.Second, mut: func(in *Input, _ time.Time) { in.Kubelet.Ready = false }, reason: types.ReasonInProgress},
			{after: 20 * time.Second, mut: back, reason: types.ReasonAccepted, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}},
		},
	}, {
		name: "job failed: one event, no second restart",
		steps: []step{
			{after: 2 * time.Second, mut: func(in *Input, at time.Time) {
				in.Kubelet.Ready = false
				in.Kubelet.Report = types.RestartReport{At: at, Failed: "systemd job result failed"}
			}, reason: types.ReasonInProgress, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, message: "the kubelet restart failed: systemd job result failed"},
			{after: time.Hour, reason: types.ReasonInProgress, message: "does not restart it again"},
			// A new change lifts the hold: the next restart waits for the
			// change to settle.
			{after: time.Hour + time.Second, mut: func(in *Input, _ time.Time) { in.Physical = in.Physical.with(resources.CPU, 10000) },
				reason: types.ReasonInProgress, actions: []ActionKind{KindGrowCgroups, KindPatchNodeStatus}, message: "waiting before restarting"},
			{after: time.Hour + time.Second + DefaultSettleDelay, reason: types.ReasonInProgress, actions: []ActionKind{KindPatchNodeStatus, KindRestartKubelet}},
		},
	}, {
		name: "a report about another restart is ignored",
		steps: []step{
			{after: 2 * time.Second, mut: func(in *Input, at time.Time) {
				in.Kubelet.Report = types.RestartReport{At: at.Add(-time.Hour), Failed: "old"}
			}, reason: types.ReasonInProgress},
			{after: 10 * time.Second, mut: back, reason: types.ReasonAccepted, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}},
		},
	}, {
		name: "back with the target but never Ready",
		steps: []step{
			{after: 10 * time.Second, mut: func(in *Input, _ time.Time) {
				back(in, time.Time{})
				in.Kubelet.Ready = false
			}, reason: types.ReasonInProgress},
			{after: DefaultRestartTimeout, reason: types.ReasonInProgress, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, message: "did not come back Ready within"},
			{after: 3 * DefaultRestartTimeout, reason: types.ReasonInProgress},
			// Ready at last: Accepted.
			{after: 4 * DefaultRestartTimeout, mut: func(in *Input, _ time.Time) { in.Kubelet.Ready = true },
				reason: types.ReasonAccepted, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}},
		},
	}, {
		name: "restarts turned off after the restart: the failure still holds",
		steps: []step{
			{after: DefaultRestartTimeout, mut: func(in *Input, _ time.Time) {
				in.Kubelet.RestartAllowed, in.Kubelet.RestartBlocked = false, "turned off (--kubelet-restart=never)"
			}, reason: types.ReasonInProgress, actions: []ActionKind{KindPatchNodeStatus, KindEmitEvent}, message: "did not come back with the target"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n, at := restarted(t)
			for i, s := range tc.steps {
				d := n.step(func(in *Input) {
					in.Now = at.Add(s.after)
					if s.mut != nil {
						s.mut(in, at)
					}
				})
				if d.Condition.Reason != s.reason || !equalKinds(kinds(d.Actions), s.actions) || !strings.Contains(d.Condition.Message, s.message) {
					t.Fatalf("step %d: %s %v (%s), want %s %v with %q", i, d.Condition.Reason, kinds(d.Actions), d.Condition.Message, s.reason, s.actions, s.message)
				}
				if e, ok := find[EmitEvent](d.Actions); ok && d.Condition.Reason == types.ReasonInProgress &&
					(e.Reason != types.EventKubeletRestartFailed || e.Type != types.EventWarning || !strings.Contains(e.Message, "systemctl restart kubelet")) {
					t.Fatalf("step %d: event %+v", i, e)
				}
			}
		})
	}
}

// TestKubeletNotRestarted: what keeps Decide from asking for a restart.
func TestKubeletNotRestarted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kubelet Kubelet
		spec    types.Configured
		message string
		// considered: the verdict (RestartAllowed, RestartBlocked) is
		// what keeps the kubelet as it is.
		considered bool
	}{
		{"restarts turned off", Kubelet{Known: true, Ready: true, RestartBlocked: "turned off (--kubelet-restart=never)"}, types.Configured{},
			"needs a restart to adopt the target, which is not done: turned off (--kubelet-restart=never)", true},
		{"checkpoint cannot be made safe", Kubelet{Known: true, Ready: true, RestartBlocked: "reserved CPUs 0 are not all online", RestartRefused: true}, types.Configured{},
			"reserved CPUs 0 are not all online", true},
		{"checkpoint in an unknown layout", Kubelet{Known: true, Ready: true, RestartBlocked: "checkpoint in a layout node-resized does not know", RestartRefused: true}, types.Configured{},
			"checkpoint in a layout node-resized does not know", true},
		{"target below the hardware", Kubelet{Known: true, Ready: true, RestartAllowed: true}, spec("cpu", "6"),
			"target is below the physical capacity", false},
		{"nothing known of the kubelet", Kubelet{RestartAllowed: true}, types.Configured{}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, machine(4, 16*Gi), tc.spec)
			n.in.Kubelet = tc.kubelet
			n.in.Kubelet.Capacity = resources.List{"cpu": 4000, "memory": 16 * Gi}
			if !tc.kubelet.Known {
				n.in.Kubelet.Capacity = nil
			}
			n.step(nil)
			// A refusal that needs an operator is one Warning, when the
			// condition first says it; a passing block is none.
			var blocked []EmitEvent
			events := func(d Decision) {
				for _, a := range d.Actions {
					if e, ok := a.(EmitEvent); ok && e.Reason == types.EventKubeletRestartBlocked {
						if e.Type != types.EventWarning || !strings.Contains(e.Message, tc.message) {
							t.Fatalf("event %+v", e)
						}
						blocked = append(blocked, e)
					}
				}
			}
			events(n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 8000) }))
			defer func() {
				if want := map[bool]int{true: 1}[tc.kubelet.RestartRefused]; len(blocked) != want {
					t.Errorf("%d KubeletRestartBlocked events, want %d", len(blocked), want)
				}
			}()
			for _, after := range []time.Duration{DefaultSettleDelay, time.Hour} {
				d := n.step(func(in *Input) { in.Now = t0.Add(after) })
				events(d)
				if hasKind(d.Actions, KindRestartKubelet) || d.Condition.Reason != types.ReasonAccepted || !strings.Contains(d.Condition.Message, tc.message) {
					t.Fatalf("after %v: %s %v (%s), want Accepted without a restart, saying %q", after, d.Condition.Reason, kinds(d.Actions), d.Condition.Message, tc.message)
				}
				if d.RestartConsidered != tc.considered {
					t.Fatalf("after %v: RestartConsidered %v, want %v", after, d.RestartConsidered, tc.considered)
				}
			}
		})
	}
}

// TestKubeletNotRestartedWhileEvicting: a shrink's eviction pass runs to
// its end before the kubelet is restarted.
func TestKubeletNotRestartedWhileEvicting(t *testing.T) {
	n := newNode(t, machine(8, 16*Gi), types.Configured{})
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 8000, "memory": 16 * Gi}}
	n.step(nil)
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 6000) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	if d.RestartConsidered {
		t.Fatal("the clamp's pass considered the restart verdict: a loss would wait for the checkpoints to be read")
	}
	d = n.step(func(in *Input) { in.Now = t0.Add(time.Hour) })
	n.expect(d, types.ReasonInProgress)
	if d.RestartConsidered {
		t.Fatal("a pass with the shrink in flight considered the restart verdict")
	}
	d = n.step(func(in *Input) {
		in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Done: true}
	})
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	if !d.RestartConsidered {
		t.Fatal("the pass that restarts the kubelet says it did not consider the restart verdict")
	}
}

func equalKinds(got, want []ActionKind) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func hasKind(actions []Action, k ActionKind) bool {
	for _, a := range actions {
		if a.Kind() == k {
			return true
		}
	}
	return false
}

// A loss seen in two parts, the second under the jitter (a virtio-mem
// sub-block step read by the MemTotal watch halfway): the first is
// clamped, the second is no change, and the kubelet restarted afterwards
// reads the hardware as it is, 18Mi below what is held. Its own number is
// taken: the Node shows it and the kubepods limits are written for it,
// with no new generation, eviction, event or restart; the same input
// again decides nothing (the node's helper checks it), and a kubelet that
// goes away leaves its number in place. A reading the kubelet is not Ready
// with, or further than the jitter from the hardware, is not taken.
func TestKubeletReadingWithinTheJitter(t *testing.T) {
	const mem = 3436 * Mi
	n := newNode(t, machine(3, mem), types.Configured{})
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 3000, "memory": mem}}
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, mem-108*Mi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	n.settle()
	gen := n.in.Previous.Generation
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, mem-126*Mi) })
	if d.Target[resources.Memory] != mem-108*Mi || d.Next.Generation != gen {
		t.Fatalf("a drift of 18Mi: target %v, generation %d; want it held, no change", d.Target, d.Next.Generation)
	}
	// The restart, settled; the kubelet is down, then back with its
	// reading of the hardware as it is.
	d = n.step(func(in *Input) { in.Now = in.Now.Add(time.Minute) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	n.step(func(in *Input) { in.Now = in.Now.Add(5 * time.Second); in.Kubelet.Ready = false })

	// Back, not Ready yet, with the new reading: not taken.
	d = n.step(func(in *Input) {
		in.Now = in.Now.Add(5 * time.Second)
		in.Kubelet.Capacity = resources.List{"cpu": 3000, "memory": mem - 126*Mi}
	})
	if d.Target[resources.Memory] != mem-108*Mi {
		t.Fatalf("a kubelet that is not Ready: target %v", d.Target)
	}
	d = n.step(func(in *Input) { in.Now = in.Now.Add(5 * time.Second); in.Kubelet.Ready = true })
	n.expect(d, types.ReasonAccepted, KindReassertCgroups, KindPatchNodeStatus, KindEmitEvent)
	want := mem - 126*Mi
	re, _ := find[ReassertCgroups](d.Actions)
	p, _ := find[PatchNodeStatus](d.Actions)
	if d.Target[resources.Memory] != want || p.Capacity[resources.Memory] != want || d.Next.Generation != gen {
		t.Fatalf("target %v, patched %v, generation %d (was %d): want the kubelet's memory %d, no new generation", d.Target, p.Capacity, d.Next.Generation, gen, want)
	}
	if lim := KubepodsLimits(resources.List{"cpu": 3000, "memory": want, resources.PID: 4194304}, n.in.Reservations); re.Limits.MemoryMax != lim.MemoryMax ||
		!strings.Contains(re.Reason, "kubelet's own reading of memory") {
		t.Fatalf("reassert %+v, want memory.max %d and the reason", re, lim.MemoryMax)
	}
	// The kubelet goes away: its number stays.
	d = n.step(func(in *Input) { in.Kubelet = Kubelet{} })
	if len(d.Actions) != 0 || d.Target[resources.Memory] != want {
		t.Fatalf("the kubelet gone: actions %v, target %v", kinds(d.Actions), d.Target)
	}

	// A reading as far as the jitter from the hardware is the kubelet's
	// old view, not taken.
	far := newNode(t, machine(3, mem), types.Configured{})
	far.in.Kubelet = Kubelet{Known: true, Ready: true, Capacity: resources.List{"cpu": 3000, "memory": mem + DefaultJitterMemory}}
	d = far.step(nil)
	if d.Target[resources.Memory] != mem {
		t.Fatalf("a reading the jitter away: target %v", d.Target)
	}
}
