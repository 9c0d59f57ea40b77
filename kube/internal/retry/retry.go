package retry

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Jitter stretches each retry delay after a failed API call by a random
// factor between 1 and 1+Jitter, so that the nodes of a fleet, which all
// saw the same API server outage begin and end, spread their retries
// instead of sending them in lockstep.
const Jitter = 0.5

// PollJitter stretches steady waits (a PodDisruptionBudget's refusal, pods
// terminating) less: the API server is answering, the wait only needs to
// be out of step with the other nodes'.
const PollJitter = 0.2

// Backoff is the backoff after failed API calls: first, then doubling up
// to limit, each delay jittered by Jitter. Step it once per failure;
// start a new one after a success.
func Backoff(first, limit time.Duration) wait.Backoff {
	return wait.Backoff{
		Duration: first,
		Factor:   2,
		Jitter:   Jitter,
		Steps:    math.MaxInt32,
		Cap:      limit,
	}
}

// Poll is a steady wait of about every, jittered by PollJitter.
func Poll(every time.Duration) wait.Backoff {
	return wait.Backoff{Duration: every, Jitter: PollJitter}
}

// C is t's channel, or nil (never ready) when there is no timer.
func C(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// Stop stops t if there is one.
func Stop(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}
