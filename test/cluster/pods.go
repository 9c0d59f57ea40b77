package cluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
)

// podLoop plays the kubelet's part towards the pods bound to its Node, with
// no containers behind them: a pod bound here is reported Running (its
// containers "started"), and a pod being deleted (an eviction, a delete with
// grace) is deleted for good once its grace period would have let its
// containers stop, as the kubelet's final delete with grace 0 does. It polls
// every period.
func (k *StandInKubelet) podLoop(ctx context.Context, period time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		list, err := k.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.opts.NodeName).String(),
		})
		if err != nil {
			if ctx.Err() == nil {
				k.logf("list pods: %v", err)
			}
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			switch {
			case p.DeletionTimestamp != nil:
				zero := int64(0)
				err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
					GracePeriodSeconds: &zero,
					Preconditions:      &metav1.Preconditions{UID: &p.UID},
				})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					k.logf("delete terminated pod %s/%s: %v", p.Namespace, p.Name, err)
				} else if err == nil {
					k.logf("pod %s/%s terminated (no containers: the stand-in only reports it)", p.Namespace, p.Name)
				}
			case p.Status.Phase == corev1.PodPending:
				now := metav1.Now()
				p.Status.Phase = corev1.PodRunning
				p.Status.StartTime = &now
				p.Status.Conditions = append(p.Status.Conditions,
					corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
					corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
				if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					k.logf("report pod %s/%s running: %v", p.Namespace, p.Name, err)
				}
			}
		}
	}, period)
}
