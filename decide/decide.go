package decide

import (
	"fmt"
	"strings"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// DefaultJitterMemory is the memory drift that is not a change: 100Mi.
const DefaultJitterMemory int64 = 100 << 20

// Policy defaults.
const (
	DefaultSettleDelay     = 30 * time.Second
	DefaultRestartInterval = 10 * time.Minute
	DefaultRestartTimeout  = 5 * time.Minute
)

// Policy tunes when the kubelet is restarted. A zero field takes its default.
// Policy is a plain value, safe for concurrent reads.
type Policy struct {
	// SettleDelay is how long the target must stay unchanged before the
	// kubelet is restarted to adopt it.
	SettleDelay time.Duration `json:"settleDelay,omitempty"`
	// RestartInterval is the least time between two kubelet restarts.
	RestartInterval time.Duration `json:"restartInterval,omitempty"`
	// RestartTimeout is how long a restarted kubelet has to come back Ready
	// with the target capacity.
	RestartTimeout time.Duration `json:"restartTimeout,omitempty"`
}

func (p Policy) withDefaults() Policy {
	if p.SettleDelay <= 0 {
		p.SettleDelay = DefaultSettleDelay
	}
	if p.RestartInterval <= 0 {
		p.RestartInterval = DefaultRestartInterval
	}
	if p.RestartTimeout <= 0 {
		p.RestartTimeout = DefaultRestartTimeout
	}
	return p
}

// EvictionReport is the evictor's progress on the Evict of one generation.
// It is a plain value, safe for concurrent reads.
type EvictionReport struct {
	// Generation is the Evict.Generation the report is about; a report for
	// another generation is ignored.
	Generation int64 `json:"generation"`
	// Done is true once every pod that no longer fits is gone (or none had
	// to go).
	Done bool `json:"done,omitempty"`
	// Blocked says why eviction cannot proceed (a PodDisruptionBudget, …);
	// empty when it is proceeding.
	Blocked string `json:"blocked,omitempty"`
}

// Kubelet is what is known of the running kubelet. It is a plain value, safe
// for concurrent reads.
type Kubelet struct {
	// Known is false when nothing is known; the kubelet is then never
	// restarted and never waited for.
	Known bool `json:"known"`
	// Capacity is the capacity the running kubelet read from the machine
	// when it started (cpu, memory, hugepages-*, ephemeral-storage); a
	// resource missing here is not compared.
	Capacity resources.List `json:"capacity,omitempty"`
	// Ready is the Node's Ready condition.
	Ready bool `json:"ready,omitempty"`
	// RestartAllowed is the caller's verdict that kubelet.service may be
	// restarted now: policy allows it, the unit is active, and a changed CPU
	// set will not stop a static CPU manager from starting.
	RestartAllowed bool `json:"restartAllowed,omitempty"`
	// RestartBlocked says why RestartAllowed is false.
	RestartBlocked string `json:"restartBlocked,omitempty"`
}

// Input is everything Decide looks at. Decide does not modify it: an Input
// may be shared between goroutines that only read it.
type Input struct {
	Physical     Physical
	Configured   Configured
	Reservations Reservations
	// JitterMemory is the memory drift that is not a change; 0 means
	// DefaultJitterMemory.
	JitterMemory int64
	// Previous is the Next of the previous decision (zero on the first pass).
	Previous State
	// Now is the current time; Decide reads no clock.
	Now      time.Time
	Eviction EvictionReport
	Kubelet  Kubelet
	Policy   Policy
}

// Decision is the outcome of one pass. It is a plain value, safe for
// concurrent reads.
type Decision struct {
	// Target is the capacity to publish and enforce (cpu, memory,
	// hugepages-*, ephemeral-storage).
	Target resources.List
	// Allocatable is Allocatable(Target).
	Allocatable resources.List
	// Physical is the physical capacity Decide used: the measured one, with
	// memory held at its previous value while it drifts by less than the
	// jitter tolerance. Target never exceeds it.
	Physical resources.List
	// Condition is the CapacityConfigured condition as it stands after the
	// actions.
	Condition Condition
	// Actions are to be carried out in order. Empty when nothing changed.
	Actions []Action
	// Next is the state to persist and pass back as Input.Previous.
	Next State
	// RequeueAfter, when positive, asks for another pass after that long
	// even if no input changes (settle delay, restart rate limit, restart
	// timeout).
	RequeueAfter time.Duration
	// Ignored lists configured resource names that are not validated
	// (unknown names are ignored, as the KEP says).
	Ignored []string
	// Err reports input that was refused (*RejectedError): a nonsense
	// physical reading, which leaves everything as it was, or a malformed
	// or unsupported configured capacity, which is Infeasible. It is set on
	// every pass while the input stays refused.
	Err error
}

// Actuates reports whether any action changes the node.
func (d Decision) Actuates() bool {
	for _, a := range d.Actions {
		if a.Actuates() {
			return true
		}
	}
	return false
}

// RejectedError reports input that Decide refused to act on. It is not
// modified after Decide returns it: safe for concurrent reads.
type RejectedError struct {
	// What names the input: "physical capacity" or "configured capacity".
	What     string
	Problems []string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s refused: %s", e.What, strings.Join(e.Problems, "; "))
}

// managed reports whether node-resized publishes and enforces the resource.
func managed(name string) bool {
	switch name {
	case resources.CPU, resources.Memory, resources.EphemeralStorage:
		return true
	}
	return resources.IsHugePages(name)
}

// Decide applies KEP-3953's rules to one pass of input and returns what to do.
//
// In short: with no configured capacity the node follows its hardware; a
// configured value must be well formed, above the kubelet's reservations and
// within the hardware, or it is Infeasible and nothing of it is applied (the
// node holds its capacity; an over-physical request is re-evaluated when the
// hardware changes, Path A1); a lower value is applied status-first, then
// cgroups, then evictions (Path A2); a hardware loss below what is applied is
// clamped at once and evicted (Path B), and when the configured value itself
// is now above the hardware the clamp is held as EmergencyReduced until that
// value changes. Calling Decide again with the same input and Previous set to
// the returned Next yields no actions.
//
// Decide is a pure function: safe for concurrent use.
func Decide(in Input) Decision {
	jitter := in.JitterMemory
	if jitter <= 0 {
		jitter = DefaultJitterMemory
	}
	pol := in.Policy.withDefaults()
	prev := in.Previous.clone()
	r := in.Reservations
	now := in.Now

	raw := in.Physical.published()
	if problems := checkPhysical(in.Physical, raw, r); len(problems) > 0 {
		d := Decision{
			Target:    prev.Applied.Clone(),
			Physical:  raw,
			Condition: prev.Condition,
			Next:      prev,
			Err:       &RejectedError{What: "physical capacity", Problems: problems},
		}
		if prev.Applied != nil {
			d.Allocatable = Allocatable(prev.Applied, r)
		}
		return d
	}

	// Memory drift under the jitter tolerance is not a change.
	phys := raw.Clone()
	if pm, ok := prev.Physical[resources.Memory]; ok && absDiff(phys[resources.Memory], pm) < jitter {
		phys[resources.Memory] = pm
	}

	ev := evaluate(in.Configured, phys, in.Physical.SwapActive, r)

	firstRun := prev.Applied == nil
	applied := prev.Applied
	if firstRun {
		applied = baseline(in.Kubelet, phys)
	}

	// Where does this spec value lead, and what is the target on the way?
	var mode Reason
	var desired resources.List
	switch {
	case prev.EmergencySpec != "" && prev.EmergencySpec == ev.key:
		// Path B, held: the oversized spec is ignored until it changes.
		mode = ReasonEmergencyReduced
		desired = phys.Clone()
		for name, v := range ev.values {
			if t, ok := prev.EmergencyTarget[name]; ok {
				v = t
			}
			desired[name] = minInt64(v, phys[name])
		}
	case ev.rejected():
		mode = ReasonInfeasible
		desired = hold(applied, phys)
	case len(ev.over) > 0:
		if !firstRun && prev.Spec == ev.key && prev.Outcome == ReasonAccepted {
			// Path B: the spec was satisfied and the hardware fell below it.
			mode = ReasonEmergencyReduced
			desired = specTarget(ev, phys)
		} else {
			// Path A1 hold: spec first, hardware not there (yet).
			mode = ReasonInfeasible
			desired = hold(applied, phys)
		}
	default:
		mode = ReasonAccepted
		desired = specTarget(ev, phys)
	}
	for name := range applied {
		if _, ok := desired[name]; !ok {
			desired[name] = 0 // a resource that is gone
		}
	}

	var forced, planned, grown []string
	for _, name := range union(applied, desired) {
		a, d := applied[name], desired[name]
		switch {
		case d < a && a > phys[name]:
			forced = append(forced, name)
		case d < a:
			planned = append(planned, name)
		case d > a:
			grown = append(grown, name)
		}
	}
	changed := len(forced)+len(planned)+len(grown) > 0
	shrinking := len(forced)+len(planned) > 0

	next := prev
	next.Version = StateVersion
	next.Spec = ev.key
	next.Outcome = mode
	next.Physical = phys.Clone()
	next.Applied = desired
	if mode == ReasonEmergencyReduced {
		next.EmergencySpec = ev.key
		next.EmergencyTarget = resources.List{}
		for name := range ev.values {
			next.EmergencyTarget[name] = desired[name]
		}
	} else {
		next.EmergencySpec, next.EmergencyTarget = "", nil
	}
	if changed {
		next.Generation++
		next.ChangedAt = now
		next.Evicting = shrinking
		next.InProgress = ""
	}
	gen := next.Generation

	d := Decision{
		Target:      desired.Clone(),
		Allocatable: Allocatable(desired, r),
		Physical:    phys,
		Ignored:     ev.ignored,
	}
	if ev.rejected() {
		var problems []string
		problems = append(problems, ev.malformed...)
		if ev.swap {
			problems = append(problems, "memory is configured but swap is active: swap-enabled nodes are not supported")
		}
		problems = append(problems, ev.below...)
		d.Err = &RejectedError{What: "configured capacity", Problems: problems}
	}

	// The condition as it stands after this pass.
	var cond Condition
	var restart bool
	switch {
	case changed && len(forced) > 0:
		next.InProgress = fmt.Sprintf("physical capacity fell below the applied capacity (%s); kubepods clamped, evicting pods that no longer fit",
			transitions(forced, applied, desired))
		cond = Condition{Status: StatusFalse, Reason: ReasonInProgress, Message: next.InProgress}
	case changed && len(planned) > 0:
		next.InProgress = fmt.Sprintf("lowering capacity (%s): status lowered, shrinking kubepods and evicting pods that no longer fit",
			transitions(planned, applied, desired))
		cond = Condition{Status: StatusFalse, Reason: ReasonInProgress, Message: next.InProgress}
	case prev.Evicting && in.Eviction.Generation == gen && in.Eviction.Done:
		next.Evicting = false
		next.InProgress = ""
	}
	if next.Evicting && !changed {
		msg := next.InProgress
		if in.Eviction.Generation == gen && in.Eviction.Blocked != "" {
			msg += "; eviction blocked: " + in.Eviction.Blocked
		}
		cond = Condition{Status: StatusFalse, Reason: ReasonInProgress, Message: msg}
	}
	if !next.Evicting {
		switch mode {
		case ReasonInfeasible:
			cond = Condition{Status: StatusFalse, Reason: ReasonInfeasible,
				Message: fmt.Sprintf("configured capacity %s is not applied: %s; capacity held at %s",
					ev.key, ev.problems(phys), desired)}
		case ReasonEmergencyReduced:
			cond = Condition{Status: StatusFalse, Reason: ReasonEmergencyReduced,
				Message: fmt.Sprintf("physical capacity fell below the configured capacity %s; capacity clamped to %s and held until the configured capacity is lowered to at most the physical capacity",
					ev.key, next.EmergencyTarget)}
			ks := kubeletStep(in, pol, jitter, desired, phys, &next)
			restart, d.RequeueAfter = ks.restart, ks.requeue
		case ReasonAccepted:
			ks := kubeletStep(in, pol, jitter, desired, phys, &next)
			restart, d.RequeueAfter = ks.restart, ks.requeue
			if ks.waiting != "" {
				cond = Condition{Status: StatusFalse, Reason: ReasonInProgress,
					Message: fmt.Sprintf("capacity %s applied; %s", desired, ks.waiting)}
			} else {
				msg := fmt.Sprintf("capacity %s applied", desired)
				if !ev.present {
					msg += " (no configured capacity: following the hardware)"
				}
				if ks.note != "" {
					msg += "; " + ks.note
				}
				cond = Condition{Status: StatusTrue, Reason: ReasonAccepted, Message: msg}
			}
		}
	}
	if cond.Status == prev.Condition.Status && cond.Reason == prev.Condition.Reason {
		cond.LastTransitionTime = prev.Condition.LastTransitionTime
	} else {
		cond.LastTransitionTime = now
	}
	next.Condition = cond
	d.Condition = cond

	// The actions, in the order the paths prescribe. Each gets its own
	// copies, so that no two values of the decision share a map.
	limits := func() CgroupLimits { return KubepodsLimits(withPID(desired, in.Physical.Capacity[resources.PID]), r) }
	patch := func() Action {
		return PatchNodeStatus{Generation: gen, Capacity: desired.Clone(), Allocatable: d.Allocatable.Clone(), Condition: cond}
	}
	evict := Evict{Generation: gen, Capacity: desired.Clone(), Allocatable: d.Allocatable.Clone(), Reason: EvictionReason}
	var acts []Action
	switch {
	case changed && len(forced) > 0: // Path B: physics first
		acts = append(acts,
			ClampCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()},
			patch(),
			EmitEvent{Type: EventWarning, Reason: EventEmergencyCapacityReduced, Message: next.InProgress},
			evict)
	case changed && len(planned) > 0: // Path A2: status first
		acts = append(acts,
			patch(),
			ClampCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()},
			evict)
	case changed: // growth: room first, then advertise it
		acts = append(acts,
			GrowCgroups{Generation: gen, Capacity: desired.Clone(), Limits: limits()},
			patch())
	case !cond.Same(prev.Condition):
		acts = append(acts, patch())
	}
	switch {
	case cond.Reason == ReasonInfeasible && !cond.Same(prev.Condition):
		acts = append(acts, EmitEvent{Type: EventWarning, Reason: EventCapacityInfeasible, Message: cond.Message})
	case cond.Reason == ReasonAccepted && (prev.Condition.Reason != ReasonAccepted || changed):
		acts = append(acts, EmitEvent{Type: EventNormal, Reason: EventCapacityAccepted, Message: cond.Message})
	}
	if restart {
		acts = append(acts, RestartKubelet{Generation: gen, Capacity: desired.Clone()})
	}
	d.Actions = acts
	d.Next = next
	return d
}

