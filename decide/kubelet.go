package decide

import (
	"fmt"
	"github.com/node-resized/node-resized/types"
	"time"

	"github.com/node-resized/node-resized/resources"
)

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
	// RestartBudget is the most kubelet starts node-resized causes in any
	// RestartBudgetWindow (at most MaxRestartHistory): the restarts Decide
	// asks for, and the starts it is told of (Input.Starts), which it never
	// refuses but counts. Changes made while the budget is spent wait for
	// the next restart it allows, which adopts the latest of them.
	RestartBudget       int           `json:"restartBudget,omitempty"`
	RestartBudgetWindow time.Duration `json:"restartBudgetWindow,omitempty"`
	// TaintWhileStale keeps new pods off the node (the NoSchedule taint
	// TaintKey) from a loss of hardware until the kubelet has adopted the
	// new capacity: see State.Tainted.
	TaintWhileStale bool `json:"taintWhileStale,omitempty"`
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
	if p.RestartBudget <= 0 {
		p.RestartBudget = DefaultRestartBudget
	}
	p.RestartBudget = min(p.RestartBudget, MaxRestartHistory)
	if p.RestartBudgetWindow <= 0 {
		p.RestartBudgetWindow = DefaultRestartBudgetWindow
	}
	return p
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
	// RestartRefused says that what blocks the restart needs an operator
	// (a checkpoint that cannot be made safe, or is in a layout
	// node-resized does not know), not a passing state: the condition's
	// change is then also a KubeletRestartBlocked event.
	RestartRefused bool `json:"restartRefused,omitempty"`
	// Report is the actuator's word on the restart Decide asked for at
	// State.RestartAt; a report about another restart is ignored.
	Report types.RestartReport `json:"report,omitzero"`
}

// kubeletOutcome is the kubelet restart sub-step's verdict.
type kubeletOutcome struct {
	waiting string // non-empty: not Accepted yet, for this reason
	note    string // Accepted, with this remark
	restart bool
	failed  string // non-empty: the restart just failed (a KubeletRestartFailed event)
	refused bool   // a restart is needed and Kubelet.RestartRefused (a KubeletRestartBlocked event when the condition changes)
	requeue time.Duration
	// considered: the outcome depends on Kubelet.RestartAllowed (see
	// Decision.RestartConsidered).
	considered bool
	// waitFor and until: a restart is needed and allowed, and waits for
	// this (RestartWaitSettle, RestartWaitInterval, RestartWaitBudget)
	// until then.
	waitFor string
	until   time.Time
}

