package decide

import (
	"encoding/json"
	"github.com/node-resized/node-resized/types"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// Path A1: orchestrated upscale. The spec is raised first and held
// Infeasible; the hardware arrives (in steps); the hold clears.
func TestPathA1OrchestratedUpscale(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), spec("cpu", "4"))
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	// 1. The controller raises the spec before the hardware is there.
	d := n.step(func(in *Input) { in.Configured = spec("cpu", "8") })
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	if d.Target[resources.CPU] != 4000 {
		t.Fatalf("held target cpu = %d, want 4000", d.Target[resources.CPU])
	}

	// 2. The hypervisor hot-adds CPUs one by one: still short, still held,
	// nothing actuated (the message follows the hardware).
	for _, cpus := range []int64{5, 6, 7} {
		d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, (cpus)*1000) })
		if d.Condition.Reason != types.ReasonInfeasible || actuates(d) || d.Target[resources.CPU] != 4000 {
			t.Fatalf("%d CPUs: %s %v target %v", cpus, d.Condition.Reason, kinds(d.Actions), d.Target)
		}
	}

	// 3–5. The last CPU arrives: the hold clears, kubepods grows first,
	// then the capacity is advertised and Accepted.
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, (8)*1000) })
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
	g := d.Actions[0].(GrowCgroups)
	if g.Capacity[resources.CPU] != 8000 || g.Limits.CPUShares != MilliCPUToShares(8000-100) {
		t.Fatalf("grow %+v", g)
	}
	if e := d.Actions[2].(EmitEvent); e.Type != types.EventNormal || e.Reason != types.EventCapacityAccepted {
		t.Fatalf("event %+v", e)
	}
	if d.Condition.Status != types.StatusTrue {
		t.Fatalf("status %s", d.Condition.Status)
	}
}

// Path A2: orchestrated downscale. The pods are looked at first; some
// have to go: status is lowered first, InProgress, then cgroups, then
// evictions (a PodDisruptionBudget holds them up for a while), then
// Accepted; the controller then unplugs the hardware, which changes nothing.
func TestPathA2OrchestratedDownscale(t *testing.T) {
	n := newNode(t, machine(8, 32*Gi), spec("cpu", "8", "memory", "32Gi"))
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	// Spec lowered: the evictor looks at the pods and evicts none yet;
	// nothing is published or clamped.
	d := n.step(func(in *Input) { in.Configured = spec("cpu", "4", "memory", "16Gi") })
	n.expect(d, types.ReasonInProgress, KindEvict)
	if hold := d.Actions[0].(Evict); !hold.Hold || hold.Generation != d.Next.Generation {
		t.Fatalf("evict %+v, want the pods looked at only", hold)
	}
	if !d.Next.Checking || !d.Next.ClampDue || d.Next.Condition.Reason != types.ReasonAccepted {
		t.Fatalf("state %+v, want the shrink checked, its clamp due, Accepted still published", d.Next)
	}

	// 1–4. Pods have to go: status first (scheduler blocked), kubepods
	// shrinks, evictions start; InProgress.
	d = n.evicting()
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindClampCgroups, KindEvict)
	patch := d.Actions[0].(PatchNodeStatus)
	if patch.Capacity[resources.CPU] != 4000 || patch.Capacity[resources.Memory] != 16*Gi {
		t.Fatalf("status patch %+v", patch)
	}
	wantAlloc := 16*Gi - 512*Mi - 256*Mi - 100*Mi
	if patch.Allocatable[resources.Memory] != wantAlloc {
		t.Fatalf("allocatable memory %d, want %d", patch.Allocatable[resources.Memory], wantAlloc)
	}
	clamp := d.Actions[1].(ClampCgroups)
	if clamp.Limits.MemoryMax != 16*Gi-768*Mi || clamp.Limits.PidsMax != 4194304 {
		t.Fatalf("clamp %+v", clamp.Limits)
	}
	ev := d.Actions[2].(Evict)
	if ev.Generation != d.Next.Generation || ev.Reason != "NodeCapacityExceeded" || ev.Allocatable[resources.Memory] != wantAlloc || ev.Hold {
		t.Fatalf("evict %+v", ev)
	}
	gen := ev.Generation

	// Eviction in progress, nothing new to say.
	d = n.step(func(in *Input) { in.Eviction = types.EvictionReport{Generation: gen, Blocked: ""} })
	n.expect(d, types.ReasonInProgress)

	// A PodDisruptionBudget blocks: still InProgress, and the message says so.
	d = n.step(func(in *Input) {
		in.Eviction = types.EvictionReport{Generation: gen, Blocked: "PodDisruptionBudget default/web allows 0 disruptions"}
	})
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus)
	if !strings.Contains(d.Condition.Message, "PodDisruptionBudget default/web") {
		t.Fatalf("message %q", d.Condition.Message)
	}
	// A stale report for another generation is ignored.
	d = n.step(func(in *Input) { in.Eviction = types.EvictionReport{Generation: gen - 1, Done: true} })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus)

	// 5. Evictions done: Accepted.
	d = n.step(func(in *Input) { in.Eviction = types.EvictionReport{Generation: gen, Done: true} })
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	// 6. The controller unplugs the hardware down to the target: no change.
	d = n.step(func(in *Input) { in.Physical = machine(4, 16*Gi) })
	n.expect(d, types.ReasonAccepted)
}

