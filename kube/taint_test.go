package kube

import (
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/types"
)

var otherTaint = corev1.Taint{Key: "example.com/maintenance", Value: "x", Effect: corev1.TaintEffectNoExecute}

// specPatches counts the patches of the Node object itself (not its
// status), refusing them with err while err is set, and failing the
// first conflicts ones with a conflict.
type specPatches struct {
	mu        sync.Mutex
	n         int
	err       error
	conflicts int
}

func (p *specPatches) react(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "" {
		return false, nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if p.conflicts > 0 {
		p.conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "worker-1", nil)
	}
	if p.err != nil {
		return true, nil, p.err
	}
	return false, nil, nil
}

func (p *specPatches) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func taintsOf(t *testing.T, h *relayHarness) []corev1.Taint {
	t.Helper()
	return typedNode(t, h.client).Spec.Taints
}

func startTaintRelay(t *testing.T, on bool, sp *specPatches) *relayHarness {
	h := startRelayWith(t, 0, func(n *corev1.Node, o *Options) {
		n.Spec.Taints = []corev1.Taint{otherTaint}
		o.Taint = on
	})
	h.client.PrependReactor("patch", "nodes", sp.react)
	return h
}

func tainted(s types.NodeStatus) types.NodeStatus { s.Taint = true; return s }

func TestTaintSetWithTheStatusAndLiftedAfter(t *testing.T) {
	sp := &specPatches{conflicts: 1}
	h := startTaintRelay(t, true, sp)
	h.r.Publish(tainted(status(2, types.ReasonInProgress)))
	kubetest.WaitFor(t, "the status patch", func() bool { return h.r.Stats().Patches == 1 })
	if got, want := taintsOf(t, h), []corev1.Taint{otherTaint, staleTaint}; !slices.Equal(got, want) {
		t.Fatalf("taints %+v, want %+v", got, want)
	}
	if sp.count() != 2 {
		t.Errorf("%d taint patches, want 2 (a conflict, retried)", sp.count())
	}
	// The same wanted taint again: no second taint patch.
	h.r.Publish(tainted(status(2, types.ReasonEmergencyReduced)))
	kubetest.WaitFor(t, "the second status patch", func() bool { return h.r.Stats().Patches == 2 })
	if sp.count() != 2 {
		t.Errorf("%d taint patches after an unchanged taint, want 2", sp.count())
	}
	h.r.Publish(status(2, types.ReasonAccepted))
	kubetest.WaitFor(t, "the taint lifted", func() bool { return len(taintsOf(t, h)) == 1 })
	if got := taintsOf(t, h); !slices.Equal(got, []corev1.Taint{otherTaint}) {
		t.Fatalf("taints %+v: another's taint must stay", got)
	}
}

func TestTaintTurnedOff(t *testing.T) {
	sp := &specPatches{}
	h := startTaintRelay(t, false, sp)
	h.r.Publish(tainted(status(2, types.ReasonInProgress)))
	kubetest.WaitFor(t, "the status patch", func() bool { return h.r.Stats().Patches == 1 })
	if sp.count() != 0 || len(taintsOf(t, h)) != 1 {
		t.Fatalf("%d taint patches, taints %+v, with the taint off", sp.count(), taintsOf(t, h))
	}
}

// NodeRestriction refuses a node identity's change of its taints: the
// status is still patched, the refusal counted once and not retried
// while the same taint is wanted.
func TestTaintRefusedByNodeRestriction(t *testing.T) {
	sp := &specPatches{err: apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "worker-1",
		errForbiddenTaints)}
	h := startTaintRelay(t, true, sp)
	h.r.Publish(tainted(status(2, types.ReasonInProgress)))
	kubetest.WaitFor(t, "the status patch", func() bool { return h.r.Stats().Patches == 1 })
	h.r.Publish(tainted(status(2, types.ReasonEmergencyReduced)))
	kubetest.WaitFor(t, "the second status patch", func() bool { return h.r.Stats().Patches == 2 })
	if sp.count() != 1 || testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("api_patch")) != 1 {
		t.Errorf("%d taint patches, %v errors; want one of each", sp.count(), testutil.ToFloat64(h.m.ResizeErrors.WithLabelValues("api_patch")))
	}
}

var errForbiddenTaints = apierrors.NewBadRequest(`node "worker-1" is not allowed to modify taints`)
