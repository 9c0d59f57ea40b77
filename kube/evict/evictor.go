package evict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/node-resized/node-resized/resources"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/types"
)

// DefaultRetryInterval is about how long the evictor waits before
// it tries again after a PodDisruptionBudget refused an eviction, and
// between checks while evicted pods terminate; it is also the first wait
// after a failed API call.
const DefaultRetryInterval = 5 * time.Second

// DefaultMaxRetryInterval caps the evictor's backoff while API
// calls keep failing.
const DefaultMaxRetryInterval = time.Minute

// WorkingSetFunc reads a pod's memory working set in bytes from its own
// cgroup; qos is "guaranteed", "burstable" or "besteffort".
type WorkingSetFunc func(podUID, qos string) (int64, error)

// Options configure the evictor.
type Options struct {
	// NodeName is the Node whose pods are evicted.
	NodeName string
	// WorkingSet reads a pod's working set. When nil the working sets are
	// unknown: pods are ranked by priority and request only, and each pod
	// counts its request against allocatable.
	WorkingSet WorkingSetFunc
	// ExclusiveCPUs returns the exclusive CPU ids of each pod (by pod UID)
	// from the CPU manager's checkpoint. Nil: no pod has exclusive CPUs.
	ExclusiveCPUs func() (map[string][]int, error)
	// RetryInterval is the wait before retrying after a PodDisruptionBudget
	// refused an eviction, and between checks while evicted pods terminate
	// or pods that may not be evicted do not fit, each wait stretched by a
	// random factor of up to 1.2 (default DefaultRetryInterval).
	// After a failed API call the wait starts at RetryInterval and doubles
	// with each failure in a row up to MaxRetryInterval, each stretched by
	// up to 1.5, so that a fleet spreads its retries after an API server
	// outage; while the API server is unreachable (no connection, or one
	// reset) the wait is at most retry.ReconnectCap (2s, jittered), so that
	// the evictions resume soon after it is back.
	RetryInterval time.Duration
	// MaxRetryInterval caps the backoff after failed API calls (default
	// DefaultMaxRetryInterval).
	MaxRetryInterval time.Duration
	// Clock is the evictor's clock (default the real one).
	Clock  clock.Clock
	Logger *slog.Logger
	// Metrics counts failed API calls as
	// resize_errors_total{subsystem="eviction"}.
	Metrics *metrics.Metrics
	// Event, when set, records a Node event for each eviction (kube.Relay.Event).
	Event func(eventType types.EventType, reason, message string)
}

// Evictor brings the pods of one Node within the allocatable of a
// decide.Evict: it lists the node's pods, ranks them with Rank and evicts
// the victims, in order, through the Eviction API, so that
// PodDisruptionBudgets are honoured. It is safe for concurrent use; Run
// must be called once.
//
// Each Start carries a generation. A newer generation supersedes the work
// on an older one at once: the pass in flight is cancelled, and no report
// is sent for the older generation any more. Progress is reported for the
// newest generation only: Blocked while a PodDisruptionBudget (or a failing
// API) stops the next eviction, while pods that may not be evicted still do
// not fit, or while an evicted pod stays terminating long after its grace
// period; Done once the remaining pods fit and every pod the evictor
// evicted is gone (deleted, or in a terminal phase).
//
// A PodDisruptionBudget is never bypassed: the eviction is retried after
// RetryInterval, and the victims further down the ranking wait behind it,
// so that the kubelet's order is kept.
type Evictor struct {
	client dynamic.Interface
	opts   Options
	log    *slog.Logger
	m      *metrics.Metrics
	clock  clock.Clock
	// armed counts the waits Run has set on clock, so that tests step a
	// fake clock only once the wait they mean is set.
	armed atomic.Int64
	wake  chan struct{}

	mu     sync.Mutex    // guards want, online, reportTo and cancel
	want   *decide.Evict // the newest generation asked for; nil before the first Start
	online []int         // the CPUs online when want was asked for
	// reportTo receives the progress of want's generation; it is called
	// from Run's goroutine and must not block.
	reportTo func(types.EvictionReport)
	cancel   context.CancelFunc // cancels the pass in flight

	// The work on the current generation; only Run's goroutine uses it.
	gen      int64
	done     bool
	held     bool                  // the generation's Evict holds the evictions (decide.Evict.Hold)
	count    int                   // pods evicted for this generation
	evicted  map[string]string     // UID → namespace/name of the evicted pods not yet seen gone
	reported *types.EvictionReport // the last report sent for this generation
	noted    map[string]bool       // log lines said once per generation
	poll     wait.Backoff          // the steady wait (RetryInterval, jittered)
	failures wait.Backoff          // the backoff after failed API calls; reset by a pass without one
	failErr  error                 // the last failed call's error (retry.After caps the wait when unreachable)
}

