package decide

import (
	"fmt"
	"github.com/node-resized/node-resized/types"
	"strings"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// DefaultJitterMemory is the memory drift that is not a change: 100Mi.
const DefaultJitterMemory int64 = 100 << 20

// Input is everything Decide looks at. Decide does not modify it: an Input
// may be shared between goroutines that only read it.
type Input struct {
	Physical     Physical
	Configured   types.Configured
	Reservations Reservations
	// JitterMemory is the memory drift that is not a change; 0 means
	// DefaultJitterMemory.
	JitterMemory int64
	// Previous is the Next of the previous decision (zero on the first pass).
	Previous State
	// Now is the current time; Decide reads no clock.
	Now      time.Time
	Eviction types.EvictionReport
	Kubelet  Kubelet
	Policy   Policy
	// Enforced are the kubepods limits as read back from the cgroup when
	// the daemon starts (memory.max, cpu.weight; a zero field is unknown).
	// Only the first pass (Previous.Applied nil) looks at them: where they
	// stand for more than the hardware has now, the machine shrank while
	// node-resized was not running, and the pass clamps (Path B). See
	// EnforcedCapacity.
	Enforced CgroupLimits
	// Reassert says that the caller would write the kubepods limits of
	// Previous.Applied again where they do not hold: it sets it on the
	// first pass of a daemon that resumed from its state, with Enforced
	// read just before. The pass then starts with a ReassertCgroups,
	// unless it writes new limits anyway. See reassert.
	Reassert bool
	// Starts are the kubelet starts node-resized caused besides the
	// restarts Decide asks for: the start again after a rollback of a
	// checkpoint the kubelet refused, a recovery's start of a kubelet
	// node-resized had stopped. Each enters the restart history
	// (State.Restarts) before the pass decides, and counts against the
	// restart budget as a restart does; a time the history holds already
	// is not counted again, so passing a start twice is harmless. A start
	// is never refused: it has happened.
	Starts []time.Time
	// ReservedCPUs are the CPU ids of the kubelet's reservedSystemCPUs
	// (none when it reserves no CPU by id). While one is not among
	// Physical.OnlineCPUs, the kubelet is not restarted and the condition
	// is EmergencyReduced, naming it.
	ReservedCPUs []int
	// Release is the planned release's input: whether the node allows it,
	// the memory block size and the releaser's word (see ReleaseInput).
	Release ReleaseInput
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
	// actions. While Next.Checking it is the shrink's InProgress, which is
	// published only once the evictor has looked at the pods (and not at
	// all when they fit): Next.Condition is the one published.
	Condition types.Condition
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
	// RestartConsidered says whether the pass looked at the caller's
	// restart verdict, Kubelet.RestartAllowed and RestartBlocked. It does
	// only where a restart could be asked for: no shrink in flight, a
	// capacity that is not Infeasible, no reserved CPU offline, and a
	// known kubelet that disagrees with a target that is the physical
	// capacity, with no restart outstanding or failed for it. While it is
	// false the decision is the same whatever the verdict says, so a
	// caller whose verdict costs file reads (the kubelet's checkpoints)
	// may decide without it first and read only when this is true.
	RestartConsidered bool
	// RestartWaiting says what a kubelet restart that is needed and
	// allowed waits for (RestartWaitSettle, RestartWaitInterval,
	// RestartWaitBudget; empty when none waits), and RestartNotBefore
	// until when.
	RestartWaiting   string
	RestartNotBefore time.Time
	// Err reports input that was refused (*RejectedError): a nonsense
	// physical reading, which leaves everything as it was, or a malformed
	// or unsupported configured capacity, which is Infeasible. It is set on
	// every pass while the input stays refused.
	Err error
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
	return resources.Published(name)
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
// value changes. The status of either shrink waits for the evictor's first
// look at the pods: InProgress only where some have to go. Calling Decide again with the same input and Previous set to
// the returned Next yields no actions (but for the ReassertCgroups that
// Input.Reassert and a failed write of the limits due for retry ask for).
//
// Decide is a pure function: safe for concurrent use.
func Decide(in Input) Decision {
	in.Previous = in.Previous.WithStarts(in.Starts, in.Now, in.Policy)
	p := pass{in: in, pol: in.Policy.withDefaults(), jitter: in.JitterMemory, prev: in.Previous.clone()}
	if p.jitter <= 0 {
		p.jitter = DefaultJitterMemory
	}
	raw := in.Physical.published()
	if problems := checkPhysical(in.Physical, raw, in.Reservations); len(problems) > 0 {
		return p.refusePhysical(raw, problems)
	}
	p.phys, p.rebased = kubeletReading(steadyMemory(raw, p.prev.Physical, p.jitter), raw, in.Kubelet, p.jitter)
	p.ev = evaluate(in.Configured, p.phys, in.Physical.SwapActive, in.Reservations, in.ReservedCPUs)
	if p.releaseRequested() && in.Release.Allowed && !p.ev.rejected() {
		p.ev.releaseTargets(p.phys, in.Release.BlockSize, in.Reservations)
	}

	pl := p.choosePath()
	next := p.nextState(pl)
	cond, ks, rs := p.condition(pl, &next)
	if !next.Checking {
		// While Checking, the shrink's InProgress is not published yet
		// (see shrinkCondition): the condition last published stays.
		next.Condition = cond
	}
	next.Tainted, next.TaintFor = p.taint(pl, next)
	alloc := Allocatable(pl.desired, in.Reservations)
	acts := p.actions(pl, next, alloc, ks)
	acts = append(acts, p.releaseActions(rs, next, pl.desired)...)
	re, retry := p.reassert(pl, next, acts)
	if re != nil {
		acts = append([]Action{re}, acts...)
	}
	return Decision{
		Target:            pl.desired.Clone(),
		Allocatable:       alloc,
		Physical:          p.phys,
		Condition:         cond,
		Actions:           acts,
		Next:              next,
		RequeueAfter:      minPositive(ks.requeue, retry),
		Ignored:           p.ev.ignored,
		RestartConsidered: ks.considered,
		RestartWaiting:    ks.waitFor,
		RestartNotBefore:  ks.until,
		Err:               configuredError(p.ev),
	}
}

// pass is what one call of Decide has established before it chooses a
// path: its input with the defaults applied and, once the physical reading
// is accepted, the physical and the configured capacity as judged. The
// steps that follow read it and do not modify it.
type pass struct {
	in     Input
	pol    Policy
	jitter int64
	prev   State          // a copy of in.Previous that the pass may keep
	phys   resources.List // the physical capacity, memory held within the jitter
	ev     evaluation     // the configured capacity judged against phys
	// converged names the resources the first pass found enforced above
	// the hardware (see firstBaseline).
	converged []string
	// rebased names the resources whose physical value is the kubelet's
	// own reading, within the jitter of the one held (kubeletReading).
	rebased []string
}

// refusePhysical is the decision on a nonsense physical reading: everything
// stays as it was, and the reading is reported.
func (p pass) refusePhysical(raw resources.List, problems []string) Decision {
	d := Decision{
		Target:    p.prev.Applied.Clone(),
		Physical:  raw,
		Condition: p.prev.Condition,
		Next:      p.prev,
		Err:       &RejectedError{What: "physical capacity", Problems: problems},
	}
	if p.prev.Applied != nil {
		d.Allocatable = Allocatable(p.prev.Applied, p.in.Reservations)
	}
	return d
}

// steadyMemory returns the physical capacity with memory (every resource
// that jitters) held at its previous value while it drifts by less than
// the jitter tolerance: such a drift is not a change.
func steadyMemory(raw, prevPhys resources.List, jitter int64) resources.List {
	phys := raw.Clone()
	for name := range resources.Names(resources.Jitters) {
		if pm, ok := prevPhys[name]; ok && absDiff(phys[name], pm) < jitter {
			phys[name] = pm
		}
	}
	return phys
}

// kubeletReading returns phys with memory (every resource that jitters)
// at the running kubelet's own reading where that reading is within the
// jitter of both the value held and the measurement, and the names it
// moved. The kubelet read the same hardware when it started and publishes
// that reading at each status update: a held value beside it would be a
// second number for the same memory, and the Node would go back and forth
// between the two while the kubepods limits were written over the
// kubelet's own. (A sub-block virtio-mem step seen by the MemTotal watch
// in two parts, the second under the jitter, left the held value 18Mi
// above the kubelet's after its restart.) The reading of a kubelet that is
// not Ready, or that started before a change larger than the jitter, is
// not taken.
func kubeletReading(phys, raw resources.List, k Kubelet, jitter int64) (resources.List, []string) {
	if !k.Known || !k.Ready {
		return phys, nil
	}
	var moved []string
	for name := range resources.Names(resources.Jitters) {
		v, ok := k.Capacity[name]
		held, okh := phys[name]
		if !ok || !okh || v <= 0 || v == held || absDiff(v, raw[name]) >= jitter || absDiff(v, held) >= jitter {
			continue
		}
		if moved == nil {
			phys = phys.Clone()
		}
		phys[name] = v
		moved = append(moved, name)
	}
	return phys, moved
}

// configuredError is the Decision.Err for a configured capacity refused
// outright, nil otherwise.
func configuredError(ev evaluation) error {
	if !ev.rejected() {
		return nil
	}
	var problems []string
	problems = append(problems, ev.malformed...)
	if ev.swap {
		problems = append(problems, "memory is configured but swap is active: swap-enabled nodes are not supported")
	}
	problems = append(problems, ev.below...)
	return &RejectedError{What: "configured capacity", Problems: problems}
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
	for name := range resources.Names(resources.Reservable) {
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