// kubeletStep decides whether the kubelet must be restarted to adopt the
// target and whether to wait for it. A stock kubelet re-reads the machine only
// at start, so a restart helps only when the target is the physical capacity;
// a restart is asked for after the change has settled, at most once per
// RestartInterval and at most RestartBudget times in any
// RestartBudgetWindow, and a restarted kubelet must come back Ready with the
// target before the change is Accepted. A change made while a restart waits
// is adopted by that restart (it restarts into the target as it then is);
// a change made while a restart runs is adopted by the next one. A restart that fails (its actuator
// says so, or the kubelet is not back Ready with the target within
// RestartTimeout) is reported once and not tried again until the target
// changes: there is no restart loop.
func kubeletStep(in Input, pol Policy, jitter int64, target, phys resources.List, next *State) kubeletOutcome {
	k := in.Kubelet
	if !k.Known {
		next.RestartPending = false
		return kubeletOutcome{}
	}
	const waiting = "restarting the kubelet so that it adopts it; waiting for the Node to come back Ready with it"
	now, prev := in.Now, in.Previous
	last := prev.RestartAt
	matches := kubeletMatches(k.Capacity, target, jitter)
	agrees := func() kubeletOutcome {
		next.RestartPending = false
		next.RestartFailed, next.RestartFailedAt = "", time.Time{}
		return kubeletOutcome{}
	}
	if prev.RestartPending {
		// A restart is outstanding: it ends when the kubelet is back Ready
		// with the target, when its actuator says it failed, or at the
		// timeout.
		switch {
		case matches && k.Ready:
			return agrees()
		case k.Report.At.Equal(last) && k.Report.Failed != "":
			return restartFailed(next, now, "the kubelet restart failed: "+k.Report.Failed)
		case k.Report.At.Equal(last) && k.Ready && next.ChangedAt.After(last):
			// The target changed while the restart ran, which is done
			// and the kubelet back: whatever machine it read, the
			// change is the next restart's, not this one's failure.
			next.RestartPending = false
			return kubeletStep(withoutPending(in), pol, jitter, target, phys, next)
		case !now.Before(last) && now.Sub(last) < pol.RestartTimeout:
			return kubeletOutcome{waiting: waiting, requeue: pol.RestartTimeout - now.Sub(last)}
		case matches:
			return restartFailed(next, now, fmt.Sprintf("the kubelet did not come back Ready within %s of its restart", pol.RestartTimeout))
		default:
			return restartFailed(next, now, fmt.Sprintf("the kubelet did not come back with the target within %s of its restart (its view: %s)",
				pol.RestartTimeout, viewOf(k.Capacity, target)))
		}
	}
	if matches && (k.Ready || prev.RestartFailed == "") {
		return agrees()
	}
	if prev.RestartFailed != "" && !next.ChangedAt.After(prev.RestartFailedAt) {
		// No restart loop: a failed restart is not tried again until the
		// target changes.
		return kubeletOutcome{waiting: restartFailedMessage(prev.RestartFailed)}
	}
	next.RestartFailed, next.RestartFailedAt = "", time.Time{}
	if !sameOn(target, phys, jitter) {
		return kubeletOutcome{note: "the kubelet is not restarted: the target is below the physical capacity, which a restarted kubelet would publish; node-resized keeps Node status at the target"}
	}
	// From here on the caller's verdict decides.
	if !k.RestartAllowed {
		why := k.RestartBlocked
		if why == "" {
			why = "not allowed"
		}
		return kubeletOutcome{considered: true, refused: k.RestartRefused, note: fmt.Sprintf("the kubelet still runs with its start-up capacity (%s); it needs a restart to adopt the target, which is not done: %s",
			viewOf(k.Capacity, target), why)}
	}
	wait, waitFor := pol.SettleDelay-now.Sub(next.ChangedAt), RestartWaitSettle
	if !last.IsZero() {
		if w := pol.RestartInterval - now.Sub(last); w > wait {
			wait, waitFor = w, RestartWaitInterval
		}
	}
	if free := budgetFreeAt(prev.Restarts, now, pol.RestartBudget, pol.RestartBudgetWindow); !free.IsZero() {
		if w := free.Sub(now); w > wait {
			wait, waitFor = w, RestartWaitBudget
		}
	}
	if wait > 0 {
		msg := "waiting before restarting the kubelet (settle delay, restart rate limit)"
		if waitFor == RestartWaitBudget {
			msg = budgetMessage(pol, now.Add(wait))
		}
		return kubeletOutcome{considered: true, waiting: msg, requeue: wait, waitFor: waitFor, until: now.Add(wait)}
	}
	next.RestartAt = now
	next.RestartPending = true
	next.Restarts = recordRestart(prev.Restarts, now, pol.RestartBudget, pol.RestartBudgetWindow)
	return kubeletOutcome{considered: true, waiting: waiting, restart: true, requeue: pol.RestartTimeout}
}

// withoutPending is in with no restart outstanding, for deciding afresh on
// a restart that is over.
func withoutPending(in Input) Input {
	in.Previous.RestartPending = false
	return in
}

// restartFailed records a failed restart in next: it is not retried until
// the target changes after now.
func restartFailed(next *State, now time.Time, why string) kubeletOutcome {
	next.RestartPending = false
	next.RestartFailed, next.RestartFailedAt = why, now
	return kubeletOutcome{waiting: restartFailedMessage(why), failed: why}
}

// restartFailedMessage is the condition's word on a failed restart: what
// happened and what an operator does about it.
func restartFailedMessage(why string) string {
	return why + "; node-resized does not restart it again for this change: " +
		"see journalctl -u kubelet (a CPU or memory manager checkpoint, the kubelet's configuration), fix the cause, " +
		"then restart the kubelet (systemctl restart kubelet)"
}

// viewOf renders the kubelet's view of the target's resources.
func viewOf(view, target resources.List) string {
	out := resources.List{}
	for name := range target {
		if v, ok := view[name]; ok && managed(name) {
			out[name] = v
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return out.String()
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
		if resources.Jitters(name) {
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
		if resources.Jitters(name) {
			if absDiff(a, b) >= jitter {
				return false
			}
		} else if a != b {
			return false
		}
	}
	return true
}

// kubeletAdopted reports whether the kubelet is seen to have adopted
// target, for lifting the taint set for the loss of the resources lost: it
// is Ready, its own view includes each of lost that target has, and its
// view is the target (the kubelet step's "agrees"). Nothing known is not
// agreement: the taint stays until the kubelet is seen (a kubelet whose view
// differs rewrites status.capacity within about 10 s, and a restart is seen
// through systemd or its next status write). The one exception is a target
// below the hardware, which no restart brings the kubelet to (its view is
// then the relay's to correct, as in Path A2).
func kubeletAdopted(k Kubelet, target, phys resources.List, jitter int64, lost []string) bool {
	if !sameOn(target, phys, jitter) {
		return true
	}
	if !k.Known || !k.Ready {
		return false
	}
	for _, name := range lost {
		_, want := target[name]
		if _, seen := k.Capacity[name]; want && managed(name) && !seen {
			return false
		}
	}
	return kubeletMatches(k.Capacity, target, jitter)
}