// New returns an evictor for the pods of opts.NodeName that lists
// and evicts them through client (kube.Relay.EvictionClient).
func New(client dynamic.Interface, opts Options) *Evictor {
	retry.Defaults(&opts.Logger, &opts.Metrics, &opts.Clock, &opts.RetryInterval, &opts.MaxRetryInterval, DefaultRetryInterval, DefaultMaxRetryInterval)
	return &Evictor{
		client:   client,
		opts:     opts,
		log:      opts.Logger.With("node", opts.NodeName),
		m:        opts.Metrics,
		clock:    opts.Clock,
		wake:     make(chan struct{}, 1),
		evicted:  map[string]string{},
		poll:     retry.Poll(opts.RetryInterval),
		failures: retry.Backoff(opts.RetryInterval, opts.MaxRetryInterval),
	}
}

// Start asks for the pods to be brought within ev.Allocatable, with the
// CPUs online now (empty: unknown, and nobody is evicted for CPU); the
// progress of ev's generation goes to report (the agent's
// ReportEviction). It never blocks. An ev whose generation is not newer
// than the newest one started is ignored, but for the go-ahead of a held
// one (the same generation without Hold); a newer one cancels the pass in
// flight. ctx only gates the request (a done ctx drops it): the work runs
// under Run's context.
func (e *Evictor) Start(ctx context.Context, ev decide.Evict, online []int, report func(types.EvictionReport)) {
	if ctx.Err() != nil {
		return
	}
	ev.Capacity, ev.Allocatable = ev.Capacity.Clone(), ev.Allocatable.Clone()
	e.mu.Lock()
	if e.want != nil && ev.Generation <= e.want.Generation && !(ev.Generation == e.want.Generation && e.want.Hold && !ev.Hold) {
		old := e.want.Generation
		e.mu.Unlock()
		e.log.Debug("eviction request ignored: not newer than the one in hand", "generation", ev.Generation, "current", old)
		return
	}
	e.want, e.online, e.reportTo = &ev, slices.Clone(online), report
	if e.cancel != nil {
		e.cancel()
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run works on the newest eviction request until ctx is done. It is the
// evictor's only worker; it always returns nil.
func (e *Evictor) Run(ctx context.Context) error {
	var timer clock.Timer
	defer func() { retry.Stop(timer) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		case <-retry.C(timer):
		}
		retry.Stop(timer)
		timer = nil
		job, pass, cancel, ok := e.next(ctx)
		if !ok {
			cancel()
			continue
		}
		out := e.pass(pass, job)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if out != passFailed {
			e.failures = retry.Backoff(e.opts.RetryInterval, e.opts.MaxRetryInterval)
		}
		switch out {
		case passAgain:
			select {
			case e.wake <- struct{}{}:
			default:
			}
		case passWait:
			timer = e.clock.NewTimer(e.poll.Step())
			e.armed.Add(1)
		case passFailed:
			timer = e.clock.NewTimer(retry.After(&e.failures, e.failErr))
			e.armed.Add(1)
		}
	}
}

// job is one eviction request as Start took it.
type job struct {
	ev     decide.Evict
	online []int // the CPUs online when it was asked for
}

// next takes the newest request and a context for its pass, which a newer
// Start cancels. ok is false when there is nothing to do.
func (e *Evictor) next(ctx context.Context) (j job, pass context.Context, cancel context.CancelFunc, ok bool) {
	e.mu.Lock()
	have := e.want != nil
	if have {
		j = job{ev: *e.want, online: e.online}
	}
	ev := j.ev
	pass, cancel = context.WithCancel(ctx)
	e.cancel = cancel
	e.mu.Unlock()
	if !have {
		return j, pass, cancel, false
	}
	switch {
	case ev.Generation != e.gen || e.noted == nil:
		// The pods evicted for an older generation stay in e.evicted:
		// they are waited for until they are gone.
		e.gen, e.done, e.reported, e.count, e.held = ev.Generation, false, nil, 0, ev.Hold
		e.noted = map[string]bool{}
		e.log.Info("bringing pods within allocatable", "generation", ev.Generation,
			"allocatable", ev.Allocatable.String(), "reason", ev.Reason, "held", ev.Hold)
	case e.held && !ev.Hold:
		// The go-ahead: the status is lowered, the evictions may begin.
		e.held, e.done = false, false
		e.log.Info("evictions may begin", "generation", ev.Generation)
	}
	return j, pass, cancel, !e.done
}

// outcome says when a pass wants to come back.
type outcome int

const (
	passDone   outcome = iota // never: done, or superseded
	passAgain                 // at once: evicted pods may be gone already
	passWait                  // after RetryInterval: blocked, or pods terminating
	passFailed                // after the failure backoff: an API call failed
)

// pass makes one round of progress on j.
func (e *Evictor) pass(ctx context.Context, j job) outcome {
	ev, online := j.ev, j.online
	pods, err := e.listPods(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return passDone
		}
		e.m.ResizeErrors.WithLabelValues("eviction").Inc()
		e.log.Warn("list the node's pods; will retry", "err", err)
		e.failErr = err
		if e.reported == nil {
			// The first look failed: the agent publishes the shrink
			// InProgress, with why, rather than wait for it.
			e.report(types.EvictionReport{Generation: ev.Generation, Blocked: err.Error()})
		}
		return passFailed
	}
	usages, leaving := e.usages(pods)
	var exclusive map[string][]int
	if e.opts.ExclusiveCPUs != nil {
		if exclusive, err = e.opts.ExclusiveCPUs(); err != nil {
			e.once("exclusive", slog.LevelWarn, "read the CPU manager's exclusive CPUs; no pod is evicted for CPU", "err", err)
			exclusive = nil
		}
	}
	e.noteProtectedOnOfflineCPUs(usages, online, exclusive)

	victims, fits := Rank(usages, ev.Allocatable, online, exclusive, ev.Release)
	if len(victims) == 0 {
		return e.settle(ev, usages, leaving, fits)
	}
	if e.reported == nil || ev.Hold {
		// The first look: pods have to go. Said before any goes, so
		// that the status goes out InProgress with the evictions.
		e.report(types.EvictionReport{Generation: ev.Generation})
	}
	if ev.Hold {
		e.done = true // until the go-ahead
		e.log.Info("pods have to go; held until the status is lowered", "generation", ev.Generation, "pods", len(victims))
		return passDone
	}
	return e.evictAll(ctx, ev, victims)
}

