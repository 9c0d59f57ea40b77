package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/types"
)

// Taking node-resized's marks off its Node, for node-resized --uninstall.
// The Node's capacity and allocatable are not written back: they are the
// kubelet's, and it writes its own view over them at its next status
// update (nodeStatusUpdateFrequency, 10 s by default), which is the Node
// as it would be without node-resized.

// ReasonRemoved is the reason of the Normal event RecordRemoval records.
const ReasonRemoved = "NodeResizedRemoved"

// callTimeout bounds each API call of the removal.
const callTimeout = 10 * time.Second

// RemoveCondition deletes node-resized's CapacityConfigured condition from
// the Node's status, and reports whether the Node had one. The delete is a
// strategic-merge patch of nodes/status with "$patch": "delete" on the
// condition of that type (conditions merge by type), so no other condition
// is touched and a kubelet's status write at the same moment is not
// overwritten. The Node authorizer lets a node's own identity do it.
func (r *Relay) RemoveCondition(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	n, err := r.getNode(ctx)
	if err != nil {
		return false, fmt.Errorf("read Node %s: %w", r.opts.NodeName, err)
	}
	found := false
	for _, c := range n.Status.Conditions {
		found = found || c.Type == types.ConditionType
	}
	if !found {
		return false, nil
	}
	body, err := json.Marshal(map[string]any{
		"status": map[string]any{
			"conditions": []map[string]any{{"type": types.ConditionType, "$patch": "delete"}},
		},
	})
	if err != nil {
		return false, fmt.Errorf("encode the condition's removal: %w", err)
	}
	_, err = r.client.Resource(objects.Nodes).Patch(ctx, r.opts.NodeName, k8stypes.StrategicMergePatchType, body,
		metav1.PatchOptions{FieldManager: objects.FieldManager}, "status")
	if err != nil {
		return false, fmt.Errorf("remove condition %s from Node %s: %w", types.ConditionType, r.opts.NodeName, err)
	}
	return true, nil
}

// TaintForbiddenError is the API server's refusal to let this identity
// change the Node's taints: the NodeRestriction admission plugin forbids
// a node's own identity to.
type TaintForbiddenError struct {
	Node string
	Err  error
}

func (e *TaintForbiddenError) Error() string {
	return fmt.Sprintf("this identity may not change the taints of Node %s (the NodeRestriction admission plugin forbids a node's own identity to): "+
		"remove it with kubectl taint node %s %s:NoSchedule-, or run again with a --kubeconfig whose identity may patch the Node (packaging/rbac.yaml): %v",
		e.Node, e.Node, types.TaintKey, e.Err)
}

func (e *TaintForbiddenError) Unwrap() error { return e.Err }

// RemoveTaint takes the NoSchedule taint types.TaintKey off the Node if
// it carries it, whether or not --taint-while-stale is on now (it may have
// been on before), and reports whether it did. Reading the Node needs no
// more than the node's own identity; changing its taints does (see
// TaintForbiddenError), so a Node without the taint asks for nothing more.
func (r *Relay) RemoveTaint(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var (
		removed bool
		err     error
	)
	for range 5 {
		if removed, err = r.setTaint(ctx, false); !apierrors.IsConflict(err) {
			break
		}
	}
	switch {
	case apierrors.IsForbidden(err):
		return false, &TaintForbiddenError{Node: r.opts.NodeName, Err: err}
	case err != nil:
		return false, fmt.Errorf("remove taint %s from Node %s: %w", types.TaintKey, r.opts.NodeName, err)
	}
	return removed, nil
}

// RecordRemoval records a Normal event ReasonRemoved on the Node with
// message (action Uninstall), and waits for the API server to take it
// (unlike Event, which queues).
func (r *Relay) RecordRemoval(ctx context.Context, message string) error {
	ev := r.events.event(corev1.EventTypeNormal, ReasonRemoved, "Uninstall", message)
	if err := r.events.create(ctx, ev); err != nil {
		return fmt.Errorf("record event %s on Node %s: %w", ReasonRemoved, r.opts.NodeName, err)
	}
	return nil
}
