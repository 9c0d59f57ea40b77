package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestEmergencyEviction takes memory away (a balloon: MemTotal drops with
// no uevent) from a node whose pods then no longer fit, and checks the
// evictions: in the kubelet's order, through the Eviction API, held up by a
// PodDisruptionBudget (reported in the condition) until it goes.
func TestEmergencyEviction(t *testing.T) {
	e := setup(t, nodeEvict, envOptions{cpus: 4})
	e.waitState(4, "Accepted")
	ctx := context.Background()
	for name, value := range map[string]int32{"e2e-low": 100, "e2e-high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	pods := e.admin.CoreV1().Pods(metav1.NamespaceDefault)
	mk := func(name, class string, labels map[string]string) {
		p := pod(name, nodeEvict, "100m")
		p.Labels = labels
		p.Spec.PriorityClassName = class
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}
	mk("evict-low-1", "e2e-low", nil)
	mk("evict-low-2", "e2e-low", map[string]string{"app": "guarded"})
	mk("evict-high", "e2e-high", nil)
	pdbs := e.admin.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault)
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	if _, err := pdbs.Create(ctx, pdb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pdbs.Delete(context.Background(), pdb.Name, metav1.DeleteOptions{}) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		running := 0
		for _, p := range list.Items {
			if p.Spec.NodeName == nodeEvict && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if err == nil && running == 3 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range list.Items {
				t.Logf("pod %s: node %q phase %s conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
			}
			t.Fatalf("%d of 3 pods running on %s", running, nodeEvict)
		}
	}

	// The balloon inflates: 4Gi → 2Gi, allocatable 1.9Gi: one 1Gi pod fits.
	e.tree.SetMemTotalKB(2 << 20)
	e.tree.SetNodeMemTotalKB(0, 2<<20)
	n := e.waitNode("the eviction held up by the PodDisruptionBudget", func(n *corev1.Node) bool {
		c := condition(n)
		return c != nil && c.Reason == "InProgress" && strings.Contains(c.Message, "PodDisruptionBudget")
	})
	t.Logf("condition while blocked: %s", condition(n).Message)
	gone := func(name string) bool {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
	}
	if !gone("evict-low-1") {
		t.Error("the first low-priority pod was not evicted")
	}
	if gone("evict-low-2") || gone("evict-high") {
		t.Error("a pod protected by the budget, or ranked after it, was evicted")
	}
	e.waitEvent("Warning/EmergencyCapacityReduced")
	e.waitEvent("Warning/NodeCapacityExceeded")

	// The budget goes: the eviction finishes and the change is accepted.
	if err := pdbs.Delete(ctx, pdb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNode("Accepted after the eviction", func(n *corev1.Node) bool {
		c := condition(n)
		q := n.Status.Capacity[corev1.ResourceMemory]
		return c != nil && c.Reason == "Accepted" && q.Value() == 2<<30
	})
	if !gone("evict-low-2") {
		t.Error("the guarded pod was not evicted once its budget was gone")
	}
	if gone("evict-high") {
		t.Error("the high-priority pod was evicted though the rest fit")
	}
	if !e.reasons.inOrder("Accepted", "InProgress", "Accepted") {
		t.Errorf("reasons %s, want Accepted → InProgress → Accepted", e.reasons)
	}
}
