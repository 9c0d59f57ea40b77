package retry

import (
	"errors"
	"io"
	"math"
	"net"
	"syscall"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
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

// ReconnectCap bounds the retry delay after a call that got no answer
// from an API server (Unreachable): while the server is away, each try
// costs it nothing, and the sooner a node tries again once it is back,
// the sooner the node is right. The delay still doubles up to it from the
// backoff's first delay and is jittered by Jitter, so that a fleet's
// retries stay out of step: after an outage the nodes come back spread
// over ReconnectCap·(1+Jitter), not in the same instant, and not tens of
// seconds late because their backoff grew during it.
const ReconnectCap = 2 * time.Second

// Unreachable reports whether err says that the call got no answer from
// an API server: no connection could be made (refused, no route, the
// dial timed out), or it was reset or ended early. An API server that
// answers, even with an error or "too many requests", is not unreachable,
// and neither is one that took a request and did not answer in time (it
// may be overloaded): their errors keep the full backoff.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// After steps b once for a call that failed with err and returns the
// delay before the next try: b's own, but no more than a jittered
// ReconnectCap when the API server was unreachable.
func After(b *wait.Backoff, err error) time.Duration {
	d := b.Step()
	if Unreachable(err) {
		d = min(d, wait.Jitter(ReconnectCap, Jitter))
	}
	return d
}