// Path A2 where every pod fits the lowered capacity: the evictor's first
// look says so, and the change is published once, Accepted, with its one
// event; no InProgress is written.
func TestPathA2NoPodToEvict(t *testing.T) {
	n := newNode(t, machine(8, 32*Gi), types.Configured{})
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	d := n.step(func(in *Input) { in.Configured = spec("cpu", "6") })
	n.expect(d, types.ReasonInProgress, KindEvict)

	// Other input while the pods are looked at: nothing to publish yet.
	d = n.step(func(in *Input) { in.Now = t0.Add(time.Second) })
	n.expect(d, types.ReasonInProgress)
	// A stale report (another generation) is no answer.
	d = n.step(func(in *Input) { in.Eviction = types.EvictionReport{Generation: in.Previous.Generation - 1} })
	n.expect(d, types.ReasonInProgress)

	// Every pod fits: the lowered status goes out Accepted, then kubepods
	// shrinks; one CapacityAccepted.
	d = n.settle()
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
	patch := d.Actions[0].(PatchNodeStatus)
	if patch.Capacity[resources.CPU] != 6000 || patch.Condition.Reason != types.ReasonAccepted || patch.Condition.Status != types.StatusTrue {
		t.Fatalf("status patch %+v", patch)
	}
	if c := d.Actions[1].(ClampCgroups); c.Capacity[resources.CPU] != 6000 {
		t.Fatalf("clamp %+v", c)
	}
	if e := d.Actions[2].(EmitEvent); e.Type != types.EventNormal || e.Reason != types.EventCapacityAccepted {
		t.Fatalf("event %+v", e)
	}
	if d.Next.Evicting || d.Next.Checking || d.Next.ClampDue || d.Next.InProgress != "" {
		t.Fatalf("state %+v, want nothing in flight", d.Next)
	}
}

// A planned shrink changed again before the pods were looked at: each
// change is looked at anew, and only what it settles on is published.
func TestPathA2ChangedWhileChecking(t *testing.T) {
	n := newNode(t, machine(8, 32*Gi), types.Configured{})
	n.step(nil)
	n.expect(n.step(func(in *Input) { in.Configured = spec("cpu", "6") }), types.ReasonInProgress, KindEvict)
	// Lowered further: a new generation, looked at anew.
	d := n.step(func(in *Input) { in.Configured = spec("cpu", "4") })
	n.expect(d, types.ReasonInProgress, KindEvict)
	// The answer for the first one is void.
	d = n.step(func(in *Input) {
		in.Eviction = types.EvictionReport{Generation: in.Previous.Generation - 1, Done: true}
	})
	n.expect(d, types.ReasonInProgress)
	d = n.settle()
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
	if p := d.Actions[0].(PatchNodeStatus); p.Capacity[resources.CPU] != 4000 {
		t.Fatalf("patch %+v", p)
	}
	// Raised back before the answer: kubepods never shrank; it is
	// written for the target again, then advertised.
	n.expect(n.step(func(in *Input) { in.Configured = spec("cpu", "2") }), types.ReasonInProgress, KindEvict)
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "4") })
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
	if d.Next.Evicting || d.Next.Checking || d.Next.ClampDue {
		t.Fatalf("state %+v, want nothing in flight", d.Next)
	}
	// A loss while a planned shrink is looked at: the loss clamps at
	// once (Path B), with its Warning, and nothing is clamped later.
	n.expect(n.step(func(in *Input) { in.Configured = spec("cpu", "3") }), types.ReasonInProgress, KindEvict)
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, 2000) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	if d.Next.ClampDue || !d.Next.Checking {
		t.Fatalf("state %+v, want the loss checked, clamped already", d.Next)
	}
	n.expect(n.settle(), types.ReasonEmergencyReduced, KindPatchNodeStatus)
}

