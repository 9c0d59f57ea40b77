package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/types"
)

// eventFailures fails the first n event creates with err, and counts the
// creates.
type eventFailures struct {
	mu    sync.Mutex
	n     int
	err   error
	tries int
}

func (f *eventFailures) react(k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
	if f.n > 0 {
		f.n--
		return true, nil, f.err
	}
	return false, nil, nil
}

func (f *eventFailures) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries
}

// eventHarness is an event writer over a fake API server, not yet run.
type eventHarness struct {
	w     *eventWriter
	api   *dynamicfake.FakeDynamicClient
	fail  *eventFailures
	m     *metrics.Metrics
	clock *clocktesting.FakeClock
}

func newEventHarness(t *testing.T, fail int, err error) *eventHarness {
	h := &eventHarness{
		api:   fakeAPI(t),
		fail:  &eventFailures{n: fail, err: err},
		m:     metrics.New(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	h.api.PrependReactor("create", "events", h.fail.react)
	opts := Options{NodeName: "worker-1", Metrics: h.m, Clock: h.clock, MinBackoff: testMinBackoff, MaxBackoff: testMaxBackoff}.withDefaults()
	h.w = newEventWriter(h.api, opts)
	return h
}

// run runs the writer until the test ends or stop is called; stop waits
// for it to return.
func (h *eventHarness) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.w.run(ctx); close(done) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the event writer did not stop")
		}
	}
	t.Cleanup(func() { cancel(); <-done })
	return stop
}

func (h *eventHarness) dropped() float64 {
	return testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("event"))
}

// TestRelayEventFields: an event recorded through the relay carries what
// client-go's event recorder wrote: regarding the Node, in the default
// namespace, action Resize, the reporting controller and instance, and
// the event time.
func TestRelayEventFields(t *testing.T) {
	h := startRelay(t, 0)
	h.r.Event(types.EventWarning, types.EventEmergencyCapacityReduced, "cpu 8 → 4")
	h.r.Event(types.EventNormal, types.EventCapacityAccepted, "accepted")
	var evs []string
	kubetest.WaitFor(t, "two events", func() bool { return len(typedEvents(t, h.client)) == 2 })
	hostname, _ := os.Hostname()
	for _, ev := range typedEvents(t, h.client) {
		evs = append(evs, ev.Type+"/"+ev.Reason+"/"+ev.Note)
		want := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "worker-1", UID: "worker-1"}
		if ev.Regarding != want || ev.Related != nil {
			t.Errorf("event regarding %+v related %v, want %+v and none", ev.Regarding, ev.Related, want)
		}
		if ev.Namespace != metav1.NamespaceDefault || !strings.HasPrefix(ev.Name, "worker-1.") {
			t.Errorf("event %s/%s, want default/worker-1.<hex time>", ev.Namespace, ev.Name)
		}
		if ev.Action != "Resize" || ev.ReportingController != "node-resized" || ev.ReportingInstance != "node-resized-"+hostname {
			t.Errorf("event action %q by %q/%q, want Resize by node-resized/node-resized-%s", ev.Action, ev.ReportingController, ev.ReportingInstance, hostname)
		}
		if !ev.EventTime.Time.Equal(h.clock.Now()) || ev.Series != nil {
			t.Errorf("event time %v series %v, want the relay's clock %v and no series", ev.EventTime, ev.Series, h.clock.Now())
		}
	}
	got := strings.Join(evs, ",")
	if !strings.Contains(got, "Warning/EmergencyCapacityReduced/cpu 8 → 4") || !strings.Contains(got, "Normal/CapacityAccepted/accepted") {
		t.Errorf("events %s", got)
	}
}

// TestEventRetriedWhileTheAPIServerIsAway: a transient failure is tried
// again after a jittered, doubling wait; the event lands once.
func TestEventRetriedWhileTheAPIServerIsAway(t *testing.T) {
	h := newEventHarness(t, 2, errors.New("connection refused"))
	h.run(t)
	h.w.record(h.w.event(corev1.EventTypeNormal, "R", "Resize", "n"))
	stepped := int64(0)
	for _, base := range []time.Duration{testMinBackoff, 2 * testMinBackoff} {
		kubetest.WaitFor(t, "a retry wait", func() bool { return h.w.armed.Load() > stepped && h.clock.HasWaiters() })
		stepped = h.w.armed.Load()
		h.clock.Step(base - time.Nanosecond)
		if !h.clock.HasWaiters() {
			t.Fatalf("retried before %v", base)
		}
		h.clock.Step(base/2 + time.Nanosecond)
	}
	kubetest.WaitFor(t, "the event", func() bool { return len(typedEvents(t, h.api)) == 1 })
	if h.fail.count() != 3 || h.dropped() != 0 {
		t.Errorf("%d tries, %v dropped; want 3 and none", h.fail.count(), h.dropped())
	}
}

