package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
)

// DefaultKubeconfig is the kubelet's own kubeconfig: using it puts the
// daemon under the Node authorizer, which lets a node read and patch only
// itself.
const DefaultKubeconfig = "/etc/kubernetes/kubelet.conf"

// Options configure the relay.
type Options struct {
	// Kubeconfig is the kubeconfig file. When empty, or when it does not
	// exist and the process runs in a pod, the in-cluster config is used.
	Kubeconfig string
	// NodeName is the Node this daemon speaks for.
	NodeName string
	Logger   *slog.Logger
	Metrics  *metrics.Metrics
	// MinBackoff and MaxBackoff bound the retry delay of a failed patch
	// (defaults 200ms and 30s).
	MinBackoff, MaxBackoff time.Duration
}

// RestConfig builds the client configuration from a kubeconfig path, or
// the in-cluster config when path is empty or absent inside a pod.
func RestConfig(path string) (*rest.Config, error) {
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if path != "" {
		if _, err := os.Stat(path); err == nil || !inCluster {
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				return nil, fmt.Errorf("load kubeconfig %s: %w (point --kubeconfig at a readable kubeconfig, or run --standalone)", path, err)
			}
			return cfg, nil
		}
	}
	if !inCluster {
		return nil, errors.New("no kubeconfig given and not running in a pod (set --kubeconfig, or run --standalone)")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	return cfg, nil
}

// Status is the wanted Node status: what the daemon publishes.
type Status = decide.NodeStatus

// Relay talks to the API server for one Node. It is safe for concurrent
// use; Run must be called once.
type Relay struct {
	opts   Options
	client kubernetes.Interface
	// evictClient is client without client-go's retries of a 429.
	evictClient kubernetes.Interface
	log         *slog.Logger
	m           *metrics.Metrics

	events   events.EventBroadcaster
	recorder events.EventRecorder

	wake chan struct{}

	mu        sync.Mutex // guards the fields below
	want      *Status    // the newest wanted status, nil when none
	sent      *Status    // the last status the API server acknowledged
	patches   uint64
	lastErr   error
	lastPatch time.Time
}

// New returns a relay over client.
func New(client kubernetes.Interface, opts Options) *Relay {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = 30 * time.Second
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	return &Relay{
		opts:     opts,
		client:   client,
		log:      opts.Logger,
		m:        opts.Metrics,
		events:   b,
		recorder: b.NewRecorder(scheme.Scheme, "node-resized"),
		wake:     make(chan struct{}, 1),
	}
}

// Connect builds a client from opts.Kubeconfig and returns a relay.
func Connect(opts Options) (*Relay, error) {
	cfg, err := RestConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "node-resized"
	// client-go's default (5 requests a second, bursts of 10) throttles a
	// hotplug's patches, events and eviction pass behind each other; the
	// kubelet allows 50 and bursts of 100 for the same node identity.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	// Evictions get a client that does not sit out a refusal: client-go
	// retries a 429 with Retry-After up to ten times, which would hide a
	// PodDisruptionBudget's refusal for minutes. The evictor retries on
	// its own schedule and reports the block meanwhile.
	ecfg := rest.CopyConfig(cfg)
	ecfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return noRetryAfter{rt} })
	eclient, err := kubernetes.NewForConfig(ecfg)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	r := New(client, opts)
	r.evictClient = eclient
	return r, nil
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
func (r *Relay) EvictionClient() kubernetes.Interface {
	if r.evictClient != nil {
		return r.evictClient
	}
	return r.client
}

// GetNode reads the Node as raw JSON.
func (r *Relay) GetNode(ctx context.Context) (NodeView, error) {
	b, err := r.client.CoreV1().RESTClient().Get().Resource("nodes").Name(r.opts.NodeName).DoRaw(ctx)
	if err != nil {
		return NodeView{}, fmt.Errorf("get Node %s: %w", r.opts.NodeName, err)
	}
	return ParseNode(b)
}

// Watch calls fn with the Node each time it changes, until ctx is done. It
// lists and watches only this Node (a field selector on its name), decodes
// it as raw JSON, and starts over with backoff when the watch breaks or the
// API server is away. fn runs on Watch's goroutine.
func (r *Relay) Watch(ctx context.Context, fn func(NodeView)) error {
	backoff := r.opts.MinBackoff
	for ctx.Err() == nil {
		err := r.watchOnce(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.log.Warn("watch Node; retrying", "node", r.opts.NodeName, "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.opts.MaxBackoff)
		if err == nil {
			backoff = r.opts.MinBackoff
		}
	}
	return nil
}

func (r *Relay) watchOnce(ctx context.Context, fn func(NodeView)) error {
	sel := fields.OneTermEqualSelector("metadata.name", r.opts.NodeName).String()
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	b, err := r.client.CoreV1().RESTClient().Get().Resource("nodes").
		VersionedParams(&metav1.ListOptions{FieldSelector: sel}, scheme.ParameterCodec).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("list Node %s: %w", r.opts.NodeName, err)
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("decode Node list: %w", err)
	}
	for _, item := range list.Items {
		v, err := ParseNode(item)
		if err != nil {
			return err
		}
		fn(v)
	}
	timeout := int64(600)
	body, err := r.client.CoreV1().RESTClient().Get().Resource("nodes").
		VersionedParams(&metav1.ListOptions{
			FieldSelector:   sel,
			Watch:           true,
			ResourceVersion: list.Metadata.ResourceVersion,
			TimeoutSeconds:  &timeout,
		}, scheme.ParameterCodec).
		Stream(ctx)
	if err != nil {
		return fmt.Errorf("watch Node %s: %w", r.opts.NodeName, err)
	}
	defer body.Close()
	// Decode the watch stream by hand: the typed decoder would drop
	// fields the client does not know, spec.configuredCapacity among them.
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil // the server ended the watch: list again
			}
			return fmt.Errorf("read the Node watch: %w", err)
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			v, err := ParseNode(ev.Object)
			if err != nil {
				return err
			}
			fn(v)
		case watch.Error:
			var st metav1.Status
			_ = json.Unmarshal(ev.Object, &st)
			return fmt.Errorf("watch Node %s: %w", r.opts.NodeName, apierrors.FromObject(&st))
		}
	}
}