// checkPhysical refuses nonsense hardware readings (KEP risk 8): zero or
// negative capacity, and capacity below the kubelet's reservations, which the
// kubelet itself refuses to start with.
func checkPhysical(p Physical, c resources.List, r Reservations) []string {
	var problems []string
	if v := p.Capacity[resources.CPU]; v <= 0 {
		problems = append(problems, fmt.Sprintf("%s online CPUs", resources.Format(resources.CPU, v)))
	}
	if v := p.Capacity[resources.Memory]; v <= 0 {
		problems = append(problems, fmt.Sprintf("memory %d bytes", v))
	}
	for _, name := range p.Capacity.Names() {
		if v := p.Capacity[name]; v < 0 {
			problems = append(problems, fmt.Sprintf("negative %s %d", name, v))
		}
	}
	if len(problems) > 0 {
		return problems
	}
	for _, name := range []string{resources.CPU, resources.Memory, resources.EphemeralStorage} {
		v, ok := c[name]
		if !ok {
			continue
		}
		if total := r.Total(name, v); v < total {
			problems = append(problems, fmt.Sprintf("%s %s is below the kubelet's reservations (%s)",
				name, resources.Format(name, v), resources.Format(name, total)))
		}
	}
	return problems
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

func withPID(c resources.List, pidMax int64) resources.List {
	if pidMax <= 0 {
		return c
	}
	out := c.Clone()
	out[resources.PID] = pidMax
	return out
}

func union(a, b resources.List) []string {
	u := make(resources.List, len(a)+len(b))
	for k := range a {
		u[k] = 0
	}
	for k := range b {
		u[k] = 0
	}
	return u.Names()
}

func transitions(names []string, from, to resources.List) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s → %s", n, resources.Format(n, from[n]), resources.Format(n, to[n])))
	}
	return strings.Join(parts, ", ")
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// kubeletOutcome is the kubelet restart sub-step's verdict.
type kubeletOutcome struct {
	waiting string // non-empty: not Accepted yet, for this reason
	note    string // Accepted, with this remark
	restart bool
	requeue time.Duration
}

