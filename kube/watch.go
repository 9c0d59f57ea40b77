package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/types"
)

// NodeSubscriber receives the Node each time the relay's watch sees it.
// The agent's OnNode has this shape.
type NodeSubscriber interface {
	OnNode(types.NodeView)
}

// NodeSubscriberFunc adapts a function to NodeSubscriber.
type NodeSubscriberFunc func(types.NodeView)

// OnNode calls f(v).
func (f NodeSubscriberFunc) OnNode(v types.NodeView) { f(v) }

// Subscribe adds subscribers after the ones in Options. They get the
// views the watch sees from then on; subscribing before Run gets them all.
func (r *Relay) Subscribe(subs ...NodeSubscriber) {
	r.mu.Lock()
	r.subs = append(r.subs, subs...)
	r.mu.Unlock()
}

// GetNode reads the Node once, as JSON, so that spec.configuredCapacity is
// kept when the API server serves it. It does not retry: the caller bounds
// it with ctx and goes on without the API server when it fails.
func (r *Relay) GetNode(ctx context.Context) (types.NodeView, error) {
	u, err := r.nodes.Get(ctx, r.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return types.NodeView{}, fmt.Errorf("get Node %s: %w", r.opts.NodeName, err)
	}
	v, err := parseUnstructured(u)
	if err == nil {
		r.noteView(v)
	}
	return v, err
}

// noteView keeps v as the Node last read.
func (r *Relay) noteView(v types.NodeView) {
	r.mu.Lock()
	r.view = &v
	r.mu.Unlock()
}

// parseUnstructured reads a Node decoded as unstructured JSON. Unstructured
// keeps every field the server sent; ParseNode picks what it needs.
func parseUnstructured(u *unstructured.Unstructured) (types.NodeView, error) {
	b, err := u.MarshalJSON()
	if err != nil {
		return types.NodeView{}, fmt.Errorf("encode Node %s: %w", u.GetName(), err)
	}
	return ParseNode(b)
}

// watchNode hands the Node to the subscribers, and republishes the status
// when the Node no longer shows it, each time the Node is listed or
// changes, until ctx is done. client-go's reflector lists the Node (a field
// selector on its name) from the API server's cache (resourceVersion 0),
// watches it from there with bookmarks, relists when the watch's
// resourceVersion is too old, and restarts after failures with the relay's
// jittered backoff; an unreachable API server is waited out by
// nodeListWatch, at most retry.ReconnectCap between tries. The reflector logs through the relay's logger, its
// failures (which it retries) as warnings.
func (r *Relay) watchNode(ctx context.Context) {
	logger := logr.FromSlogHandler(retriedHandler{r.log.Handler()})
	ctx = logr.NewContext(ctx, logger)
	expected := &unstructured.Unstructured{}
	expected.SetGroupVersionKind(nodeGVK)
	backoff := retry.Backoff(r.opts.MinBackoff, r.opts.MaxBackoff)
	refl := cache.NewReflectorWithOptions(r.nodeListWatch(), expected, nodeStore{r}, cache.ReflectorOptions{
		Name:            "Node " + r.opts.NodeName,
		TypeDescription: "Node",
		Logger:          &logger,
		// The reflector keeps the real clock: its watch timeouts and
		// relists are the API server's business, and a test that steps
		// the relay's clock must not relist the Node under it.
		Backoff: &backoff,
	})
	refl.RunWithContext(ctx)
}

var nodeGVK = corev1.SchemeGroupVersion.WithKind("Node")

// retriedHandler logs errors as warnings: the reflector's errors are
// failed lists and watches that it retries, which the daemon logs as
// warnings everywhere else.
type retriedHandler struct{ slog.Handler }

func (h retriedHandler) Handle(ctx context.Context, rec slog.Record) error {
	rec.Level = min(rec.Level, slog.LevelWarn)
	return h.Handler.Handle(ctx, rec)
}

func (h retriedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return retriedHandler{h.Handler.WithAttrs(attrs)}
}

func (h retriedHandler) WithGroup(name string) slog.Handler {
	return retriedHandler{h.Handler.WithGroup(name)}
}

// nodeListWatch lists and watches only this Node, as unstructured objects,
// waiting out an unreachable API server itself (untilReachable).
func (r *Relay) nodeListWatch() cache.ListerWatcher {
	return nodeListWatch(r.nodes, r.opts.NodeName, r.opts.MinBackoff, r.log)
}

