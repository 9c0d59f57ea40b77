package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

const block = 128 * Mi

// withRelease asks for a planned release with the configured capacity.
func withRelease(c types.Configured) types.Configured {
	c.Release = true
	return c
}

// releaseNode is a 4-CPU, 9 GiB node that allows release, with a known,
// Ready kubelet that a restart is allowed for.
func releaseNode(t *testing.T) *node {
	n := newNode(t, machine(4, 9*Gi), types.Configured{})
	n.in.Release = ReleaseInput{Allowed: true, BlockSize: block}
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 4000, "memory": 9 * Gi}}
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	return n
}

// The planned release from end to end: evictions first, then the surplus
// offline (its own uevents are no loss), the kubelet restarted onto the
// smaller machine, Accepted once it publishes it, and nothing more while
// nothing changes.
func TestReleaseInOrder(t *testing.T) {
	n := releaseNode(t)
	d := n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2", "memory", "8Gi")) })
	n.expect(d, types.ReasonInProgress, KindEvict)
	d = n.evicting()
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindClampCgroups, KindEvict)
	gen := d.Next.Generation

	// Evictions done: the release goes out after the status that says so.
	d = n.step(func(in *Input) { in.Eviction = types.EvictionReport{Generation: gen, Done: true} })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRelease)
	rel := d.Actions[1].(Release)
	if rel.Capacity[resources.CPU] != 2000 || rel.Capacity[resources.Memory] != 8*Gi || rel.Generation != d.Next.ReleaseGeneration || rel.Spec != d.Next.ReleaseSpec {
		t.Fatalf("release %+v (state %+v)", rel, d.Next)
	}
	if !strings.Contains(d.Condition.Message, "releasing the CPUs and memory above it") || !strings.HasSuffix(rel.Spec, types.ReleaseSuffix) {
		t.Fatalf("message %q, spec %q", d.Condition.Message, rel.Spec)
	}
	rgen := rel.Generation

	// The release's own offlines, one by one: no clamp, no Warning, no
	// eviction, no new generation.
	for _, m := range []Physical{machine(3, 9*Gi), machine(2, 9*Gi), machine(2, 9*Gi-block), machine(2, 9*Gi-4*block), machine(2, 8*Gi)} {
		d = n.step(func(in *Input) { in.Physical = m })
		n.expect(d, types.ReasonInProgress)
		if d.Next.Generation != gen || d.Next.Evicting {
			t.Fatalf("the release's offline made a change: %+v", d.Next)
		}
	}

	// Done: a CapacityReleased event, then the kubelet restart once the
	// change has settled.
	d = n.step(func(in *Input) {
		in.Release.Report = types.ReleaseReport{Generation: rgen, Done: true}
		in.Release.Held, in.Release.Summary = true, "cpus 2-3; PNP0C80:00 [0x240000000-0x280000000) 1Gi, 8/8 blocks offline, safe to unplug"
	})
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindEmitEvent)
	if e := d.Actions[1].(EmitEvent); e.Reason != types.EventCapacityReleased || e.Type != types.EventNormal || !strings.Contains(e.Message, "safe to unplug") {
		t.Fatalf("event %+v", e)
	}
	d = n.step(func(in *Input) { in.Now = in.Now.Add(DefaultSettleDelay) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	if r := d.Actions[1].(RestartKubelet); r.Capacity[resources.CPU] != 2000 || r.Capacity[resources.Memory] != 8*Gi {
		t.Fatalf("restart %+v", r)
	}
	d = n.step(func(in *Input) {
		in.Now = in.Now.Add(20 * time.Second)
		in.Kubelet.Capacity = resources.List{"cpu": 2000, "memory": 8 * Gi}
	})
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	if !strings.Contains(d.Condition.Message, "released: cpus 2-3") {
		t.Fatalf("message %q", d.Condition.Message)
	}
	// Quiet from here on.
	d = n.step(func(in *Input) { in.Now = in.Now.Add(time.Hour) })
	n.expect(d, types.ReasonAccepted)
}

// Memory is released in whole blocks: the target is the configured value
// rounded down to the physical memory less a whole number of blocks, and
// it does not move while the blocks go; after the release the hardware is
// the target.
func TestReleaseRoundsMemoryToBlocks(t *testing.T) {
	n := releaseNode(t)
	// 9216Mi - 8000Mi = 1216Mi: 10 blocks (1280Mi), ending at 7936Mi.
	d := n.step(func(in *Input) { in.Configured = withRelease(spec("memory", "8000Mi")) })
	n.expect(d, types.ReasonInProgress, KindEvict)
	if got := d.Target[resources.Memory]; got != 7936*Mi {
		t.Fatalf("target memory %dMi, want 7936Mi", got/Mi)
	}
	n.settle()
	for k := int64(1); k <= 10; k++ {
		d = n.step(func(in *Input) { in.Physical = machine(4, 9*Gi-k*block) })
		if got := d.Target[resources.Memory]; got != 7936*Mi {
			t.Fatalf("after %d blocks: target memory %dMi, want 7936Mi", k, got/Mi)
		}
		if hasKind(d.Actions, KindClampCgroups) || hasKind(d.Actions, KindEvict) {
			t.Fatalf("after %d blocks: %v", k, kinds(d.Actions))
		}
	}
	if d.Condition.Reason == types.ReasonInfeasible || d.Condition.Reason == types.ReasonEmergencyReduced {
		t.Fatalf("condition %s: %s", d.Condition.Reason, d.Condition.Message)
	}
	// A fractional CPU count rounds down.
	n2 := releaseNode(t)
	d = n2.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2500m")) })
	if got := d.Target[resources.CPU]; got != 2000 {
		t.Fatalf("target cpu %d, want 2000", got)
	}
}

// A real loss during a release is still a loss: below the target, Path B.
func TestReleaseLossBelowTargetIsALoss(t *testing.T) {
	n := releaseNode(t)
	n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2")) })
	n.settle()
	if !n.in.Previous.Releasing {
		t.Fatalf("no release in flight: %+v", n.in.Previous)
	}
	d := n.step(func(in *Input) { in.Physical = machine(1, 9*Gi) })
	if !hasKind(d.Actions, KindClampCgroups) {
		t.Fatalf("a loss below the target during a release: %v", kinds(d.Actions))
	}
	if e, ok := find[EmitEvent](d.Actions); !ok || e.Reason != types.EventEmergencyCapacityReduced {
		t.Fatalf("event %+v", e)
	}
}

// Without the node's consent, or without the request's, Path A2 is as
// without release: no Release action, and a request that asks for it on
// a node that does not allow it is told so.
func TestReleaseNeedsBothConsents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
		asks    bool
		note    bool
	}{
		{"node allows, request does not ask", true, false, false},
		{"request asks, node does not allow", false, true, true},
		{"neither", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := releaseNode(t)
			n.in.Release.Allowed = tc.allowed
			c := spec("cpu", "2")
			c.Release = tc.asks
			n.step(func(in *Input) { in.Configured = c })
			d := n.settle()
			for i := 0; i < 3; i++ {
				if hasKind(d.Actions, KindRelease) {
					t.Fatalf("released: %v", kinds(d.Actions))
				}
				d = n.step(func(in *Input) { in.Now = in.Now.Add(time.Minute) })
			}
			if d.Condition.Reason != types.ReasonAccepted {
				t.Fatalf("condition %s: %s", d.Condition.Reason, d.Condition.Message)
			}
			if got := strings.Contains(d.Condition.Message, "does not allow it"); got != tc.note {
				t.Fatalf("message %q, note %v", d.Condition.Message, tc.note)
			}
		})
	}
}

