package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// DefaultKubeconfig is the kubelet's own kubeconfig: using it puts the
// daemon under the Node authorizer, which lets a node read and patch only
// itself.
const DefaultKubeconfig = "/etc/kubernetes/kubelet.conf"

// NodeUserPrefix + a Node's name is that node's user name, as the Node
// authorizer and the NodeRestriction admission plugin know it.
const NodeUserPrefix = "system:node:"

// DefaultQPS and DefaultBurst are the kubelet's own client limits
// (kubeAPIQPS, kubeAPIBurst): the daemon speaks with the same node identity.
// client-go's default (5 requests a second, bursts of 10) would throttle a
// hotplug's patches, events and eviction pass behind each other.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// Options configure the relay.
type Options struct {
	// Kubeconfig is the kubeconfig file. When empty, or when it does not
	// exist and the process runs in a pod, the in-cluster config is used.
	Kubeconfig string
	// NodeName is the Node this daemon speaks for.
	NodeName string
	// NodeSubscribers receive the Node each time the watch sees it (after
	// every list and every change), in order, on the watch's goroutine
	// (see Run). They are called only while Run runs, so they may refer to
	// things set up after the relay is built and before Run is called.
	NodeSubscribers []NodeSubscriber
	// QPS and Burst limit each API client Connect builds (defaults
	// DefaultQPS and DefaultBurst). Connect rejects negative values.
	QPS   float32
	Burst int
	// Logger receives the relay's structured logs, client-go's reflector
	// logs among them.
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// MinBackoff and MaxBackoff bound the retry delay of a failed patch
	// and of a restart of the Node watch (defaults 200ms and 30s). The
	// delay doubles from MinBackoff up to MaxBackoff, and each delay is
	// stretched by a random factor of up to 1.5 (see retry.Jitter), so that
	// the nodes of a fleet do not retry in lockstep after an API server
	// outage. While the API server is unreachable (no connection, or one
	// reset) the delay is at most retry.ReconnectCap (2s, jittered), so that
	// the node is right soon after the server is back.
	MinBackoff, MaxBackoff time.Duration
	// GainWindow holds back a Node status that only adds capacity: it is
	// patched once the wanted status has not changed for GainWindow, and
	// at the latest twice GainWindow after it was first wanted, so that
	// the changes one hot-add makes of the model (a burst's leading and
	// trailing change) cost one patch. Any other status (a loss, a
	// changed taint, the same capacity with another condition, the first
	// status) is patched at once and takes a held gain along. Zero sends
	// every status at once.
	GainWindow time.Duration
	// Clock is the relay's clock (default the real one).
	Clock clock.Clock
	// Taint turns on the NoSchedule taint types.TaintKey: each status
	// carries whether it is wanted, and the relay sets it before the
	// status patch that asks for it and lifts it after the one that no
	// longer does (see syncTaint). The identity needs to patch the Node
	// object, which the NodeRestriction admission plugin forbids a node
	// identity for taints.
	Taint bool
	// EvictAsNode makes the evictor's requests (the list of the node's
	// pods and the evictions) act as the Node's own identity,
	// system:node:<NodeName>, through constrained impersonation (verb
	// impersonate:associated-node, on by default since Kubernetes 1.36):
	// the API server allows it only to a ServiceAccount whose token is
	// bound to a pod on that Node, and the NodeRestriction admission
	// plugin then lets it evict only pods bound to that Node, which no
	// RBAC rule or admission policy on the ServiceAccount itself can say
	// (an eviction names the pod, not its node).
	EvictAsNode bool
}

// validate checks the options a caller sets from flags.
func (o Options) validate() error {
	if o.QPS < 0 {
		return fmt.Errorf("API client QPS must be positive, got %v", o.QPS)
	}
	if o.Burst < 0 {
		return fmt.Errorf("API client burst must be positive, got %d", o.Burst)
	}
	if o.GainWindow < 0 {
		return fmt.Errorf("the window for a capacity gain must not be negative, got %s", o.GainWindow)
	}
	return nil
}

// withDefaults fills in the options left zero.
func (o Options) withDefaults() Options {
	retry.Defaults(&o.Logger, &o.Metrics, &o.Clock, &o.MinBackoff, &o.MaxBackoff, 200*time.Millisecond, 30*time.Second)
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	return o
}

