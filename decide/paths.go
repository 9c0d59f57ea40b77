package decide

import (
	"github.com/node-resized/node-resized/types"
	"slices"

	"github.com/node-resized/node-resized/resources"
)

// plan is where a pass leads: the path taken for the configured value, the
// target on the way, and how the target moves from what was applied.
type plan struct {
	// mode is where the spec value settles: Accepted, Infeasible or
	// EmergencyReduced.
	mode    types.Reason
	applied resources.List // the target before this pass
	desired resources.List // the new target
	// The resources whose target moves: forced down because the hardware
	// fell below what was applied (Path B), planned down (Path A2), grown.
	forced, planned, grown []string
	// rebased names the resources whose applied value moved to the
	// kubelet's own reading, within the jitter (rebase).
	rebased []string
}

// changed reports whether the target moves.
func (pl plan) changed() bool { return len(pl.forced)+len(pl.planned)+len(pl.grown) > 0 }

// shrinking reports whether the target moves down anywhere, which makes
// pods to evict.
func (pl plan) shrinking() bool { return len(pl.forced)+len(pl.planned) > 0 }

// choosePath decides where this spec value leads and what the target is on
// the way.
func (p *pass) choosePath() plan {
	prev, ev, phys := p.prev, p.ev, p.phys
	firstRun := prev.Applied == nil
	pl := plan{applied: prev.Applied}
	if firstRun {
		pl.applied, p.converged = firstBaseline(p.in, phys, p.jitter)
	}
	switch {
	case prev.EmergencySpec != "" && prev.EmergencySpec == ev.key:
		// Path B, held: the oversized spec is ignored until it changes.
		pl.mode = types.ReasonEmergencyReduced
		pl.desired = phys.Clone()
		for name, v := range ev.values {
			if t, ok := prev.EmergencyTarget[name]; ok {
				v = t
			}
			pl.desired[name] = minInt64(v, phys[name])
		}
	case ev.rejected():
		pl.mode = types.ReasonInfeasible
		pl.desired = hold(pl.applied, phys)
	case len(ev.over) > 0:
		if (!firstRun && prev.Spec == ev.key && prev.Outcome == types.ReasonAccepted) || (firstRun && satisfied(ev, pl.applied)) {
			// Path B: the spec was satisfied and the hardware fell below
			// it (on the first pass: what is enforced met the spec, and
			// the hardware shrank while node-resized was not running).
			pl.mode = types.ReasonEmergencyReduced
			pl.desired = specTarget(ev, phys)
		} else {
			// Path A1 hold: spec first, hardware not there (yet).
			pl.mode = types.ReasonInfeasible
			pl.desired = hold(pl.applied, phys)
		}
	default:
		pl.mode = types.ReasonAccepted
		pl.desired = specTarget(ev, phys)
	}
	for name := range pl.applied {
		if _, ok := pl.desired[name]; !ok {
			pl.desired[name] = 0 // a resource that is gone
		}
	}
	if !firstRun {
		pl.rebase(p.rebased, prev.Physical)
	}
	pl.classify(phys)
	return pl
}

// rebase takes the kubelet's own reading of the resources named (the
// pass's rebased) as applied where the target followed the hardware, held
// in prevPhys, and follows it now: a move within the jitter is no change
// (no new generation, no eviction, no restart), but the Node and the
// kubepods limits take the kubelet's number (see kubeletReading; reassert
// writes the limits).
func (pl *plan) rebase(names []string, prevPhys resources.List) {
	for _, name := range names {
		a, ok := pl.applied[name]
		if !ok || a != prevPhys[name] || pl.desired[name] == a {
			continue
		}
		if pl.rebased == nil {
			pl.applied = pl.applied.Clone()
		}
		pl.applied[name] = pl.desired[name]
		pl.rebased = append(pl.rebased, name)
	}
}

// classify sorts the resources whose target moves into forced, planned and
// grown.
func (pl *plan) classify(phys resources.List) {
	for _, name := range union(pl.applied, pl.desired) {
		a, d := pl.applied[name], pl.desired[name]
		switch {
		case d < a && a > phys[name]:
			pl.forced = append(pl.forced, name)
		case d < a:
			pl.planned = append(pl.planned, name)
		case d > a:
			pl.grown = append(pl.grown, name)
		}
	}
}

// nextState is the state to remember after this pass, before the condition
// and the kubelet step fill in theirs.
func (p pass) nextState(pl plan) State {
	next := p.prev
	next.Version = StateVersion
	next.Spec = p.ev.key
	next.Outcome = pl.mode
	next.Physical = p.phys.Clone()
	next.Applied = pl.desired
	if pl.mode == types.ReasonEmergencyReduced {
		next.EmergencySpec = p.ev.key
		next.EmergencyTarget = resources.List{}
		for name := range p.ev.values {
			next.EmergencyTarget[name] = pl.desired[name]
		}
	} else {
		next.EmergencySpec, next.EmergencyTarget = "", nil
	}
	if pl.changed() {
		next.Generation++
		next.ChangedAt = p.in.Now
		next.Evicting = pl.shrinking()
		next.InProgress = ""
		next.Checking, next.ClampDue = false, false
	}
	return next
}