// settle reports where ev stands when nobody is left to evict: waiting
// for the evicted pods to terminate, done, or blocked by pods that may not
// be evicted.
func (e *Evictor) settle(ev decide.Evict, usages []PodUsage, leaving []*corev1.Pod, fits bool) outcome {
	switch {
	case len(leaving) > 0:
		if stuck := e.stuck(leaving); stuck != "" {
			e.report(types.EvictionReport{Generation: ev.Generation, Blocked: stuck})
		} else {
			e.report(types.EvictionReport{Generation: ev.Generation})
		}
		e.log.Debug("waiting for evicted pods to terminate", "generation", ev.Generation, "pods", len(leaving))
		return passWait
	case fits:
		e.done = true
		e.report(types.EvictionReport{Generation: ev.Generation, Done: true})
		e.log.Info("pods fit the allocatable", "generation", ev.Generation,
			"allocatable", ev.Allocatable.String(), "evicted", e.count)
		return passDone
	default:
		msg := cannotFit(usages, ev.Allocatable)
		e.report(types.EvictionReport{Generation: ev.Generation, Blocked: msg})
		e.once("cannot-fit", slog.LevelWarn, "pods that may not be evicted do not fit the allocatable", "generation", ev.Generation, "why", msg)
		return passWait
	}
}

// evictAll evicts the victims in order, and stops at the first that is
// refused: the ones after it wait, so that the kubelet's order is kept.
func (e *Evictor) evictAll(ctx context.Context, ev decide.Evict, victims []PodUsage) outcome {
	for _, v := range victims {
		if ctx.Err() != nil {
			return passDone
		}
		err := e.evict(ctx, v)
		if err == nil {
			e.evicted[v.UID] = v.String() // to be waited for, whatever generation comes next
		}
		if ctx.Err() != nil {
			return passDone // superseded, or shutting down: the next pass looks again
		}
		if out, stop := e.evicted1(ev, v, err); stop {
			return out
		}
		e.report(types.EvictionReport{Generation: ev.Generation}) // proceeding: clears an earlier Blocked
	}
	return passAgain // look again at once: the evicted pods may be gone already
}