// RestConfig builds the client configuration from a kubeconfig path, or
// the in-cluster config when path is empty or absent inside a pod.
func RestConfig(path string) (*rest.Config, error) {
	return restConfig(path, "point --kubeconfig at a readable kubeconfig, or run --standalone")
}

// restConfig is RestConfig; hint says what to do when no configuration
// can be had.
func restConfig(path, hint string) (*rest.Config, error) {
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if path != "" {
		if _, err := os.Stat(path); err == nil || !inCluster {
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				return nil, fmt.Errorf("load kubeconfig %s: %w (%s)", path, err, hint)
			}
			return cfg, nil
		}
	}
	if !inCluster {
		return nil, fmt.Errorf("no kubeconfig given and not running in a pod (%s)", hint)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	return cfg, nil
}

// Relay talks to the API server for one Node: it publishes the wanted
// status, records events and watches the Node. It is safe for concurrent
// use; Run must be called once.
type Relay struct {
	opts Options
	// client writes: the Node's status and taint patches, and the
	// events.
	client dynamic.Interface
	// nodes reads the Node as JSON (unstructured), so that fields the
	// typed structs do not know are kept.
	nodes dynamic.NamespaceableResourceInterface
	// dyn is the client nodes came from, for other unstructured objects.
	dyn dynamic.Interface
	// evictClient is client without client-go's retries of a 429.
	evictClient dynamic.Interface
	log         *slog.Logger
	m           *metrics.Metrics
	clock       clock.Clock
	// armed counts the retry waits set on clock, so that tests step a
	// fake clock only once the wait they mean is set.
	armed atomic.Int64

	events *eventWriter

	wake chan struct{}

	mu   sync.Mutex        // guards the fields below
	subs []NodeSubscriber  // the watch's subscribers, in order
	want *types.NodeStatus // the newest wanted status, nil when none
	// wantFrom is when the wanted status was first wanted since the last
	// acknowledged patch, wantAt when it last changed: a gain is held
	// until wantAt+GainWindow, at most until wantFrom+2×GainWindow
	// (longer while gainsPending says more are coming, see held).
	wantFrom, wantAt time.Time
	sent             *types.NodeStatus // the last status the API server acknowledged
	patches          uint64
	lastErr          error
	lastPatch        time.Time
	// synced is whether the Node watch has listed the Node once.
	synced bool
	// view is the Node as last read (GetNode, the watch); nil before.
	view *types.NodeView
	// taintSeen is whether the Node was last seen carrying the taint (nil:
	// not known), taintRefused the taint the API server last refused to
	// set or lift (nil: none).
	taintSeen, taintRefused *bool
	// settled is closed when the wanted status has gone out (or its patch
	// failed); nil while no one waits for that (statusSettled).
	settled chan struct{}

	// gainsPending, when set (HoldGainsWhile), says that more gains are
	// on their way; pendingSeen is when it last said so.
	gainsPending func() bool
	pendingSeen  time.Time

	// republished, when set (tests), runs after the watch's republish
	// has made the status it republishes wanted, before it is sent.
	republished func()
}

// GainsPendingMax bounds how long a gain waits for the gains that
// HoldGainsWhile says are on their way: from when it was first wanted.
const GainsPendingMax = 10 * time.Second

// HoldGainsWhile makes a held gain (Options.GainWindow) wait on while
// pending reports that more gains are on their way (the auto-onliner still
// bringing a DIMM's blocks online one by one, which a loaded machine
// spreads over more than the window), and for a GainWindow after it last
// said so, at most GainsPendingMax from when the gain was first wanted:
// the hot-add is one patch however slowly its blocks come online. pending
// is called from the relay's worker and must return at once. Call it
// before Run.
func (r *Relay) HoldGainsWhile(pending func() bool) {
	r.mu.Lock()
	r.gainsPending = pending
	r.mu.Unlock()
}

// New returns a relay that patches the Node and records events through
// client and reads and watches the Node through nodes (Connect passes the
// same client as both). Options are taken as they are (QPS and Burst only
// matter to Connect).
func New(client, nodes dynamic.Interface, opts Options) *Relay {
	opts = opts.withDefaults()
	r := &Relay{
		opts:   opts,
		client: client,
		nodes:  nodes.Resource(objects.Nodes),
		dyn:    nodes,
		log:    opts.Logger,
		m:      opts.Metrics,
		clock:  opts.Clock,
		events: newEventWriter(client, opts),
		wake:   make(chan struct{}, 1),
		subs:   slices.Clone(opts.NodeSubscribers),
	}
	r.events.statusSettled = r.statusSettled
	return r
}

