package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/types"
)

// The taint node-resized sets while the kubelet has not adopted a loss.
var staleTaint = corev1.Taint{Key: types.TaintKey, Effect: corev1.TaintEffectNoSchedule}

// syncTaint makes the Node carry the NoSchedule taint types.TaintKey or
// not, when Options.Taint turns the taint on; it does nothing when the
// Node was last seen as wanted. Taints live in spec.taints, which a
// status patch cannot change, so this is a patch of the Node object
// itself: read, change this one taint, and patch the list back with the
// resourceVersion read as a precondition (spec.taints is replaced as a
// whole by a strategic merge), retried on a conflict. The Node authorizer
// lets a node patch its own Node, but the NodeRestriction admission plugin
// forbids a node identity to change its taints: that refusal is logged
// once and not retried until the wanted taint changes.
func (r *Relay) syncTaint(ctx context.Context, on bool) error {
	if !r.opts.Taint {
		return nil
	}
	r.mu.Lock()
	done := r.taintSeen != nil && *r.taintSeen == on
	refused := r.taintRefused != nil && *r.taintRefused == on
	r.mu.Unlock()
	if done || refused {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	for range 5 {
		var changed bool
		changed, err = r.setTaint(ctx, on)
		if apierrors.IsConflict(err) {
			continue
		}
		if err == nil {
			r.mu.Lock()
			r.taintSeen, r.taintRefused = &on, nil
			r.mu.Unlock()
			if changed {
				r.log.Info("Node taint set", "node", r.opts.NodeName, "taint", types.TaintKey+":NoSchedule", "on", on)
			}
		}
		break
	}
	if apierrors.IsForbidden(err) {
		r.mu.Lock()
		r.taintRefused, r.taintSeen = &on, nil
		r.mu.Unlock()
		r.m.ResizeErrors.WithLabelValues("api_patch").Inc()
		r.log.Error("the Node's taint cannot be changed with this identity: the NodeRestriction admission plugin forbids a node to change its own taints; "+
			"run node-resized with a dedicated identity (packaging/rbac.yaml) or without --taint-while-stale",
			"node", r.opts.NodeName, "taint", types.TaintKey, "on", on, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("set taint %s on Node %s to %v: %w", types.TaintKey, r.opts.NodeName, on, err)
	}
	return nil
}

// setTaint reads the Node and patches its taints if they are not as
// wanted; it reports whether it patched.
func (r *Relay) setTaint(ctx context.Context, on bool) (bool, error) {
	n, err := r.getNode(ctx)
	if err != nil {
		return false, err
	}
	taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool {
		return t.Key == staleTaint.Key && t.Effect == staleTaint.Effect
	})
	if has := len(taints) != len(n.Spec.Taints); has == on {
		return false, nil
	}
	if on {
		taints = append(taints, staleTaint)
	}
	body := map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"taints": taints},
	}
	data, err := json.Marshal(body)
	if err != nil {
		return false, fmt.Errorf("encode taint patch: %w", err)
	}
	_, err = r.client.Resource(objects.Nodes).Patch(ctx, r.opts.NodeName, k8stypes.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: objects.FieldManager})
	return err == nil, err
}

// getNode reads the Node through the relay's client (not the watch's
// cache: a patch that takes its resourceVersion as a precondition needs
// the newest). Errors are the API server's, unwrapped, so that
// apierrors.IsConflict and the like see them.
func (r *Relay) getNode(ctx context.Context) (*corev1.Node, error) {
	u, err := r.client.Resource(objects.Nodes).Get(ctx, r.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	n := &corev1.Node{}
	if err := objects.FromUnstructured(u, n); err != nil {
		return nil, err
	}
	return n, nil
}