// Cancelling a stuck downscale by restoring the spec (KEP troubleshooting):
// the cgroups grow back and the condition is Accepted; no deadlock.
func TestPathA2CancelledBySpecRevert(t *testing.T) {
	n := newNode(t, machine(8, 32*Gi), spec("memory", "32Gi"))
	n.step(nil)
	n.step(func(in *Input) { in.Configured = spec("memory", "16Gi") })
	d := n.step(func(in *Input) {
		in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Blocked: "PodDisruptionBudget"}
	})
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindClampCgroups, KindEvict)
	if !strings.Contains(d.Condition.Message, "eviction blocked: PodDisruptionBudget") {
		t.Fatalf("message %q", d.Condition.Message)
	}
	d = n.step(func(in *Input) { in.Configured = spec("memory", "32Gi") })
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
	if d.Next.Evicting {
		t.Fatal("eviction still outstanding after the downscale was cancelled")
	}
}

// Path B: emergency. The hardware drops below the configured value: clamp at
// once, evict, EmergencyReduced with a Warning event; the clamp survives a
// daemon restart; the oversized spec is ignored, even when the hardware comes
// back, until the spec is lowered.
func TestPathBEmergency(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), spec("cpu", "4", "memory", "16Gi"))
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	// 1–3. Balloon inflation takes 4Gi: physics first, the Warning, the
	// evictor; the status once it has looked at the pods.
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 12*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	clamp := d.Actions[0].(ClampCgroups)
	if clamp.Limits.MemoryMax != 12*Gi-768*Mi {
		t.Fatalf("clamp memory.max %d", clamp.Limits.MemoryMax)
	}
	if e := d.Actions[2].(Evict); e.Hold {
		t.Fatalf("evict %+v: a loss's evictions are not held", e)
	}
	ev := d.Actions[1].(EmitEvent)
	if ev.Type != types.EventWarning || ev.Reason != "EmergencyCapacityReduced" || !strings.Contains(ev.Message, "memory 16Gi → 12Gi") {
		t.Fatalf("event %+v", ev)
	}
	// The clamp is persisted at once.
	if d.Next.EmergencyTarget[resources.Memory] != 12*Gi || d.Next.EmergencySpec == "" {
		t.Fatalf("state %+v", d.Next)
	}

	// 4. Pods have to go: the status InProgress; evictions done:
	// EmergencyReduced.
	n.expect(n.evicting(), types.ReasonInProgress, KindPatchNodeStatus)
	d = n.settle()
	n.expect(d, types.ReasonEmergencyReduced, KindPatchNodeStatus)
	if d.Target[resources.Memory] != 12*Gi || d.Target[resources.CPU] != 4000 {
		t.Fatalf("target %v", d.Target)
	}

	// The daemon restarts: the state comes back from its file.
	b, err := json.Marshal(n.in.Previous)
	if err != nil {
		t.Fatal(err)
	}
	var restored State
	if err := json.Unmarshal(b, &restored); err != nil {
		t.Fatal(err)
	}
	n.in.Previous = restored
	n.expect(n.step(nil), types.ReasonEmergencyReduced)

	// The hardware comes back: the oversized spec is still ignored.
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi) })
	n.expect(d, types.ReasonEmergencyReduced)
	if d.Target[resources.Memory] != 12*Gi {
		t.Fatalf("target memory %d while the spec is unchanged", d.Target[resources.Memory])
	}
	// More loss while held is clamped again; every pod fits: published
	// once, EmergencyReduced.
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 10*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	d = n.settle()
	n.expect(d, types.ReasonEmergencyReduced, KindPatchNodeStatus)

	// 5. The controller lowers the spec to the new reality: Accepted.
	d = n.step(func(in *Input) { in.Configured = spec("cpu", "4", "memory", "10Gi") })
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	if d.Next.EmergencySpec != "" || d.Next.EmergencyTarget != nil {
		t.Fatalf("emergency not cleared: %+v", d.Next)
	}
}