// A release that falls short: Accepted at the target, the condition says
// what was not released, no kubelet restart (the machine is not the
// target), and no retry until the request or the hardware changes.
func TestReleaseShort(t *testing.T) {
	n := releaseNode(t)
	n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2", "memory", "8Gi")) })
	n.settle()
	rgen := n.in.Previous.ReleaseGeneration
	d := n.step(func(in *Input) {
		in.Physical = machine(2, 9*Gi-3*block)
		in.Release.Report = types.ReleaseReport{Generation: rgen, Done: true, Short: "memory: 5 blocks more needed; blocks 40-44 would not go offline within 30s"}
		in.Release.Held, in.Release.Summary = true, "cpus 2-3; blocks 72-74"
	})
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent, KindEmitEvent)
	if e := d.Actions[2].(EmitEvent); e.Reason != types.EventCapacityReleased || !strings.Contains(e.Message, "not released: memory") {
		t.Fatalf("event %+v", e)
	}
	if !strings.Contains(d.Condition.Message, "release incomplete: memory: 5 blocks more needed") || !strings.Contains(d.Condition.Message, "not restarted") {
		t.Fatalf("message %q", d.Condition.Message)
	}
	d = n.step(func(in *Input) { in.Now = in.Now.Add(time.Hour) })
	n.expect(d, types.ReasonAccepted)
	// The hardware changes (a block the hypervisor removed): tried again.
	d = n.step(func(in *Input) { in.Physical = machine(2, 9*Gi-4*block) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRelease)
}