// statusSettled returns a channel closed once no wanted status waits for
// the API server: nil when none does now, or when the last patch failed
// (an event then need not wait for a patch that is being retried). The
// event writer waits on it, so that a change's status, which the
// scheduler reads, goes before its event, which a person reads: when a
// fleet changes at once, the API server's queue holds the patches first.
func (r *Relay) statusSettled() <-chan struct{} {
	return r.StatusSettled()
}

// StatusSettled returns a channel closed once the wanted Node status has
// gone out (or its patch failed); nil when none is under way or the last
// patch failed. The agent's kubelet restart waits on it.
func (r *Relay) StatusSettled() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want == nil || r.lastErr != nil {
		return nil
	}
	if r.settled == nil {
		r.settled = make(chan struct{})
	}
	return r.settled
}

// settle wakes whoever waits for the wanted status to go out. r.mu must
// be held.
func (r *Relay) settle() {
	if r.settled != nil {
		close(r.settled)
		r.settled = nil
	}
}

// Connect builds the API clients from opts.Kubeconfig, limited to
// opts.QPS requests a second in bursts of opts.Burst, and returns a relay.
func Connect(opts Options) (*Relay, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	cfg, err := RestConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return connect(cfg, opts)
}

// connect builds the relay's clients on cfg.
func connect(cfg *rest.Config, opts Options) (*Relay, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	cfg = clientConfig(cfg, opts)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	// Evictions get a client that does not sit out a refusal: client-go
	// retries a 429 with Retry-After up to ten times, which would hide a
	// PodDisruptionBudget's refusal for minutes. The evictor retries on
	// its own schedule and reports the block meanwhile.
	ecfg := rest.CopyConfig(cfg)
	ecfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return noRetryAfter{rt} })
	if opts.EvictAsNode {
		ecfg.Impersonate = rest.ImpersonationConfig{UserName: NodeUserPrefix + opts.NodeName}
	}
	eclient, err := dynamic.NewForConfig(ecfg)
	if err != nil {
		return nil, fmt.Errorf("create the eviction client: %w", err)
	}
	r := New(client, client, opts)
	r.evictClient = eclient
	return r, nil
}

// clientConfig is a copy of cfg with the relay's user agent and limits.
func clientConfig(cfg *rest.Config, opts Options) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "node-resized"
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	return cfg
}

// noRetryAfter drops Retry-After from 429 answers so that client-go hands
// the refusal back at once instead of retrying it.
type noRetryAfter struct{ rt http.RoundTripper }

func (n noRetryAfter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.rt.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// EvictionClient returns the API client for the evictor: a 429 (a
// PodDisruptionBudget's refusal) comes back at once, not after client-go's
// retries.
func (r *Relay) EvictionClient() dynamic.Interface {
	if r.evictClient != nil {
		return r.evictClient
	}
	return r.client
}

// Client returns the API client the relay reads the Node through, for
// the other writers of the Node's objects (the NodeResourceTopology
// publisher, kube/nrt).
func (r *Relay) Client() dynamic.Interface {
	return r.dyn
}

// Run runs the relay until ctx is done: the event writer, the status
// patch worker and the Node watch, each on a goroutine of its own that
// ends with ctx and is waited for before Run returns (the event writer
// first writes the events still queued, for up to a few seconds). It
// returns nil once ctx is done.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { r.events.run(ctx) })
	wg.Go(func() { r.sendStatuses(ctx) })
	wg.Go(func() { r.watchNode(ctx) })
	wg.Wait()
	return nil
}

// Publish sets the wanted Node status. It never blocks: the worker sends
// the newest wanted status, so a burst of changes costs one patch.
func (r *Relay) Publish(s types.NodeStatus) {
	r.mu.Lock()
	r.wantLocked(s)
	r.mu.Unlock()
	r.wakeSender()
}

// wantLocked makes s the wanted status. r.mu must be held.
func (r *Relay) wantLocked(s types.NodeStatus) {
	now := r.clock.Now()
	if r.want != nil && !r.want.Since.IsZero() && (s.Since.IsZero() || r.want.Since.Before(s.Since)) {
		// Keep the earliest unacknowledged hardware change for the
		// latency measurement.
		s.Since = r.want.Since
	}
	if r.want == nil {
		r.wantFrom, r.wantAt = now, now
	} else if !sameStatus(*r.want, s) {
		r.wantAt = now
	}
	r.want = &s
}

