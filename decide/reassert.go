package decide

import (
	"fmt"
	"strings"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// Re-asserting the applied limits. The state says what is applied, not
// that the kubepods limits still hold it: they may have been rewritten
// while node-resized was not running (a kubelet restart writes its own, an
// operator's set-property), and a write of them may have failed. The
// first pass of a daemon that resumed from its state is given the limits
// as read (Input.Enforced, Input.Reassert) and writes the applied target's
// again; a failed write is retried with a backoff until one lands.

// memoryGranule is the most the kernel rounds memory.max down by: it
// keeps it in whole pages, and no page size Linux supports is larger.
const memoryGranule = 64 << 10

// reassert returns the ReassertCgroups the pass starts with, or nil, and
// when to decide again for a retry not yet due (0: none). There is none
// before anything is applied (the first pass of a daemon with no state
// converges instead, see firstBaseline) and none when the pass writes
// new limits anyway.
func (p pass) reassert(pl plan, next State, acts []Action) (Action, time.Duration) {
	if p.prev.Applied == nil || next.Applied == nil || next.ClampDue {
		// Nothing applied yet; or a planned shrink's clamp waits for
		// its status (Path A2), and writes the limits then.
		return nil, 0
	}
	for _, a := range acts {
		if k := a.Kind(); k == KindClampCgroups || k == KindGrowCgroups {
			return nil, 0
		}
	}
	want := KubepodsLimits(withPID(pl.desired, p.in.Physical.Capacity[resources.PID]), p.in.Reservations)
	act := ReassertCgroups{Generation: next.Generation, Capacity: pl.desired.Clone(), Limits: want}
	switch {
	case p.in.Reassert:
		act.Differ = LimitsDiffer(p.in.Enforced, want)
		act.Reason = "node-resized started"
		if p.prev.LimitsFailed != "" {
			act.Reason += "; the last write failed: " + p.prev.LimitsFailed
		}
		return act, 0
	case len(pl.rebased) > 0:
		act.Reason = "the kubelet's own reading of " + strings.Join(pl.rebased, ", ") + " (within the jitter of the one held): " + pl.desired.String()
		return act, 0
	case p.prev.LimitsFailed != "":
		due := p.prev.LimitsFailedAt.Add(LimitsRetryAfter(p.prev.LimitsFailures))
		if wait := due.Sub(p.in.Now); wait > 0 {
			return nil, wait
		}
		act.Reason = fmt.Sprintf("retry %d: %s", p.prev.LimitsFailures, p.prev.LimitsFailed)
		return act, 0
	}
	return nil, 0
}

// LimitsDiffer names the limits read (got, a zero field unknown) that do
// not hold want, with both values: "memory.max 8589934592 (want
// 7516192768)". memory.max holds when it is want rounded down to a page.
// A pure function.
func LimitsDiffer(got, want CgroupLimits) []string {
	var out []string
	if g, w := got.MemoryMax, want.MemoryMax; g > 0 && w > 0 && (g > w || w-g >= memoryGranule) {
		out = append(out, fmt.Sprintf("memory.max %d (want %d)", g, w))
	}
	if g, w := got.CPUWeight, min(want.CPUWeight, MaxWeight); g > 0 && w > 0 && g != w {
		out = append(out, fmt.Sprintf("cpu.weight %d (want %d)", g, w))
	}
	return out
}

// minPositive is the smaller of two durations, a non-positive one counting
// as none.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