// Publish sets the wanted Node status. It never blocks: the worker sends
// the newest wanted status, so a burst of changes costs one patch.
func (r *Relay) Publish(s Status) {
	r.mu.Lock()
	if r.want != nil && !r.want.Since.IsZero() && (s.Since.IsZero() || r.want.Since.Before(s.Since)) {
		// Keep the earliest unacknowledged hardware change for the
		// latency measurement.
		s.Since = r.want.Since
	}
	r.want = &s
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Republish sends the wanted status again if the Node no longer shows it
// (a kubelet rewrote status.capacity from its own view).
func (r *Relay) Republish(v NodeView) {
	r.mu.Lock()
	sent := r.sent
	pending := r.want != nil
	r.mu.Unlock()
	if sent == nil || pending || shows(v, *sent) {
		return
	}
	r.log.Info("Node status no longer shows the published capacity; publishing it again",
		"node", r.opts.NodeName, "node_capacity", v.Capacity.String(), "published", sent.Capacity.String())
	again := *sent
	again.Since = time.Time{}
	r.Publish(again)
}

// shows reports whether the Node shows the status s.
func shows(v NodeView, s Status) bool {
	for k, want := range s.Capacity {
		if got, ok := v.Capacity[k]; !ok || got != want {
			return false
		}
	}
	for k, want := range s.Allocatable {
		if got, ok := v.Allocatable[k]; !ok || got != want {
			return false
		}
	}
	return v.Condition != nil && v.Condition.Status == s.Condition.Status && v.Condition.Reason == s.Condition.Reason
}

// Event records an event on the Node. It never blocks.
func (r *Relay) Event(eventType decide.EventType, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.opts.NodeName, UID: types.UID(r.opts.NodeName)}
	r.recorder.Eventf(ref, nil, string(eventType), reason, "Resize", "%s", message)
}

// Stats are the relay's counters.
type Stats = decide.RelayStats

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Patches: r.patches, LastPatch: r.lastPatch, Pending: r.want != nil}
	if r.lastErr != nil {
		s.LastError = r.lastErr.Error()
	}
	return s
}

// Run sends wanted statuses until ctx is done, and runs the event
// broadcaster. A failed patch is retried with exponential backoff; what is
// retried is always the newest wanted status.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.events.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start the event recorder: %w", err)
	}
	defer r.events.Shutdown()
	backoff := r.opts.MinBackoff
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-retry:
		}
		retry = nil
		r.mu.Lock()
		want := r.want
		r.mu.Unlock()
		if want == nil {
			continue
		}
		err := r.patch(ctx, *want)
		if ctx.Err() != nil {
			return nil
		}
		r.mu.Lock()
		if err != nil {
			r.lastErr = err
			r.mu.Unlock()
			r.m.ResizeErrors.WithLabelValues("api_patch").Inc()
			r.log.Warn("patch Node status; will retry", "node", r.opts.NodeName, "err", err, "in", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, r.opts.MaxBackoff)
			continue
		}
		backoff = r.opts.MinBackoff
		r.lastErr = nil
		r.patches++
		r.lastPatch = time.Now()
		r.sent = want
		if r.want == want {
			r.want = nil // nothing newer arrived meanwhile
		}
		r.mu.Unlock()
		if !want.Since.IsZero() {
			lat := time.Since(want.Since)
			r.m.PatchLatency.Observe(lat.Seconds())
			r.log.Info("Node status patched", "node", r.opts.NodeName, "capacity", want.Capacity.String(),
				"condition", string(want.Condition.Reason), "latency", lat)
		} else {
			r.log.Info("Node status patched", "node", r.opts.NodeName, "capacity", want.Capacity.String(),
				"condition", string(want.Condition.Reason))
		}
	}
}

// patch sends one strategic-merge patch of the Node's status: the
// resources node-resized manages in capacity and allocatable (pods and
// extended resources are left alone) and its own condition (conditions
// merge by type, so no other condition is touched).
func (r *Relay) patch(ctx context.Context, s Status) error {
	now := metav1.NewTime(time.Now())
	ltt := metav1.NewTime(s.Condition.LastTransitionTime)
	if s.Condition.LastTransitionTime.IsZero() {
		ltt = now
	}
	body := map[string]any{
		"status": map[string]any{
			"capacity":    s.Capacity.Strings(),
			"allocatable": s.Allocatable.Strings(),
			"conditions": []map[string]any{{
				"type":               decide.ConditionType,
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
	_, err = r.client.CoreV1().Nodes().Patch(ctx, r.opts.NodeName, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: "node-resized"}, "status")
	if err != nil {
		return fmt.Errorf("patch Node %s status: %w", r.opts.NodeName, err)
	}
	return nil
}