func TestPathBResolvedByAnyNewSpecValue(t *testing.T) {
	start := func() *node {
		n := newNode(t, machine(4, 16*Gi), spec("memory", "16Gi"))
		n.step(nil)
		n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 12*Gi) })
		n.expect(n.settle(), types.ReasonEmergencyReduced, KindPatchNodeStatus)
		n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi) }) // hardware back
		return n
	}
	// Lowered, but above the clamp while the hardware is back: grows.
	n := start()
	d := n.step(func(in *Input) { in.Configured = spec("memory", "14Gi") })
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
	if d.Target[resources.Memory] != 14*Gi {
		t.Fatalf("target %v", d.Target)
	}
	// Changed to another oversized value: a new request, held Infeasible at
	// the clamp (spec first, Path A1).
	n = start()
	d = n.step(func(in *Input) { in.Configured = spec("memory", "20Gi") })
	n.expect(d, types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	if d.Target[resources.Memory] != 12*Gi {
		t.Fatalf("target %v", d.Target)
	}
	// Removed altogether: follow the hardware again.
	n = start()
	d = n.step(func(in *Input) { in.Configured = types.Configured{} })
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
}

// A loss of hardware that nothing configured is still clamped and evicted at
// once with a Warning event, but there is no spec to diverge from: the
// condition comes back to Accepted, or to the Infeasible hold it was in.
func TestUnplannedLossWithoutConfiguredValue(t *testing.T) {
	n := newNode(t, machine(8, 16*Gi), spec("cpu", "8"))
	n.step(nil)
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 8*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	// Every pod fits: Accepted at once, the loss's Warning its one event.
	n.expect(n.settle(), types.ReasonAccepted, KindPatchNodeStatus)
	// Another loss where pods have to go: InProgress, then Accepted.
	n.expect(n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 6*Gi) }),
		types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	n.expect(n.evicting(), types.ReasonInProgress, KindPatchNodeStatus)
	n.expect(n.settle(), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	h := newNode(t, machine(4, 16*Gi), spec("cpu", "8")) // held Infeasible
	h.expect(h.step(nil), types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	d = h.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 8*Gi) })
	h.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	h.expect(h.settle(), types.ReasonInfeasible, KindPatchNodeStatus, KindEmitEvent)
	// The hold keeps what the hardware forced and grows nothing back.
	d = h.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 16*Gi) })
	h.expect(d, types.ReasonInfeasible)
	if d.Target[resources.Memory] != 8*Gi {
		t.Fatalf("held target %v", d.Target)
	}
}

