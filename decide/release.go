package decide

import (
	"fmt"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// ReleaseInput is what the caller says of the planned release: whether the node
// allows it, the memory block size, and the releaser's word. A plain value,
// safe for concurrent reads.
//
// A planned release carries a configured capacity below the hardware out
// in the kernel: once the pods that no longer fit are evicted (Path A2),
// the CPUs and memory blocks above the target are taken offline by
// node-resized itself, and the kubelet is restarted onto the smaller
// machine, so that it publishes the target itself. It takes place only
// where the node allows it (Allowed, the daemon's --release) and the
// request asks for it (types.Configured.Release): neither an operator's
// flag nor a request alone takes hardware offline.
type ReleaseInput struct {
	// Allowed says that the node allows planned releases.
	Allowed bool `json:"allowed,omitempty"`
	// BlockSize is the kernel's memory block size in bytes, the unit in
	// which memory is released; 0 when memory cannot be released (no
	// memory hotplug), and memory is then held as without release.
	BlockSize int64 `json:"blockSize,omitempty"`
	// Held says that the releaser holds CPUs or memory blocks that it took
	// offline and that are still present: what a give back brings online.
	Held bool `json:"held,omitempty"`
	// Summary says what is held released and what of it may be unplugged,
	// for the condition's message.
	Summary string `json:"summary,omitempty"`
	// Report is the releaser's word on the release or give back of
	// State.ReleaseGeneration; a report about another one is ignored.
	Report types.ReleaseReport `json:"report,omitzero"`
	// Resumed says that this is the first pass of a daemon that resumed
	// from its state: a release or give back in flight is asked for
	// again, and the releaser picks up from its record.
	Resumed bool `json:"resumed,omitempty"`
}

// releaseOutcome is the release step's verdict for one pass.
type releaseOutcome struct {
	enabled  bool // the node allows it and the request asks for it
	start    bool // a Release action goes out with this pass
	giveBack bool // a GiveBack action goes out with this pass
	resend   bool // a release or give back in flight is asked for again (the daemon resumed)
	done     bool // the release of this request just ended (a CapacityReleased event)
	refused  bool // the request asks for it and the node does not allow it
}

// releaseRequested reports whether the request asks for a planned release.
func (p pass) releaseRequested() bool {
	return p.in.Configured.Present && p.in.Configured.Release
}

// releaseTargets makes a request's cpu and memory values ones a release can
// reach, when the release applies: whole CPUs (rounded down), and memory
// at or just below the configured value, the physical memory less a whole
// number of memory blocks. A value above the hardware by less than a block
// is the hardware's (a release left it there); one above it by a block or
// more is over, as without release. The rounding does not move while
// blocks are taken offline: physical less k blocks rounds to the same
// value.
func (e *evaluation) releaseTargets(phys resources.List, blockSize int64, r Reservations) {
	if v, ok := e.values[resources.CPU]; ok && v < phys[resources.CPU] && v >= 1000 {
		e.values[resources.CPU] = v / 1000 * 1000
	}
	if v, ok := e.values[resources.Memory]; ok && blockSize > 0 {
		p := phys[resources.Memory]
		switch {
		case v < p:
			k := (p - v + blockSize - 1) / blockSize
			e.values[resources.Memory] = p - k*blockSize
		case v < p+blockSize:
			e.values[resources.Memory] = p
		}
	}
	e.over = e.over[:0]
	for _, name := range e.values.Names() {
		if e.values[name] > phys[name] {
			e.over = append(e.over, name)
		}
	}
	for name := range resources.Names(resources.QoSCompute) {
		v, ok := e.values[name]
		if !ok || !resources.Reservable(name) {
			continue
		}
		if total := r.Total(name, v); v < total && !e.belowNames(name) {
			e.below = append(e.below, fmt.Sprintf("%s %s after the release's rounding < %s (systemReserved + kubeReserved + evictionHard)",
				name, resources.Format(name, v), resources.Format(name, total)))
		}
	}
}

// belowNames reports whether a below-the-reservations problem names name.
func (e evaluation) belowNames(name string) bool {
	for _, b := range e.below {
		if len(b) > len(name) && b[:len(name)+1] == name+" " {
			return true
		}
	}
	return false
}

// surplus reports whether the hardware holds a CPU or a memory block above
// target that a release could take offline.
func surplus(target, phys resources.List, blockSize int64) bool {
	if t, ok := target[resources.CPU]; ok && phys[resources.CPU]-t >= 1000 {
		return true
	}
	if t, ok := target[resources.Memory]; ok && blockSize > 0 && phys[resources.Memory]-t >= blockSize {
		return true
	}
	return false
}

// releaseStep follows the planned release: it takes the releaser's report,
// ends a release whose request is gone, and decides whether a release or a
// give back starts with this pass. It records its bookkeeping in next.
// Called once the path is chosen and the shrink in flight (if any) is
// known: a release starts only once the evictions of a planned shrink are
// done (the kubepods limits are at the target then) and only for an
// Accepted request.
func (p pass) releaseStep(pl plan, next *State) releaseOutcome {
	rel := p.in.Release
	out := releaseOutcome{enabled: p.releaseRequested() && rel.Allowed && !p.ev.rejected(), refused: p.releaseRequested() && !rel.Allowed}
	rep := rel.Report
	if (next.Releasing || next.GivingBack) && rep.Generation == next.ReleaseGeneration && rep.Done && rep.GiveBack == next.GivingBack {
		if next.Releasing {
			next.ReleaseShort = rep.Short
			next.ReleasedPhysical = p.phys.Clone()
			out.done = true
		}
		next.Releasing, next.GivingBack = false, false
	}
	if next.Releasing && (!out.enabled || next.ReleaseSpec != p.ev.key) {
		// The request changed under the release: it stops where it is,
		// and what it took offline is given back below where the new
		// request wants more.
		next.Releasing = false
	}
	if next.ReleaseSpec != p.ev.key {
		next.ReleaseShort, next.ReleasedPhysical = "", nil
	}
	resumed := rel.Resumed
	switch {
	case (next.Releasing || next.GivingBack) && resumed:
		out.resend = true
	case next.Releasing || next.GivingBack:
	case rel.Held && (!out.enabled || len(p.ev.over) > 0) && !(next.GaveBack && next.GiveBackSpec == p.ev.key):
		// Not released any more, or a request for more than the smaller
		// machine has: bring back what was released (once per request).
		next.ReleaseGeneration++
		next.GivingBack, next.GaveBack, next.GiveBackSpec = true, true, p.ev.key
		out.giveBack = true
	case out.enabled && pl.mode == types.ReasonAccepted && !next.Evicting && surplus(pl.desired, p.phys, rel.BlockSize) &&
		(next.ReleaseSpec != p.ev.key || next.ReleasedPhysical == nil || !sameOn(next.ReleasedPhysical, p.phys, p.jitter)):
		// Evictions done: take the surplus offline. A release that fell
		// short is not tried again until the request or the hardware
		// changes.
		next.ReleaseGeneration++
		next.Releasing, next.ReleaseSpec, next.ReleaseShort, next.ReleasedPhysical = true, p.ev.key, "", nil
		next.GaveBack, next.GiveBackSpec = false, ""
		out.start = true
	}
	return out
}

// releaseActions are the release step's actions of this pass.
func (p pass) releaseActions(rs releaseOutcome, next State, target resources.List) []Action {
	var acts []Action
	switch {
	case rs.start || (rs.resend && next.Releasing):
		c := resources.List{}
		for name := range resources.Names(resources.QoSCompute) {
			if v, ok := target[name]; ok {
				c[name] = v
			}
		}
		acts = append(acts, Release{Generation: next.ReleaseGeneration, Capacity: c, Spec: next.ReleaseSpec})
	case rs.giveBack || (rs.resend && next.GivingBack):
		acts = append(acts, GiveBack{Generation: next.ReleaseGeneration})
	}
	if rs.done {
		msg := "planned release done"
		if s := p.in.Release.Summary; s != "" {
			msg += ": " + s
		}
		if next.ReleaseShort != "" {
			msg += "; not released: " + next.ReleaseShort
		}
		acts = append(acts, EmitEvent{Type: types.EventNormal, Reason: types.EventCapacityReleased, Message: msg})
	}
	return acts
}

// releaseNote is what the condition's message says of the release, after
// the capacity: empty when none is asked for or held.
func (p pass) releaseNote(rs releaseOutcome, next State) string {
	rel := p.in.Release
	switch {
	case rs.refused:
		return "a planned release is asked for, but this node does not allow it (node-resized --release): the capacity is held as without release"
	case next.Releasing:
		msg := "releasing the CPUs and memory above it (planned release)"
		if rel.Summary != "" {
			msg += "; so far: " + rel.Summary
		}
		return msg
	case next.GivingBack:
		return "giving back the CPUs and memory node-resized released"
	}
	var note string
	if rel.Held && rel.Summary != "" {
		note = "released: " + rel.Summary
	}
	if rs.enabled && next.ReleaseShort != "" && next.ReleaseSpec == p.ev.key {
		if note != "" {
			note += "; "
		}
		note += "release incomplete: " + next.ReleaseShort + "; the rest is held as without release"
	}
	return note
}