// Give back: the request removed brings back what was released, once,
// and the kubelet is restarted onto the machine that comes back.
func TestReleaseGiveBack(t *testing.T) {
	n := releaseNode(t)
	n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2")) })
	n.settle()
	rgen := n.in.Previous.ReleaseGeneration
	n.step(func(in *Input) {
		in.Physical = machine(2, 9*Gi)
		in.Release.Report = types.ReleaseReport{Generation: rgen, Done: true}
		in.Release.Held, in.Release.Summary = true, "cpus 2-3"
	})
	n.step(func(in *Input) { in.Now = in.Now.Add(DefaultSettleDelay) })
	n.step(func(in *Input) { in.Kubelet.Capacity = resources.List{"cpu": 2000, "memory": 9 * Gi} })

	// The request removed: the node follows its (smaller) hardware and
	// gives back what was released.
	d := n.step(func(in *Input) { in.Configured = types.Configured{} })
	if !hasKind(d.Actions, KindGiveBack) || hasKind(d.Actions, KindRelease) {
		t.Fatalf("actions %v", kinds(d.Actions))
	}
	back := n.in.Previous.ReleaseGeneration
	d = n.step(func(in *Input) {
		in.Now = in.Now.Add(2 * DefaultRestartInterval)
		in.Physical = machine(4, 9*Gi)
		in.Release.Report = types.ReleaseReport{Generation: back, GiveBack: true, Done: true}
		in.Release.Held, in.Release.Summary = false, ""
	})
	n.expect(d, types.ReasonInProgress, KindGrowCgroups, KindPatchNodeStatus)
	d = n.step(func(in *Input) { in.Now = in.Now.Add(DefaultSettleDelay) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
}

// A raised request on a released node gives back first: the hardware that
// comes back is then judged as any.
func TestReleaseRaisedGivesBack(t *testing.T) {
	n := releaseNode(t)
	n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2")) })
	n.settle()
	rgen := n.in.Previous.ReleaseGeneration
	n.step(func(in *Input) {
		in.Physical = machine(2, 9*Gi)
		in.Release.Report = types.ReleaseReport{Generation: rgen, Done: true}
		in.Release.Held = true
	})
	d := n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "3")) })
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent, KindGiveBack)
	if !strings.Contains(d.Condition.Message, "giving back") {
		t.Fatalf("message %q", d.Condition.Message)
	}
}

// A daemon that resumed from its state asks again for the release in
// flight (the releaser picks up where it stopped).
func TestReleaseResumed(t *testing.T) {
	n := releaseNode(t)
	n.step(func(in *Input) { in.Configured = withRelease(spec("cpu", "2")) })
	n.settle()
	st := n.in.Previous
	in := n.in
	in.Previous, in.Release.Resumed = st, true
	d := Decide(in)
	r, ok := find[Release](d.Actions)
	if !ok || r.Generation != st.ReleaseGeneration {
		t.Fatalf("resumed: actions %v", kinds(d.Actions))
	}
}
