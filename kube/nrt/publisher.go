package nrt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/kube/internal/retry"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// Options configure the Publisher.
type Options struct {
	// NodeName is the Node the object is for and named after.
	NodeName string
	// Kubelet is what the kubelet's configuration says about topology.
	Kubelet KubeletTopology
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// MinBackoff and MaxBackoff bound the retry delay after a failed
	// write (defaults 200ms and 30s): it doubles from MinBackoff with
	// each failure in a row, and each delay is stretched by a random
	// factor of up to 1.5, as the relay's are.
	MinBackoff, MaxBackoff time.Duration
	// Clock is the publisher's clock (default the real one).
	Clock clock.Clock
	// Pods, when set, lists the pods the kubelet runs (its pod-resources
	// List): the object then carries their fingerprint, asked at start
	// and every PodsEvery (default 10s), and written again when it
	// changes. A failed List keeps the last fingerprint.
	Pods      func(context.Context) ([]Pod, error)
	PodsEvery time.Duration
}

// Publisher keeps the Node's NodeResourceTopology object equal to the
// newest machine model, with server-side apply (field manager
// node-resized, forced) and an owner reference to the Node, so that the
// object goes when the Node does. It is safe for concurrent use; Run must
// be called once.
type Publisher struct {
	opts  Options
	nodes dynamic.NamespaceableResourceInterface
	nrts  dynamic.NamespaceableResourceInterface
	log   *slog.Logger
	m     *metrics.Metrics
	clock clock.Clock
	wake  chan struct{}

	mu      sync.Mutex // guards the fields below
	want    *topology.Snapshot
	model   *topology.Snapshot // the newest model, written or not
	pods    string             // the pods' fingerprint; "" before the first List
	podsErr string             // the last List error, "" after a List that worked
	since   time.Time          // the first hardware event the wanted model has not yet been written for
	written []byte             // the last object the API server acknowledged, as applied
	applies uint64
	lastErr error
}

// New returns a publisher that reads the Node and writes its
// NodeResourceTopology through client (kube.Relay.Client).
func New(client dynamic.Interface, opts Options) *Publisher {
	retry.Defaults(&opts.Logger, &opts.Metrics, &opts.Clock, &opts.MinBackoff, &opts.MaxBackoff, 200*time.Millisecond, 30*time.Second)
	if opts.PodsEvery <= 0 {
		opts.PodsEvery = 10 * time.Second
	}
	return &Publisher{
		opts:  opts,
		nodes: client.Resource(objects.Nodes),
		nrts:  client.Resource(Resource),
		log:   opts.Logger,
		m:     opts.Metrics,
		clock: opts.Clock,
		wake:  make(chan struct{}, 1),
	}
}

// Publish sets the model the object should show; since is the arrival of
// the hardware event that changed it (zero for none). It never blocks: the
// worker writes the newest model, so a burst of changes costs one write.
func (p *Publisher) Publish(snap *topology.Snapshot, since time.Time) {
	p.mu.Lock()
	// Keep the earliest unwritten hardware change for the latency.
	if p.want == nil || (!since.IsZero() && (p.since.IsZero() || since.Before(p.since))) {
		p.since = since
	}
	p.want, p.model = snap, snap
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stats are the publisher's counters.
type Stats struct {
	Applies   uint64
	Pending   bool
	LastError string
	// PodsFingerprint is the fingerprint of the pods the object carries
	// or is about to; "" when the pods are not listed (yet).
	PodsFingerprint string
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Applies: p.applies, Pending: p.want != nil, PodsFingerprint: p.pods}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	return s
}

// Run writes the wanted models until ctx is done. A failed write is
// retried with jittered exponential backoff, always with the newest
// model; a newer model is written at once, and so is the newest model
// with the pods' new fingerprint. It returns nil once ctx is done.
func (p *Publisher) Run(ctx context.Context) error {
	backoff := retry.Backoff(p.opts.MinBackoff, p.opts.MaxBackoff)
	var again clock.Timer
	defer func() { retry.Stop(again) }()
	var podsTimer clock.Timer // asks for the pods again when it fires
	if p.opts.Pods != nil {
		p.listPods(ctx) // before the first write
		podsTimer = p.clock.NewTimer(p.opts.PodsEvery)
		defer func() { retry.Stop(podsTimer) }()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-retry.C(again):
		case <-retry.C(podsTimer):
			changed := p.listPods(ctx)
			podsTimer.Reset(p.opts.PodsEvery)
			if !changed || again != nil {
				continue // nothing new, or a retry already waits
			}
		}
		retry.Stop(again)
		again = nil
		p.mu.Lock()
		want, since, pods := p.want, p.since, p.pods
		p.mu.Unlock()
		if want == nil {
			continue
		}
		err := p.write(ctx, want, since, pods)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			delay := retry.After(&backoff, err)
			p.failed(err, delay)
			again = p.clock.NewTimer(delay)
			continue
		}
		backoff = retry.Backoff(p.opts.MinBackoff, p.opts.MaxBackoff)
	}
}