// TestEventKeptThroughAnOutage: tries that reach no API server (a
// refused connection) do not count towards eventTries, and each waits
// at most a jittered retry.ReconnectCap, even with a backoff whose limit
// is above it: the event lands when the server is back.
func TestEventKeptThroughAnOutage(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "https://10.0.0.1:6443/apis/events.k8s.io/v1/namespaces/default/events",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	if testMaxBackoff <= retry.ReconnectCap*3/2 {
		t.Fatalf("testMaxBackoff %v does not reach above the cap", testMaxBackoff)
	}
	tries := 3 * eventTries
	h := newEventHarness(t, tries, refused)
	h.run(t)
	h.w.record(h.w.event(corev1.EventTypeNormal, "Outage", "Resize", "n"))
	stepped := int64(0)
	for try := 1; try <= tries; try++ {
		kubetest.WaitFor(t, fmt.Sprintf("retry wait %d", try), func() bool { return h.w.armed.Load() > stepped && h.clock.HasWaiters() })
		stepped = h.w.armed.Load()
		h.clock.Step(retry.ReconnectCap * 3 / 2)
	}
	kubetest.WaitFor(t, "the event", func() bool { return len(typedEvents(t, h.api)) == 1 })
	if n := h.fail.count(); n != tries+1 || h.dropped() != 0 {
		t.Errorf("%d tries, %v dropped; want %d and none", n, h.dropped(), tries+1)
	}
}

// TestEventGivenUp: an event the API server refuses for what it is is not
// tried again, and one that keeps failing is given up after eventTries;
// both are counted, and the next event goes through.
func TestEventGivenUp(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", nil)
	h := newEventHarness(t, 1, invalid)
	h.run(t)
	h.w.record(h.w.event(corev1.EventTypeNormal, "Refused", "Resize", "n"))
	h.w.record(h.w.event(corev1.EventTypeNormal, "Kept", "Resize", "n"))
	kubetest.WaitFor(t, "the second event", func() bool { return len(typedEvents(t, h.api)) == 1 })
	if ev := typedEvents(t, h.api)[0]; ev.Reason != "Kept" || h.fail.count() != 2 || h.dropped() != 1 {
		t.Errorf("event %s after %d tries, %v dropped; want Kept after 2, 1 dropped", ev.Reason, h.fail.count(), h.dropped())
	}

	h.fail.mu.Lock()
	h.fail.n, h.fail.err = eventTries, apierrors.NewServiceUnavailable("overloaded")
	h.fail.mu.Unlock()
	h.w.record(h.w.event(corev1.EventTypeNormal, "Lost", "Resize", "n"))
	for try := 1; try < eventTries; try++ {
		kubetest.WaitFor(t, "a retry wait", func() bool { return h.clock.HasWaiters() })
		h.clock.Step(testMaxBackoff * 3 / 2)
	}
	kubetest.WaitFor(t, "the event given up", func() bool { return h.dropped() == 2 })
	if n := h.fail.count(); n != 2+eventTries {
		t.Errorf("%d tries of the failing event, want %d", n-2, eventTries)
	}
	if len(typedEvents(t, h.api)) != 1 {
		t.Errorf("events %v", typedEvents(t, h.api))
	}
}