// wakeSender tells sendStatuses that a status is wanted.
func (r *Relay) wakeSender() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Event records an event on the Node (action Resize). It never blocks:
// the event is queued for Run's event writer, which tries again while
// the API server is away, and drops it, with a log line, when too many
// are waiting.
func (r *Relay) Event(eventType types.EventType, reason, message string) {
	r.events.record(r.events.event(string(eventType), reason, "Resize", message))
}

// Stats are the relay's counters.
type Stats = types.RelayStats

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Patches: r.patches, LastPatch: r.lastPatch, Pending: r.want != nil, NodeSynced: r.synced}
	if r.lastErr != nil {
		s.LastError = r.lastErr.Error()
	}
	return s
}

// sendStatuses sends wanted statuses until ctx is done. A failed patch is
// retried with jittered exponential backoff; what is retried is always the
// newest wanted status, and a newer status is sent at once, unless it only
// adds capacity: that one waits for Options.GainWindow (see held).
func (r *Relay) sendStatuses(ctx context.Context) {
	backoff := retry.Backoff(r.opts.MinBackoff, r.opts.MaxBackoff)
	var again, hold clock.Timer
	defer func() { retry.Stop(again); retry.Stop(hold) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-retry.C(again):
		case <-retry.C(hold):
		}
		retry.Stop(again)
		retry.Stop(hold)
		again, hold = nil, nil
		r.mu.Lock()
		want := r.want
		wait := r.held()
		r.mu.Unlock()
		if want == nil {
			continue
		}
		if wait > 0 {
			hold = r.clock.NewTimer(wait)
			r.armed.Add(1)
			continue
		}
		shown := r.shownAtStart(*want)
		var err error
		if shown {
			err = r.sendTaint(ctx, *want)
		} else {
			err = r.send(ctx, *want)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			delay := retry.After(&backoff, err)
			r.patchFailed(err, delay)
			again = r.clock.NewTimer(delay)
			r.armed.Add(1)
			continue
		}
		backoff = retry.Backoff(r.opts.MinBackoff, r.opts.MaxBackoff)
		if shown {
			r.adopted(want)
			continue
		}
		r.patched(want)
	}
}

// shownAtStart reports whether s, the first status since node-resized
// started, is what the Node shows already (capacity, allocatable and the
// condition's status, reason and message, as last read): then it is not
// patched, so that a restart of node-resized with nothing changed (a
// DaemonSet rollout, an upgrade) writes nothing.
func (r *Relay) shownAtStart(s types.NodeStatus) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent == nil && r.view != nil && shows(*r.view, s) && r.view.Condition.Message == s.Condition.Message
}

// adopted records want, which the Node showed already, as acknowledged.
func (r *Relay) adopted(want *types.NodeStatus) {
	r.mu.Lock()
	r.lastErr = nil
	r.sent = want
	if r.want == want {
		r.want = nil
	} else {
		r.wantFrom = r.wantAt
	}
	r.settle()
	r.mu.Unlock()
	r.log.Info("the Node shows the status already; not patched", "node", r.opts.NodeName,
		"capacity", want.Capacity.String(), "condition", string(want.Condition.Reason))
}

// held returns how much longer the wanted status waits before it is
// patched: while it only adds capacity to the status last acknowledged
// (gain), until it has not changed for GainWindow, and at most until
// 2×GainWindow after it was first wanted; 0 when it goes now. r.mu must
// be held.
func (r *Relay) held() time.Duration {
	w := r.opts.GainWindow
	if w <= 0 || r.want == nil || r.sent == nil || !gain(*r.sent, *r.want) {
		return 0
	}
	now := r.clock.Now()
	quietFrom, limit := r.wantAt, r.wantFrom.Add(2*w)
	if r.gainsPending != nil {
		pending := r.gainsPending()
		if pending {
			r.pendingSeen = now
		}
		if !r.pendingSeen.IsZero() && !r.pendingSeen.Before(r.wantFrom) {
			// More gains were on their way while this one was wanted:
			// its window counts from when they last were.
			limit = r.wantFrom.Add(GainsPendingMax)
			if r.pendingSeen.After(quietFrom) {
				quietFrom = r.pendingSeen
			}
			if pending {
				// Look again soon, so that the window counts from
				// close to when they stopped.
				return min(w/4, max(limit.Sub(now), 0))
			}
		}
	}
	due := quietFrom.Add(w)
	if due.After(limit) {
		due = limit
	}
	return due.Sub(now)
}