// The kubelet only re-reads the machine when it restarts: after the change
// has settled, it is restarted (rate limited) and the change is Accepted once
// the Node is back Ready with the target.
func TestKubeletRestart(t *testing.T) {
	n := newNode(t, machine(4, 16*Gi), types.Configured{})
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 4000, "memory": 16 * Gi}}
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	// CPUs hot-added: kubepods grows, status advertises them, the kubelet
	// must wait for the change to settle.
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.CPU, (8)*1000) })
	n.expect(d, types.ReasonInProgress, KindGrowCgroups, KindPatchNodeStatus)
	if d.RequeueAfter != DefaultSettleDelay {
		t.Fatalf("RequeueAfter %v", d.RequeueAfter)
	}
	// Before the settle delay: nothing.
	d = n.step(func(in *Input) { in.Now = t0.Add(10 * time.Second) })
	n.expect(d, types.ReasonInProgress)
	if d.RequeueAfter != 20*time.Second {
		t.Fatalf("RequeueAfter %v", d.RequeueAfter)
	}
	// Settled: restart.
	d = n.step(func(in *Input) { in.Now = t0.Add(30 * time.Second) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	// The kubelet is down for a while.
	d = n.step(func(in *Input) { in.Now = t0.Add(40 * time.Second); in.Kubelet.Ready = false })
	n.expect(d, types.ReasonInProgress)
	// It is back with the old view: still waiting (within the timeout).
	d = n.step(func(in *Input) { in.Now = t0.Add(50 * time.Second); in.Kubelet.Ready = true })
	n.expect(d, types.ReasonInProgress)
	// It is back, Ready, with the new capacity: Accepted.
	d = n.step(func(in *Input) {
		in.Now = t0.Add(60 * time.Second)
		in.Kubelet.Capacity = resources.List{"cpu": 8000, "memory": 16*Gi + 4*Mi}
	})
	// Its memory is 4Mi off what node-resized holds, within the jitter:
	// the kubelet's own number is taken (no change: the limits are
	// written for it, the Node shows it), so the two never disagree.
	n.expect(d, types.ReasonAccepted, KindReassertCgroups, KindPatchNodeStatus, KindEmitEvent)
	if d.Target[resources.Memory] != 16*Gi+4*Mi || d.Next.Applied[resources.Memory] != 16*Gi+4*Mi || d.Next.Generation != 1 {
		t.Fatalf("target %v, applied %v, generation %d: want the kubelet's memory, no new generation", d.Target, d.Next.Applied, d.Next.Generation)
	}

	// Another change soon after: the restart is rate limited.
	d = n.step(func(in *Input) {
		in.Now = t0.Add(2 * time.Minute)
		in.Physical = in.Physical.with(resources.CPU, (6)*1000)
	})
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	d = n.settle()
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus)
	if want := DefaultRestartInterval - (2*time.Minute - 30*time.Second); d.RequeueAfter != want {
		t.Fatalf("RequeueAfter %v, want %v", d.RequeueAfter, want)
	}
	d = n.step(func(in *Input) { in.Now = t0.Add(30*time.Second + DefaultRestartInterval) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)

	// The kubelet never comes back with the target: after the timeout a
	// Warning event, a condition that says what to do, and no restart loop.
	d = n.step(func(in *Input) { in.Now = in.Now.Add(DefaultRestartTimeout) })
	n.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindEmitEvent)
	if e, _ := find[EmitEvent](d.Actions); e.Reason != types.EventKubeletRestartFailed || e.Type != types.EventWarning ||
		!strings.Contains(e.Message, "did not come back with the target") || !strings.Contains(e.Message, "systemctl restart kubelet") {
		t.Fatalf("event %+v", e)
	}
	if d.RequeueAfter != 0 {
		t.Fatalf("RequeueAfter %v after a failed restart", d.RequeueAfter)
	}
	d = n.step(func(in *Input) { in.Now = in.Now.Add(10 * DefaultRestartInterval) })
	n.expect(d, types.ReasonInProgress)
	// An operator restarts the kubelet: it comes back with the target.
	d = n.step(func(in *Input) { in.Kubelet.Capacity = resources.List{"cpu": 6000, "memory": 16 * Gi} })
	n.expect(d, types.ReasonAccepted, KindReassertCgroups, KindPatchNodeStatus, KindEmitEvent)

	// Restarts not allowed (e.g. the unit is inactive): Accepted, with a
	// note that a restart is needed.
	d = n.step(func(in *Input) {
		in.Physical = in.Physical.with(resources.CPU, 8000)
		in.Kubelet.RestartAllowed = false
		in.Kubelet.RestartBlocked = "kubelet.service is inactive"
	})
	n.expect(d, types.ReasonAccepted, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent)
	if !strings.Contains(d.Condition.Message, "kubelet.service is inactive") || !strings.Contains(d.Condition.Message, "needs a restart") {
		t.Fatalf("message %q", d.Condition.Message)
	}
}

// A loss that comes in steps (a DIMM's blocks going one by one) warns
// once: while the eviction for an earlier step runs (or the pods are
// still being looked at), a further step tightens the clamp and the
// status without another Warning; a loss after the eviction is done warns
// again.
func TestOneWarningPerLoss(t *testing.T) {
	n := newNode(t, machine(8, 16*Gi), types.Configured{})
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	d := n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 15*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 14*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEvict)
	n.expect(n.evicting(), types.ReasonInProgress, KindPatchNodeStatus)
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 13*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEvict)
	// Published InProgress already: the next step's status goes out once
	// the evictor has looked again.
	n.expect(n.evicting(), types.ReasonInProgress, KindPatchNodeStatus)
	n.settle()
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 12*Gi) })
	n.expect(d, types.ReasonInProgress, KindClampCgroups, KindEmitEvent, KindEvict)
}
