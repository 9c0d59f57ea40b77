package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod returns a pod pinned to node that requests cpu.
func pod(name, node, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name:  "c",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu),
				}},
			}},
		},
	}
}

// TestSchedulerFollowsCapacity is KEP-3953's Layer 1 tests 1-3 with the
// real daemon: the API server takes its capacity patches on a Ready node;
// a pending pod that does not fit is scheduled after an upscale; after a
// downscale a pod that no longer fits stays Pending.
func TestSchedulerFollowsCapacity(t *testing.T) {
	e := setup(t, nodeSched, envOptions{cpus: 2})
	n := e.waitState(2, "Accepted")
	if c := condition(n); c.Status != corev1.ConditionTrue {
		t.Errorf("condition %+v, want True/Accepted", c)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Fatalf("Node not Ready: %+v", n.Status.Conditions)
	}

	ctx := context.Background()
	pods := e.admin.CoreV1().Pods(metav1.NamespaceDefault)
	big := pod("e2e-needs-3-cpus", nodeSched, "3")
	_ = pods.Delete(ctx, big.Name, metav1.DeleteOptions{})
	if _, err := pods.Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Delete(context.Background(), big.Name, metav1.DeleteOptions{}) })
	time.Sleep(2 * time.Second)
	if p, _ := pods.Get(ctx, big.Name, metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Fatalf("a 3-CPU pod was bound to a 2-CPU node")
	}

	// Two CPUs come online: the daemon publishes 4 and the pod is bound.
	e.setCPUs(4)
	e.waitState(4, "Accepted")
	bound := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !bound; time.Sleep(100 * time.Millisecond) {
		p, err := pods.Get(ctx, big.Name, metav1.GetOptions{})
		bound = err == nil && p.Spec.NodeName == nodeSched
	}
	if !bound {
		t.Fatal("the pending pod was not scheduled after the upscale")
	}

	// They go away again: a new 3-CPU pod must stay Pending.
	e.setCPUs(2)
	e.waitState(2, "Accepted")
	late := pod("e2e-too-late", nodeSched, "3")
	_ = pods.Delete(ctx, late.Name, metav1.DeleteOptions{})
	if _, err := pods.Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Delete(context.Background(), late.Name, metav1.DeleteOptions{}) })
	var unschedulable bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !unschedulable; time.Sleep(100 * time.Millisecond) {
		p, err := pods.Get(ctx, late.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if p.Spec.NodeName != "" {
			t.Fatal("a 3-CPU pod was bound after the node went down to 2 CPUs")
		}
		for _, c := range p.Status.Conditions {
			unschedulable = unschedulable || (c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable)
		}
	}
	if !unschedulable {
		t.Error("the scheduler never reported the pod Unschedulable")
	}
}

// TestPathA1 is the orchestrated upscale: the spec is raised first and
// held Infeasible until the hardware arrives.
func TestPathA1(t *testing.T) {
	e := setup(t, nodeA1, envOptions{cpus: 2})
	e.waitState(2, "Accepted")
	e.configure(`{"cpu":"4"}`)
	n := e.waitState(2, "Infeasible")
	if c := condition(n); c.Status != corev1.ConditionFalse {
		t.Errorf("Infeasible with status %s", c.Status)
	}
	e.waitEvent("Warning/CapacityInfeasible")
	e.setCPUs(4)
	e.waitState(4, "Accepted")
	if !e.reasons.inOrder("Accepted", "Infeasible", "Accepted") {
		t.Errorf("reasons %s, want Accepted → Infeasible → Accepted", e.reasons)
	}
	e.waitEvent("Normal/CapacityAccepted")
}

// TestPathA2 is the orchestrated downscale: the spec is lowered below the
// hardware; status is lowered first and the change completes.
func TestPathA2(t *testing.T) {
	e := setup(t, nodeA2, envOptions{cpus: 4})
	e.configure(`{"cpu":"4"}`)
	e.waitState(4, "Accepted")
	e.configure(`{"cpu":"2","memory":"3Gi"}`)
	n := e.waitState(2, "Accepted")
	if q := n.Status.Capacity[corev1.ResourceMemory]; q.Value() != 3<<30 {
		t.Errorf("memory capacity %s, want 3Gi", q.String())
	}
	// The hardware still has 4 CPUs: the published capacity is the spec.
	st, err := e.d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if q := st.Physical["cpu"]; q.Value() != 4 {
		t.Errorf("physical cpu %s, want 4", q.String())
	}
	// The daemon went through InProgress (status first, then cgroups and
	// evictions) before Accepted; the API may only have seen the end.
	var seq []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		seq = seq[:0]
		for _, r := range e.d.Stderr.Records("decided") {
			seq = append(seq, fmt.Sprint(r["condition"]))
		}
		if inOrder(seq, "Accepted", "InProgress", "Accepted") {
			break
		}
	}
	if !inOrder(seq, "Accepted", "InProgress", "Accepted") {
		t.Errorf("decided conditions %v, want Accepted … InProgress … Accepted", seq)
	}
}

// TestPathB is the emergency: the hardware goes first.
func TestPathB(t *testing.T) {
	e := setup(t, nodeB, envOptions{cpus: 4})
	e.configure(`{"cpu":"4"}`)
	e.waitState(4, "Accepted")
	e.setCPUs(2)
	n := e.waitState(2, "EmergencyReduced")
	if c := condition(n); c.Status != corev1.ConditionFalse {
		t.Errorf("EmergencyReduced with status %s", c.Status)
	}
	e.waitEvent("Warning/EmergencyCapacityReduced")
	// The oversized spec is ignored until it is lowered to what is there.
	e.configure(`{"cpu":"2"}`)
	e.waitState(2, "Accepted")
	if !e.reasons.inOrder("Accepted", "EmergencyReduced", "Accepted") {
		t.Errorf("reasons %s, want Accepted → EmergencyReduced → Accepted", e.reasons)
	}
}

// TestAPIServerOutage changes the hardware while the API server is down:
// the node-local model changes at once, and the Node ends right once the
// API server is back.
func TestAPIServerOutage(t *testing.T) {
	e := setup(t, nodeOutage, envOptions{cpus: 4, kubeletGap: time.Hour})
	e.waitState(4, "Accepted")
	if err := cl.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = cl.StartAPIServer(context.Background())
		}
	})
	e.setCPUs(2)
	st, err := e.d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if q := st.Physical["cpu"]; q.Value() != 2 {
		t.Errorf("during the outage the daemon reports cpu %s, want 2 at once", q.String())
	}
	time.Sleep(2 * time.Second) // several failed patch attempts
	st, _ = e.d.Client.Status(context.Background())
	if st.Kubernetes == nil || !st.Kubernetes.PatchPending || st.Kubernetes.PatchError == "" {
		t.Errorf("during the outage: %+v; want a pending patch and its error", st.Kubernetes)
	}
	e.setCPUs(3) // a second change while the server is away: the newest wins
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	e.waitState(3, "Accepted")
}

func inOrder(seq []string, want ...string) bool {
	i := 0
	for _, r := range seq {
		if i < len(want) && r == want[i] {
			i++
		}
	}
	return i == len(want)
}