// write reads the Node's UID (a Node deleted and created again under the
// same name gets the new one) and applies the object built from snap,
// unless the API server already has exactly that object from this
// publisher.
func (p *Publisher) write(ctx context.Context, snap *topology.Snapshot, since time.Time, pods string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	node, err := p.nodes.Get(ctx, p.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Node %s for its UID: %w", p.opts.NodeName, err)
	}
	obj := Build(p.opts.NodeName, node.GetUID(), snap, p.opts.Kubelet, pods)
	data, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode NodeResourceTopology %s: %w", p.opts.NodeName, err)
	}
	p.mu.Lock()
	same := slices.Equal(data, p.written)
	p.mu.Unlock()
	if !same {
		force := true
		_, err = p.nrts.Patch(ctx, p.opts.NodeName, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: objects.FieldManager, Force: &force})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("apply NodeResourceTopology %s: %w (is the %s CRD installed?)", p.opts.NodeName, err, Resource.GroupResource())
		}
		if err != nil {
			return fmt.Errorf("apply NodeResourceTopology %s: %w", p.opts.NodeName, err)
		}
	}
	p.mu.Lock()
	p.lastErr = nil
	p.written = data
	if !same {
		p.applies++
	}
	if p.want == snap && p.pods == pods {
		p.want, p.since = nil, time.Time{} // nothing newer arrived meanwhile
	}
	p.mu.Unlock()
	if same {
		return nil
	}
	args := []any{"node", p.opts.NodeName, "zones", zoneSummary(obj.Zones)}
	if pods != "" {
		args = append(args, "pods_fingerprint", pods)
	}
	if !since.IsZero() {
		args = append(args, "latency", p.clock.Since(since))
	}
	p.log.Info("NodeResourceTopology applied", args...)
	return nil
}

// listPods asks for the kubelet's pods and reports whether their
// fingerprint changed; the newest model is then wanted again, to be
// written with it.
func (p *Publisher) listPods(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := p.opts.Pods(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != p.podsErr {
			p.podsErr = msg // said once, not every poll
			p.log.Warn("list the kubelet's pods for the NodeResourceTopology's pod fingerprint; keeping the last one",
				"node", p.opts.NodeName, "err", err, "fingerprint", p.pods)
		}
		return false
	}
	p.podsErr = ""
	fp := PodFingerprint(pods)
	if fp == p.pods {
		return false
	}
	p.log.Debug("the kubelet's pods changed", "node", p.opts.NodeName, "pods", len(pods), "fingerprint", fp)
	p.pods = fp
	if p.want == nil {
		p.want = p.model
	}
	return p.want != nil
}

// failed records a failed write.
func (p *Publisher) failed(err error, retryIn time.Duration) {
	p.mu.Lock()
	p.lastErr = err
	p.written = nil // the object may have changed or gone meanwhile
	p.mu.Unlock()
	p.m.ResizeErrors.WithLabelValues("api_topology").Inc()
	p.log.Warn("publish NodeResourceTopology; will retry", "node", p.opts.NodeName, "err", err, "in", retryIn)
}

// zoneSummary is "node-0 cpu 2 memory 2Gi, node-1 ..." for the log.
func zoneSummary(zones []Zone) string {
	parts := make([]string, len(zones))
	for i, z := range zones {
		var b strings.Builder
		b.WriteString(z.Name)
		for _, r := range z.Resources {
			if resources.Headline(r.Name) {
				fmt.Fprintf(&b, " %s %s", r.Name, r.Capacity.String())
			}
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, ", ")
}

// Delete deletes the Node's NodeResourceTopology object, for
// node-resized --uninstall, and reports whether there was one. No object,
// or no such resource (the CRD not installed), is no error.
func Delete(ctx context.Context, client dynamic.Interface, node string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := client.Resource(Resource).Delete(ctx, node, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete NodeResourceTopology %s: %w", node, err)
	}
	return true, nil
}