// gain reports whether to only adds capacity to from: no capacity or
// allocatable value lower or gone, at least one higher or new, and the
// same taint. The condition may differ (a gain that fulfils a request).
func gain(from, to types.NodeStatus) bool {
	if from.Taint != to.Taint {
		return false
	}
	more := false
	for _, pair := range [...][2]resources.List{{from.Capacity, to.Capacity}, {from.Allocatable, to.Allocatable}} {
		was, now := pair[0], pair[1]
		for name, v := range was {
			if n, ok := now[name]; !ok || n < v {
				return false
			}
		}
		for name, n := range now {
			if v, ok := was[name]; !ok || n > v {
				more = true
			}
		}
	}
	return more
}

// sameStatus reports whether a and b ask for the same Node status (their
// hardware-change times aside).
func sameStatus(a, b types.NodeStatus) bool {
	return a.Capacity.Equal(b.Capacity) && a.Allocatable.Equal(b.Allocatable) && a.Taint == b.Taint &&
		a.Condition.Same(b.Condition)
}

// send sends one wanted status: a taint the status asks for is set
// before the status patch (no pod is placed against the new status
// before it is there), and one it no longer asks for is lifted after.
func (r *Relay) send(ctx context.Context, s types.NodeStatus) error {
	if s.Taint {
		if err := r.syncTaint(ctx, true); err != nil {
			return err
		}
	}
	if err := r.patch(ctx, s); err != nil {
		return err
	}
	if !s.Taint {
		return r.syncTaint(ctx, false)
	}
	return nil
}

// sendTaint is send for a status the Node shows already: only the taint
// it asks for, if any, is set or lifted.
func (r *Relay) sendTaint(ctx context.Context, s types.NodeStatus) error {
	return r.syncTaint(ctx, s.Taint)
}

// patchFailed records a failed patch.
func (r *Relay) patchFailed(err error, retryIn time.Duration) {
	r.mu.Lock()
	r.lastErr = err
	r.settle()
	r.mu.Unlock()
	r.m.ResizeErrors.WithLabelValues("api_patch").Inc()
	r.log.Warn("patch Node status; will retry", "node", r.opts.NodeName, "err", err, "in", retryIn)
}

// patched records that the API server acknowledged want.
func (r *Relay) patched(want *types.NodeStatus) {
	r.mu.Lock()
	r.lastErr = nil
	r.patches++
	r.lastPatch = r.clock.Now()
	r.sent = want
	if r.want == want {
		r.want = nil // nothing newer arrived meanwhile
	} else {
		r.wantFrom = r.wantAt // the newer one is wanted since it came
	}
	r.settle()
	r.mu.Unlock()
	args := []any{"node", r.opts.NodeName, "capacity", want.Capacity.String(), "condition", string(want.Condition.Reason)}
	if !want.Since.IsZero() {
		lat := r.clock.Since(want.Since)
		r.m.PatchLatency.Observe(lat.Seconds())
		args = append(args, "latency", lat)
	}
	r.log.Info("Node status patched", args...)
}

// patch sends one strategic-merge patch of the Node's status: the
// resources node-resized manages in capacity and allocatable (pods and
// extended resources are left alone) and its own condition (conditions
// merge by type, so no other condition is touched).
func (r *Relay) patch(ctx context.Context, s types.NodeStatus) error {
	now := metav1.NewTime(r.clock.Now())
	ltt := metav1.NewTime(s.Condition.LastTransitionTime)
	if s.Condition.LastTransitionTime.IsZero() {
		ltt = now
	}
	body := map[string]any{
		"status": map[string]any{
			"capacity":    s.Capacity.Strings(),
			"allocatable": s.Allocatable.Strings(),
			"conditions": []map[string]any{{
				"type":               types.ConditionType,
				"status":             string(s.Condition.Status),
				"reason":             string(s.Condition.Reason),
				"message":            s.Condition.Message,
				"lastHeartbeatTime":  now,
				"lastTransitionTime": ltt,
			}},
		},
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode status patch: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = r.client.Resource(objects.Nodes).Patch(ctx, r.opts.NodeName, k8stypes.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: objects.FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("patch Node %s status: %w", r.opts.NodeName, err)
	}
	return nil
}
