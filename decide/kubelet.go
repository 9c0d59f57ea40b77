package decide

import (
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