// TestEventRecordNeverBlocks: with nobody writing, a full queue drops
// the newest event and counts it.
func TestEventRecordNeverBlocks(t *testing.T) {
	h := newEventHarness(t, 0, nil)
	done := make(chan struct{})
	go func() {
		for range eventQueueLength + 3 {
			h.w.record(h.w.event(corev1.EventTypeNormal, "R", "Resize", "n"))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("record blocked")
	}
	if h.dropped() != 3 {
		t.Errorf("%v events dropped, want 3", h.dropped())
	}
}

// TestEventsFlushedWhenTheContextEnds: the events still queued when the
// writer stops are written, those of the same nanosecond under names of
// their own.
func TestEventsFlushedWhenTheContextEnds(t *testing.T) {
	h := newEventHarness(t, 0, nil)
	for range 5 {
		h.w.record(h.w.event(corev1.EventTypeNormal, "R", "Resize", "n"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.w.run(ctx)
	if n := len(typedEvents(t, h.api)); n != 5 || h.dropped() != 0 {
		t.Errorf("%d events written, %v dropped; want 5 and none", n, h.dropped())
	}
}

// TestRunEndsDuringARetry: a writer waiting to try again stops with its
// context, and tries the event once more on its way out.
func TestRunEndsDuringARetry(t *testing.T) {
	h := newEventHarness(t, 1, errors.New("connection refused"))
	stop := h.run(t)
	h.w.record(h.w.event(corev1.EventTypeNormal, "R", "Resize", "n"))
	kubetest.WaitFor(t, "a retry wait", func() bool { return h.clock.HasWaiters() })
	stop()
	if n := len(typedEvents(t, h.api)); n != 1 || h.fail.count() != 2 {
		t.Errorf("%d events after %d tries, want 1 after 2", n, h.fail.count())
	}
}

// An event waits for the status patch under way (statusSettled) before it
// is written: the status, which the scheduler reads, goes to the API
// server first; and at most eventStatusWait.
func TestEventWaitsForTheStatusPatch(t *testing.T) {
	t.Run("settled", func(t *testing.T) {
		h := newEventHarness(t, 0, nil)
		settled := make(chan struct{})
		h.w.statusSettled = func() <-chan struct{} { return settled }
		h.run(t)
		h.w.record(h.w.event("Normal", "CapacityAccepted", "Resize", "capacity cpu=3 applied"))
		kubetest.WaitFor(t, "the event written or waiting", func() bool {
			return h.w.armed.Load() == 1 || h.fail.count() > 0
		})
		if n := h.fail.count(); n != 0 {
			t.Fatalf("%d events written while the status patch was under way, want 0", n)
		}
		close(settled)
		kubetest.WaitFor(t, "the event", func() bool { return len(typedEvents(t, h.api)) == 1 })
	})
	t.Run("bounded", func(t *testing.T) {
		h := newEventHarness(t, 0, nil)
		h.w.statusSettled = func() <-chan struct{} { return make(chan struct{}) } // never
		h.run(t)
		h.w.record(h.w.event("Normal", "CapacityAccepted", "Resize", "capacity cpu=3 applied"))
		kubetest.WaitFor(t, "the event to wait", func() bool { return h.w.armed.Load() == 1 })
		h.clock.Step(eventStatusWait - time.Nanosecond)
		time.Sleep(20 * time.Millisecond)
		if n := h.fail.count(); n != 0 {
			t.Fatalf("%d events written before eventStatusWait, want 0", n)
		}
		h.clock.Step(time.Nanosecond)
		kubetest.WaitFor(t, "the event", func() bool { return len(typedEvents(t, h.api)) == 1 })
	})
}

// The relay's statusSettled: nothing to wait for when no status is
// wanted or the last patch failed (it is being retried); otherwise a
// channel closed when the patch is acknowledged.
func TestStatusSettled(t *testing.T) {
	h := startRelay(t, 0)
	if ch := h.r.statusSettled(); ch != nil {
		t.Fatal("statusSettled with no status wanted: a channel, want nil")
	}
	h.rec.mu.Lock() // the API server holds the patch
	h.r.Publish(status(3, types.ReasonAccepted))
	ch := h.r.statusSettled()
	if ch == nil {
		h.rec.mu.Unlock()
		t.Fatal("statusSettled with a status wanted: nil, want a channel")
	}
	select {
	case <-ch:
		h.rec.mu.Unlock()
		t.Fatal("settled before the patch was acknowledged")
	default:
	}
	h.rec.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("not settled after the patch")
	}
	if h.rec.count() != 1 {
		t.Errorf("%d patches, want 1", h.rec.count())
	}

	f := startRelay(t, 1)
	f.r.Publish(status(3, types.ReasonAccepted))
	kubetest.WaitFor(t, "the failed patch", func() bool { return f.r.Stats().LastError != "" })
	if ch := f.r.statusSettled(); ch != nil {
		t.Error("statusSettled after a failed patch: a channel, want nil")
	}
}