// kubeletStep decides whether the kubelet must be restarted to adopt the
// target and whether to wait for it. A stock kubelet re-reads the machine only
// at start, so a restart helps only when the target is the physical capacity;
// a restart is asked for after the change has settled, at most once per
// RestartInterval, and a restarted kubelet must come back Ready with the
// target before the change is Accepted.
func kubeletStep(in Input, pol Policy, jitter int64, target, phys resources.List, next *State) kubeletOutcome {
	k := in.Kubelet
	if !k.Known {
		next.RestartPending = false
		return kubeletOutcome{}
	}
	const waiting = "restarting the kubelet so that it adopts it; waiting for the Node to come back Ready with it"
	now := in.Now
	last := in.Previous.RestartAt
	pending := in.Previous.RestartPending && !now.Before(last) && now.Sub(last) < pol.RestartTimeout
	if kubeletMatches(k.Capacity, target, jitter) {
		if pending && !k.Ready {
			return kubeletOutcome{waiting: waiting, requeue: pol.RestartTimeout - now.Sub(last)}
		}
		next.RestartPending = false
		return kubeletOutcome{}
	}
	if !sameOn(target, phys, jitter) {
		next.RestartPending = false
		return kubeletOutcome{note: "the kubelet is not restarted: the target is below the physical capacity, which a restarted kubelet would publish; node-resized keeps Node status at the target"}
	}
	if !k.RestartAllowed {
		next.RestartPending = false
		why := k.RestartBlocked
		if why == "" {
			why = "not allowed"
		}
		return kubeletOutcome{note: "the kubelet still runs with its start-up capacity; restart " + why}
	}
	if pending {
		return kubeletOutcome{waiting: waiting, requeue: pol.RestartTimeout - now.Sub(last)}
	}
	next.RestartPending = false
	wait := pol.SettleDelay - now.Sub(next.ChangedAt)
	if !last.IsZero() {
		if w := pol.RestartInterval - now.Sub(last); w > wait {
			wait = w
		}
	}
	if wait > 0 {
		return kubeletOutcome{waiting: "waiting before restarting the kubelet (settle delay, restart rate limit)", requeue: wait}
	}
	next.RestartAt = now
	next.RestartPending = true
	return kubeletOutcome{waiting: waiting, restart: true, requeue: pol.RestartTimeout}
}

// kubeletMatches reports whether the kubelet's own view equals the target on
// every managed resource the view reports (memory within the jitter
// tolerance).
func kubeletMatches(view, target resources.List, jitter int64) bool {
	for name, v := range target {
		w, ok := view[name]
		if !ok || !managed(name) {
			continue
		}
		if name == resources.Memory {
			if absDiff(v, w) >= jitter {
				return false
			}
		} else if v != w {
			return false
		}
	}
	return true
}

// sameOn reports whether the target is the physical capacity on every
// managed resource (memory within the jitter tolerance).
func sameOn(target, phys resources.List, jitter int64) bool {
	for _, name := range union(target, phys) {
		if !managed(name) {
			continue
		}
		a, b := target[name], phys[name]
		if name == resources.Memory {
			if absDiff(a, b) >= jitter {
				return false
			}
		} else if a != b {
			return false
		}
	}
	return true
}
