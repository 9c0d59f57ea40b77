package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/metrics"
)

// The event writer: events.k8s.io/v1 Events on the Node, written by a
// worker of their own so that whoever records one never waits for the API
// server. It writes the fields client-go's event recorder writes (name
// <node>.<hex nanoseconds>, namespace default, regarding the Node,
// reportingController node-resized, reportingInstance
// node-resized-<hostname>, eventTime), but does not fold repeated events
// into a series: each event is an object of its own.

const (
	// eventController is the events' reportingController.
	eventController = "node-resized"
	// eventQueueLength bounds the events waiting for the API server; one
	// more is dropped, with a log line.
	eventQueueLength = 256
	// eventTries is how often an event is tried while the API server
	// answers with a failure that may pass (overloaded, a timeout). Tries
	// that reach no API server do not count: an outage delays the events
	// (each waiting at most retry.ReconnectCap between tries) but drops
	// none; eventQueueLength bounds how many wait.
	eventTries = 5
	// eventFlushTimeout bounds the writing of the events still queued
	// when the writer's context ends.
	eventFlushTimeout = 3 * time.Second
	// eventStatusWait bounds how long an event waits for the Node status
	// patch that was wanted when its turn came (statusSettled).
	eventStatusWait = 5 * time.Second
)

// eventWriter writes events on one Node. It is safe for concurrent use;
// run must be called once.
type eventWriter struct {
	events   dynamic.NamespaceableResourceInterface
	node     string
	instance string // the reportingInstance
	log      *slog.Logger
	m        *metrics.Metrics
	clock    clock.Clock
	// minBackoff and maxBackoff bound the wait before another try.
	minBackoff, maxBackoff time.Duration
	queue                  chan *eventsv1.Event
	// armed counts the retry waits set on clock, so that tests step a
	// fake clock only once the wait they mean is set.
	armed atomic.Int64
	// statusSettled, when set, returns a channel closed once the Node
	// status being patched has gone out, nil when none is: an event
	// waits for it, at most eventStatusWait.
	statusSettled func() <-chan struct{}

	mu   sync.Mutex // guards last
	last int64      // the Unix nanoseconds in the newest event's name
}

// newEventWriter returns a writer of opts.NodeName's events through
// client; opts has its defaults.
func newEventWriter(client dynamic.Interface, opts Options) *eventWriter {
	hostname, _ := os.Hostname()
	return &eventWriter{
		events:     client.Resource(objects.Events),
		node:       opts.NodeName,
		instance:   eventController + "-" + hostname,
		log:        opts.Logger,
		m:          opts.Metrics,
		clock:      opts.Clock,
		minBackoff: opts.MinBackoff,
		maxBackoff: opts.MaxBackoff,
		queue:      make(chan *eventsv1.Event, eventQueueLength),
	}
}

// event is an event on the Node, as client-go's event recorder makes it.
func (w *eventWriter) event(eventType, reason, action, note string) *eventsv1.Event {
	now := w.clock.Now()
	w.mu.Lock()
	// Two events in the same nanosecond (a fake clock, a coarse one)
	// would have the same name; the second would be refused.
	nano := max(now.UnixNano(), w.last+1)
	w.last = nano
	w.mu.Unlock()
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", w.node, nano),
			Namespace: metav1.NamespaceDefault, // where the event recorder puts a Node's events
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: eventController,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		// The recorder's reference to the Node: its name stands in for
		// its UID, which the daemon does not know.
		Regarding: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: w.node, UID: types.UID(w.node)},
		Note:      note,
		Type:      eventType,
	}
}

// record queues ev for the worker. It never blocks: when the queue is
// full the event is dropped and said so in the log.
func (w *eventWriter) record(ev *eventsv1.Event) {
	select {
	case w.queue <- ev:
	default:
		w.dropped(ev, errors.New("too many events waiting for the API server"))
	}
}

// create writes ev once and waits for the API server's answer.
func (w *eventWriter) create(ctx context.Context, ev *eventsv1.Event) error {
	u, err := objects.ToUnstructured(ev, eventsv1.SchemeGroupVersion.WithKind("Event"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := w.events.Namespace(ev.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create event %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return nil
}

// run writes the queued events, in order, until ctx is done; then it
// writes those still queued, each tried once, within eventFlushTimeout,
// and returns.
func (w *eventWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			w.flush(ctx, nil)
			return
		case ev := <-w.queue:
			if !w.afterStatus(ctx) || !w.write(ctx, ev) {
				w.flush(ctx, ev)
				return
			}
		}
	}
}

// afterStatus waits, at most eventStatusWait, for the Node status patch
// under way to be acknowledged (or to fail). It returns false when ctx
// ended first.
func (w *eventWriter) afterStatus(ctx context.Context) bool {
	if w.statusSettled == nil {
		return true
	}
	settled := w.statusSettled()
	if settled == nil {
		return true
	}
	t := w.clock.NewTimer(eventStatusWait)
	w.armed.Add(1)
	defer t.Stop()
	select {
	case <-settled:
	case <-t.C():
	case <-ctx.Done():
		return false
	}
	return true
}

// write writes ev, trying again with jittered exponential backoff while
// the API server fails in a way that may pass, at most eventTries times
// that it answered (and for as long as it is unreachable);
// other refusals drop the event. It returns false, with ev not written,
// when ctx ended first.
func (w *eventWriter) write(ctx context.Context, ev *eventsv1.Event) bool {
	backoff := retry.Backoff(w.minBackoff, w.maxBackoff)
	for try := 1; ; try++ {
		err := w.create(ctx, ev)
		if retry.Unreachable(err) {
			try-- // the API server never saw it
		}
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return true // already there: an earlier try got through
		case ctx.Err() != nil:
			return false
		case !transient(err) || try == eventTries:
			w.dropped(ev, err)
			return true
		}
		delay := retry.After(&backoff, err)
		w.log.Debug("record event; will retry", "reason", ev.Reason, "err", err, "in", delay)
		t := w.clock.NewTimer(delay)
		w.armed.Add(1)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// flush writes first (when not nil) and the events still queued, each
// tried once, until eventFlushTimeout has passed; what is left is dropped.
func (w *eventWriter) flush(ctx context.Context, first *eventsv1.Event) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventFlushTimeout)
	defer cancel()
	ev := first
	for {
		if ev == nil {
			select {
			case ev = <-w.queue:
			default:
				return
			}
		}
		if err := w.create(ctx, ev); err != nil && !apierrors.IsAlreadyExists(err) {
			w.dropped(ev, err)
		}
		ev = nil
	}
}

// dropped says that ev will not be written.
func (w *eventWriter) dropped(ev *eventsv1.Event, err error) {
	w.m.ResizeErrors.WithLabelValues("event").Inc()
	w.log.Warn("event dropped", "node", w.node, "type", ev.Type, "reason", ev.Reason, "note", ev.Note, "err", err)
}

// transient reports whether err may pass if the call is made again: the
// API server was not reached or did not answer in time, or it was
// overloaded or failed inside. A refusal of the event itself (invalid,
// forbidden) will not.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer from the API server
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}
