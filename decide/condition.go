package decide

import (
	"fmt"
	"github.com/node-resized/node-resized/types"
)

// condition decides the CapacityConfigured condition as it stands after the
// pass, with its transition time, and the kubelet step's verdict. It records
// in next the shrink in flight and the kubelet restart bookkeeping.
func (p pass) condition(pl plan, next *State) (types.Condition, kubeletOutcome, releaseOutcome) {
	cond, shrinking := p.shrinkCondition(pl, next)
	rs := p.releaseStep(pl, next)
	var ks kubeletOutcome
	if !shrinking {
		cond, ks = p.settledCondition(pl, next, rs)
	}
	if p.ev.present {
		cond.Message = types.ConfiguredPhrase(p.ev.key) + ": " + cond.Message
	}
	if cond.Status == p.prev.Condition.Status && cond.Reason == p.prev.Condition.Reason {
		cond.LastTransitionTime = p.prev.Condition.LastTransitionTime
	} else {
		cond.LastTransitionTime = p.in.Now
	}
	return cond, ks, rs
}

// shrinkCondition follows the shrink in flight: it starts one when the
// target moves down, ends it when the evictor reports the generation done,
// and while one is in flight returns its InProgress condition and true.
//
// A shrink starts Checking: it is published at the evictor's first report
// on its generation, which comes from the evictor's first look at the
// pods, before any is evicted. Done there (every pod fits), the shrink
// ends at once and its status goes out once, with the condition it
// settles on; any other report publishes it InProgress. A loss that
// taints the Node (Policy.TaintWhileStale) is published at once: the
// taint waits for nothing.
func (p pass) shrinkCondition(pl plan, next *State) (types.Condition, bool) {
	gen, ev := next.Generation, p.in.Eviction
	switch {
	case pl.changed() && len(pl.forced) > 0 && len(p.converged) > 0:
		next.InProgress = fmt.Sprintf("at start, kubepods was found enforcing more than the hardware now has (%s): the machine shrank while node-resized was not running; kubepods clamped, evicting pods that no longer fit",
			transitions(pl.forced, pl.applied, pl.desired))
	case pl.changed() && len(pl.forced) > 0:
		next.InProgress = fmt.Sprintf("physical capacity fell below the applied capacity (%s); kubepods clamped, evicting pods that no longer fit",
			transitions(pl.forced, pl.applied, pl.desired))
		if m := missingReserved(p.in.ReservedCPUs, p.in.Physical.OnlineCPUs); len(m) > 0 {
			next.InProgress += "; " + reservedGone(m)
		}
	case pl.changed() && len(pl.planned) > 0:
		next.InProgress = fmt.Sprintf("lowering capacity (%s): status lowered, shrinking kubepods and evicting pods that no longer fit",
			transitions(pl.planned, pl.applied, pl.desired))
	}
	switch {
	case pl.changed() && len(pl.forced) > 0 && p.pol.TaintWhileStale:
		// The taint is protection: a loss's status carries it at once.
	case pl.changed() && pl.shrinking():
		// A loss's clamp is written now (Path B); a planned shrink's
		// comes with its status (Path A2).
		next.Checking, next.ClampDue = true, len(pl.forced) == 0
	case p.prev.Evicting && ev.Generation == gen && ev.Done:
		next.Evicting, next.Checking, next.ClampDue = false, false, false
		next.InProgress = ""
	case p.prev.Checking && ev.Generation == gen:
		// Pods to evict, or the look failed: InProgress from now.
		next.Checking, next.ClampDue = false, false
	}
	if !next.Evicting {
		return types.Condition{}, false
	}
	msg := next.InProgress
	if !pl.changed() && ev.Generation == gen && ev.Blocked != "" {
		msg += "; eviction blocked: " + ev.Blocked
	}
	return types.Condition{Status: types.StatusFalse, Reason: types.ReasonInProgress, Message: msg}, true
}

// settledCondition is the condition where the spec value settles (no
// shrink in flight): Infeasible, EmergencyReduced, or Accepted once the
// kubelet step has nothing left to wait for.
func (p pass) settledCondition(pl plan, next *State, rs releaseOutcome) (types.Condition, kubeletOutcome) {
	note := p.releaseNote(rs, *next)
	if m := missingReserved(p.in.ReservedCPUs, p.in.Physical.OnlineCPUs); len(m) > 0 && pl.mode != types.ReasonInfeasible {
		// The hardware took a reserved CPU: never restart the kubelet
		// into it, and say so until it is back.
		in := p.in
		in.Kubelet.RestartAllowed, in.Kubelet.RestartBlocked, in.Kubelet.RestartRefused = false, "a reserved CPU is offline", false
		ks := kubeletStep(in, p.pol, p.jitter, pl.desired, p.phys, next)
		ks.note, ks.considered, ks.refused = "", false, false // the caller's verdict is not the one used
		msg := fmt.Sprintf("capacity %s applied; %s", pl.desired, reservedGone(m))
		if pl.mode == types.ReasonEmergencyReduced {
			msg = fmt.Sprintf("physical capacity fell below it; capacity clamped to %s; %s", next.EmergencyTarget, reservedGone(m))
		}
		return types.Condition{Status: types.StatusFalse, Reason: types.ReasonEmergencyReduced, Message: msg}, ks
	}
	switch pl.mode {
	case types.ReasonInfeasible:
		msg := fmt.Sprintf("not applied: %s; capacity held at %s", p.ev.problems(p.phys), pl.desired)
		if next.GivingBack {
			msg += "; " + note
		}
		return types.Condition{Status: types.StatusFalse, Reason: types.ReasonInfeasible, Message: msg}, kubeletOutcome{}
	case types.ReasonEmergencyReduced:
		ks := kubeletStep(p.in, p.pol, p.jitter, pl.desired, p.phys, next)
		return types.Condition{Status: types.StatusFalse, Reason: types.ReasonEmergencyReduced,
			Message: fmt.Sprintf("physical capacity fell below it; capacity clamped to %s and held until the configured capacity is lowered to at most the physical capacity",
				next.EmergencyTarget)}, ks
	}
	// Accepted.
	if next.Releasing || next.GivingBack {
		// The kubelet is restarted once the machine is the target.
		return types.Condition{Status: types.StatusFalse, Reason: types.ReasonInProgress,
			Message: fmt.Sprintf("capacity %s applied; %s", pl.desired, note)}, kubeletOutcome{}
	}
	ks := kubeletStep(p.in, p.pol, p.jitter, pl.desired, p.phys, next)
	if ks.waiting != "" {
		msg := fmt.Sprintf("capacity %s applied; %s", pl.desired, ks.waiting)
		if note != "" {
			msg += "; " + note
		}
		return types.Condition{Status: types.StatusFalse, Reason: types.ReasonInProgress, Message: msg}, ks
	}
	msg := fmt.Sprintf("capacity %s applied", pl.desired)
	if !p.ev.present {
		msg += " (no configured capacity: following the hardware)"
	}
	if ks.note != "" {
		msg += "; " + ks.note
	}
	if note != "" {
		msg += "; " + note
	}
	return types.Condition{Status: types.StatusTrue, Reason: types.ReasonAccepted, Message: msg}, ks
}