// nodeListWatch lists and watches only the Node name, as unstructured
// objects. A list or watch that reaches no API server is tried again
// after at most retry.ReconnectCap (jittered), rather than handed to the
// reflector: the reflector's own backoff would grow through an outage to
// half a minute and more and only shrink again two minutes after it, so
// that a node saw its Node again up to a minute after the API server was
// back.
func nodeListWatch(nodes dynamic.ResourceInterface, name string, first time.Duration, log *slog.Logger) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return noWatchList{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return untilReachable(ctx, first, log, "list", func() (runtime.Object, error) { return nodes.List(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return untilReachable(ctx, first, log, "watch", func() (watch.Interface, error) { return nodes.Watch(ctx, o) })
		},
	}}
}

// untilReachable calls fn until it gets an answer from the API server (or
// ctx ends), waiting a jittered delay from first up to
// retry.ReconnectCap between tries, and returns that answer. It logs the
// first try that reached no server, and the answer that ends an outage.
// It keeps the real clock, as the reflector does.
func untilReachable[T any](ctx context.Context, first time.Duration, log *slog.Logger, what string, fn func() (T, error)) (T, error) {
	backoff := retry.Backoff(first, retry.ReconnectCap)
	var since time.Time
	for {
		v, err := fn()
		if !retry.Unreachable(err) || ctx.Err() != nil {
			if !since.IsZero() {
				log.Info("API server reachable again; Node "+what+" resumed", "unreachable_for", time.Since(since).Round(time.Millisecond))
			}
			return v, err
		}
		if since.IsZero() {
			since = time.Now()
			log.Warn("API server unreachable; Node "+what+" will retry", "err", err, "max_delay", retry.ReconnectCap)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}

// noWatchList makes the reflector start with a plain list rather than a
// streaming watch-list: for one object, a list served from the API
// server's cache (resourceVersion 0) is as cheap, and every API server
// version answers it the same way.
type noWatchList struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector to list.
func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// nodeStore is where the reflector puts what it lists and watches: each
// Node goes to Relay.observe on the reflector's goroutine. Nothing is
// stored; a deleted Node is ignored (the last configured capacity stays).
type nodeStore struct{ r *Relay }

var _ cache.ReflectorStore = nodeStore{}

func (s nodeStore) Add(obj any) error    { s.r.observe(obj); return nil }
func (s nodeStore) Update(obj any) error { s.r.observe(obj); return nil }
func (s nodeStore) Delete(any) error     { return nil }
func (s nodeStore) Resync() error        { return nil }

// Replace takes a list's result; the first one makes the watch synced
// (Stats.NodeSynced), whether or not the Node exists yet.
func (s nodeStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		s.r.observe(obj)
	}
	s.r.mu.Lock()
	s.r.synced = true
	s.r.mu.Unlock()
	return nil
}

// observe hands one listed or watched Node to the subscribers, in order,
// then republishes the status if the Node no longer shows it.
func (r *Relay) observe(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		r.log.Warn("Node watch delivered an unexpected object", "node", r.opts.NodeName, "type", fmt.Sprintf("%T", obj))
		return
	}
	if u.GetName() != r.opts.NodeName {
		return // the field selector already says so; a lenient server may not
	}
	v, err := parseUnstructured(u)
	if err != nil {
		r.log.Warn("read the watched Node", "node", r.opts.NodeName, "err", err)
		return
	}
	r.noteView(v)
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	for _, s := range subs {
		s.OnNode(v)
	}
	r.republish(v)
}

// republish sends the status the API server acknowledged last again if the
// Node no longer shows it (a kubelet rewrote status.capacity from its own
// view) and nothing newer is pending. The check and the want are one step
// under r.mu: a status published between them (the agent's newer
// decision, on its own goroutine) would otherwise be replaced by the older
// one, which would then be sent last and republished from then on.
func (r *Relay) republish(v types.NodeView) {
	r.mu.Lock()
	sent := r.sent
	if sent == nil || r.want != nil || shows(v, *sent) {
		r.mu.Unlock()
		return
	}
	again := *sent
	again.Since = time.Time{}
	r.wantLocked(again)
	hook := r.republished
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
	r.wakeSender()
	r.log.Info("Node status no longer shows the published capacity; publishing it again",
		"node", r.opts.NodeName, "node_capacity", v.Capacity.String(), "published", sent.Capacity.String())
}

// shows reports whether the Node shows the status s.
func shows(v types.NodeView, s types.NodeStatus) bool {
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