// evicted1 handles the answer to one eviction; stop says the pass ends
// with out.
func (e *Evictor) evicted1(ev decide.Evict, v PodUsage, err error) (out outcome, stop bool) {
	switch {
	case err == nil:
		e.count++
		e.log.Info("evicted pod", "pod", v.String(), "uid", v.UID, "reason", types.EvictionReason,
			"why", v.Why, "generation", ev.Generation)
		if e.opts.Event != nil {
			e.opts.Event(types.EventWarning, types.EvictionReason, fmt.Sprintf("Evicted pod %s: %s", v, v.Why))
		}
		return passAgain, false
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone already (or replaced by a new pod of the same name,
		// which the UID precondition refuses): its memory is free.
		e.log.Info("pod to evict is already gone", "pod", v.String(), "uid", v.UID, "generation", ev.Generation)
		return passAgain, false
	}
	if msg, ok := disruptionBudgetMessage(err); ok {
		blocked := fmt.Sprintf("pod %s: eviction blocked by a PodDisruptionBudget: %s", v, msg)
		e.report(types.EvictionReport{Generation: ev.Generation, Blocked: blocked})
		e.log.Warn("eviction blocked by a PodDisruptionBudget; will retry", "pod", v.String(),
			"message", msg, "generation", ev.Generation)
		return passWait, true
	}
	e.m.ResizeErrors.WithLabelValues("eviction").Inc()
	e.report(types.EvictionReport{Generation: ev.Generation, Blocked: fmt.Sprintf("pod %s: eviction failed: %v", v, err)})
	e.log.Warn("evict pod; will retry", "pod", v.String(), "err", err, "generation", ev.Generation)
	e.failErr = err
	return passFailed, true
}

// listPods lists the node's pods that are not terminal.
func (e *Evictor) listPods(ctx context.Context) ([]corev1.Pod, error) {
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("spec.nodeName", e.opts.NodeName),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	).String()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := e.client.Resource(objects.Pods).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", e.opts.NodeName, err)
	}
	pods := make([]corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		var p corev1.Pod
		if err := objects.FromUnstructured(&list.Items[i], &p); err != nil {
			return nil, fmt.Errorf("list pods on node %s: %w", e.opts.NodeName, err)
		}
		// The field selector already says so; checking again costs
		// nothing and keeps a lenient server from widening the set.
		if p.Spec.NodeName == e.opts.NodeName && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// usages describes the pods for Rank. Pods already terminating are left
// out: their memory is on its way back. The ones the evictor evicted are
// returned as leaving, to be waited for; those no longer listed are
// forgotten.
func (e *Evictor) usages(pods []corev1.Pod) (usages []PodUsage, leaving []*corev1.Pod) {
	listed := make(map[string]bool, len(pods))
	for i := range pods {
		listed[string(pods[i].UID)] = true
	}
	for uid := range e.evicted {
		if !listed[uid] {
			delete(e.evicted, uid)
		}
	}
	var unread int
	var firstErr error
	for i := range pods {
		p := &pods[i]
		if _, ours := e.evicted[string(p.UID)]; ours {
			leaving = append(leaving, p)
			continue
		}
		if p.DeletionTimestamp != nil {
			continue
		}
		u := podUsageOf(p)
		if e.opts.WorkingSet != nil {
			ws, err := e.opts.WorkingSet(u.UID, u.QOS)
			if err == nil {
				u.WorkingSet, u.WorkingSetKnown = ws, true
			} else {
				unread++
				if firstErr == nil {
					firstErr = fmt.Errorf("pod %s: %w", u, err)
				}
			}
		}
		usages = append(usages, u)
	}
	switch {
	case e.opts.WorkingSet == nil:
		e.once("no-working-sets", slog.LevelInfo, "working sets unknown (no cgroup reader): ranking by priority and memory request only; each pod counts its request")
	case unread > 0:
		e.once("unread-working-sets", slog.LevelInfo, "working sets unreadable for some pods: they count their request and rank first, as the kubelet ranks pods without stats",
			"pods", unread, "err", firstErr)
	}
	return usages, leaving
}

// evict asks the API server to evict one pod, with the pod's own grace
// period, and only the pod that was ranked (a UID precondition).
func (e *Evictor) evict(ctx context.Context, v PodUsage) error {
	uid := k8stypes.UID(v.UID)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	eviction, err := objects.ToUnstructured(&policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: v.Name, Namespace: v.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}, policyv1.SchemeGroupVersion.WithKind("Eviction"))
	if err != nil {
		return fmt.Errorf("evict pod %s: %w", v, err)
	}
	// A create of the pod's eviction subresource, as the typed client's
	// Evict: POST .../pods/<name>/eviction.
	_, err = e.client.Resource(objects.Pods).Namespace(v.Namespace).Create(ctx, eviction, metav1.CreateOptions{}, "eviction")
	if err != nil {
		return fmt.Errorf("evict pod %s: %w", v, err)
	}
	return nil
}

