package kube

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// retryJitter stretches each retry delay after a failed API call by a
// random factor between 1 and 1+retryJitter, so that the nodes of a fleet,
// which all saw the same API server outage begin and end, spread their
// retries instead of sending them in lockstep.
const retryJitter = 0.5

// pollJitter stretches the evictor's steady waits (a PodDisruptionBudget's
// refusal, pods terminating) less: the API server is answering, the wait
// only needs to be out of step with the other nodes'.
const pollJitter = 0.2

// retryBackoff is the backoff after failed API calls: first, then doubling
// up to limit, each delay jittered by retryJitter. Step it once per
// failure; start a new one after a success.
func retryBackoff(first, limit time.Duration) wait.Backoff {
	return wait.Backoff{
		Duration: first,
		Factor:   2,
		Jitter:   retryJitter,
		Steps:    math.MaxInt32,
		Cap:      limit,
	}
}

// pollBackoff is a steady, jittered wait of about every.
func pollBackoff(every time.Duration) wait.Backoff {
	return wait.Backoff{Duration: every, Jitter: pollJitter}
}

// timerC is t's channel, or nil (never ready) when there is no timer.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// stopTimer stops t if there is one.
func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}