// actions lists what carries the pass out, in the order the paths
// prescribe. Each action gets its own copies, so that no two values of the
// decision share a map.
func (p pass) actions(pl plan, next State, alloc resources.List, ks kubeletOutcome) []Action {
	gen, desired, cond, prevCond := next.Generation, pl.desired, next.Condition, p.prev.Condition
	limits := func() CgroupLimits {
		return KubepodsLimits(withPID(desired, p.in.Physical.Capacity[resources.PID]), p.in.Reservations)
	}
	patch := func() Action {
		return PatchNodeStatus{Generation: gen, Capacity: desired.Clone(), Allocatable: alloc.Clone(), Condition: cond, Taint: next.Tainted}
	}
	evict := func(hold bool) Action {
		return Evict{Generation: gen, Capacity: desired.Clone(), Allocatable: alloc.Clone(), Reason: types.EvictionReason, Hold: hold}
	}
	// A shrink is published once the evictor has looked at its pods (see
	// shrinkCondition): checked says this pass publishes it.
	checked := p.prev.Checking && !next.Checking && !pl.changed()
	var acts []Action
	switch {
	case pl.changed() && len(pl.forced) > 0: // Path B: physics first
		acts = append(acts, ClampCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()})
		if !next.Checking {
			acts = append(acts, patch()) // with the taint, at once
		}
		if !p.prev.Evicting || p.prev.ClampDue {
			// One Warning per loss: while the eviction for an earlier
			// step of it runs (a DIMM's blocks going one by one), a
			// further step tightens the clamp and the condition only.
			// (A planned shrink whose pods are being looked at is no
			// loss.)
			acts = append(acts, EmitEvent{Type: types.EventWarning, Reason: types.EventEmergencyCapacityReduced, Message: next.InProgress})
		}
		acts = append(acts, evict(false))
	case pl.changed() && len(pl.planned) > 0: // Path A2: the pods looked at, then status first
		acts = append(acts, evict(true))
	case pl.changed(): // growth: room first, then advertise it
		acts = append(acts,
			GrowCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()},
			patch())
	case checked:
		acts = append(acts, patch())
		if p.prev.ClampDue {
			// Path A2: status first, then kubepods shrinks, then the
			// evictions held until now, if any.
			acts = append(acts, ClampCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()})
			if next.Evicting {
				acts = append(acts, evict(false))
			}
		}
	case next.Checking:
		// Nothing is published before the pods are looked at: a taint
		// goes with the shrink's status.
	case !cond.Same(prevCond) || next.Tainted != p.prev.Tainted:
		acts = append(acts, patch())
	}
	switch {
	case next.Checking: // the condition is not published yet
	case cond.Reason == types.ReasonInfeasible && !cond.Same(prevCond):
		acts = append(acts, EmitEvent{Type: types.EventWarning, Reason: types.EventCapacityInfeasible, Message: cond.Message})
	case cond.Reason == types.ReasonAccepted && (prevCond.Reason != types.ReasonAccepted || pl.changed() || (checked && p.prev.ClampDue)):
		// A loss's own Warning stands for it: a loss published straight
		// to Accepted (no configured capacity) adds no second event.
		acts = append(acts, EmitEvent{Type: types.EventNormal, Reason: types.EventCapacityAccepted, Message: cond.Message})
	}
	if ks.failed != "" {
		acts = append(acts, EmitEvent{Type: types.EventWarning, Reason: types.EventKubeletRestartFailed, Message: cond.Message})
	}
	if ks.refused && !cond.Same(prevCond) {
		acts = append(acts, EmitEvent{Type: types.EventWarning, Reason: types.EventKubeletRestartBlocked, Message: cond.Message})
	}
	if ks.restart {
		acts = append(acts, RestartKubelet{Generation: gen, Capacity: desired.Clone()})
	}
	return acts
}

// baseline is what is taken as applied on the very first pass: what the
// running kubelet enforces where known, the hardware elsewhere.
func baseline(k Kubelet, phys resources.List) resources.List {
	b := phys.Clone()
	if k.Known {
		for name, v := range k.Capacity {
			if managed(name) {
				b[name] = v
			}
		}
	}
	return b
}

// hold keeps what is applied, lowered only where the hardware forces it.
func hold(applied, phys resources.List) resources.List {
	out := make(resources.List, len(applied))
	for name, v := range applied {
		out[name] = minInt64(v, phys[name])
	}
	return out
}

// specTarget is the configured value for each configured resource, clamped
// to physical, and the physical capacity for every other.
func specTarget(ev evaluation, phys resources.List) resources.List {
	out := phys.Clone()
	for name, v := range ev.values {
		out[name] = minInt64(v, phys[name])
	}
	return out
}

// taint decides whether the Node carries the NoSchedule taint TaintKey
// after this pass (Policy.TaintWhileStale), and for the loss of which
// resources: it is set with a loss of hardware below what was applied
// (Path B, the clamp's patch carries it), kept while the shrink is in
// flight, and lifted once the kubelet is seen to have adopted the target
// on those resources (kubeletAdopted).
func (p pass) taint(pl plan, next State) (bool, []string) {
	var lost []string
	if p.prev.Tainted {
		lost = p.prev.TaintFor
	}
	switch {
	case !p.pol.TaintWhileStale:
		return false, nil
	case pl.changed() && len(pl.forced) > 0:
		return true, mergeNames(lost, pl.forced)
	case !p.prev.Tainted:
		return false, nil
	case next.Evicting || !kubeletAdopted(p.in.Kubelet, pl.desired, p.phys, p.jitter, lost):
		return true, lost
	}
	return false, nil
}

// mergeNames returns the names in a or b, sorted, in a new slice.
func mergeNames(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