// disruptionBudgetMessage reports whether err is a PodDisruptionBudget's
// refusal (429 Too Many Requests, or any refusal carrying a DisruptionBudget
// cause) and returns the server's message with its causes.
func disruptionBudgetMessage(err error) (string, bool) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return "", false
	}
	st := se.Status()
	pdb := st.Code == http.StatusTooManyRequests || st.Reason == metav1.StatusReasonTooManyRequests
	var causes []string
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				pdb = true
				if c.Message != "" {
					causes = append(causes, c.Message)
				}
			}
		}
	}
	if !pdb {
		return "", false
	}
	msg := st.Message
	if len(causes) > 0 {
		msg = strings.TrimSpace(msg + " " + strings.Join(causes, "; "))
	}
	return msg, true
}

// stuck says which evicted pod is still terminating well past its grace
// period (the kubelet may be down), or "" when none is.
func (e *Evictor) stuck(leaving []*corev1.Pod) string {
	const slack = 30 * time.Second
	now := e.clock.Now()
	for _, p := range leaving {
		if p.DeletionTimestamp == nil {
			continue
		}
		deadline := p.DeletionTimestamp.Time.Add(slack) // the timestamp already includes the grace period
		if now.After(deadline) {
			return fmt.Sprintf("pod %s/%s was evicted but is still terminating %s after its grace period ended",
				p.Namespace, p.Name, now.Sub(p.DeletionTimestamp.Time).Round(time.Second))
		}
	}
	return ""
}

// cannotFit explains why the pods still do not fit when no pod is left to
// evict.
func cannotFit(usages []PodUsage, allocatable resources.List) string {
	var total, protected int64
	for _, u := range usages {
		total += u.Footprint()
		if u.Protected != "" {
			protected += u.Footprint()
		}
	}
	return fmt.Sprintf("the pods that may not be evicted (static, mirror, system-critical) hold %s of memory; all pods hold %s, over allocatable memory %s",
		resources.Format(resources.Memory, protected), resources.Format(resources.Memory, total),
		resources.Format(resources.Memory, allocatable[resources.Memory]))
}

// noteProtectedOnOfflineCPUs logs, once per generation, the protected pods
// whose exclusive CPUs went offline: they are not evicted.
func (e *Evictor) noteProtectedOnOfflineCPUs(usages []PodUsage, online []int, exclusive map[string][]int) {
	if len(online) == 0 || len(exclusive) == 0 {
		return
	}
	set := make(map[int]bool, len(online))
	for _, c := range online {
		set[c] = true
	}
	for _, u := range usages {
		if u.Protected == "" || u.QOS != qosGuaranteedName {
			continue
		}
		if gone := offlineCPUs(exclusive[u.UID], set); len(gone) > 0 {
			e.once("cpu/"+u.UID, slog.LevelWarn, "exclusive CPUs of a pod that may not be evicted are offline; leaving it",
				"pod", u.String(), "cpus", gone.String(), "why", u.Protected)
		}
	}
}

// report sends r unless it is what was sent last.
func (e *Evictor) report(r types.EvictionReport) {
	if e.reported != nil && *e.reported == r {
		return
	}
	e.reported = &r
	e.mu.Lock()
	to := e.reportTo
	e.mu.Unlock()
	if to != nil {
		to(r)
	}
}

// once logs a line once per generation.
func (e *Evictor) once(key string, level slog.Level, msg string, args ...any) {
	if e.noted[key] {
		return
	}
	e.noted[key] = true
	e.log.Log(context.Background(), level, msg, args...)
}
