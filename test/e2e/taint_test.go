package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/node-resized/node-resized/test/cluster"
)

const staleTaintKey = "node-resized.io/capacity-changing"

func hasStaleTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == staleTaintKey && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// TestNoSchedulingWhileTheKubeletIsStale: CPUs go away, and the stand-in
// kubelet keeps its boot-time view (it reverts status.capacity to it every
// 10 s, and it is not restarted: --kubelet-restart=never). From the clamp
// on, the Node carries the NoSchedule taint, so a pod created in that
// window stays Pending however the capacity flips, even one that fits.
// Once the kubelet restarts on the smaller machine and reports it, the
// taint goes and the scheduler places what fits, and only that.
//
// The daemon runs under the admin identity, standing in for the dedicated
// identity of packaging/rbac.yaml: NodeRestriction forbids a node's own
// identity to change its taints, and the test shows that first.
func TestNoSchedulingWhileTheKubeletIsStale(t *testing.T) {
	e := setup(t, nodeTaint, envOptions{cpus: 4, args: []string{
		"--taint-while-stale", "--kubelet-restart=never",
		"--kubelet-field-manager", "node-resized-stand-in-kubelet",
		"--kubeconfig", cl.AdminKubeconfig(),
	}})
	n := e.waitState(4, "Accepted")
	if hasStaleTaint(n) {
		t.Fatalf("tainted before any loss: %+v", n.Spec.Taints)
	}

	// NodeRestriction: the node's own identity may not change its taints.
	ncfg, err := cl.NodeConfig(nodeTaint)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := kubernetes.NewForConfigOrDie(ncfg)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{{Key: staleTaintKey, Effect: corev1.TaintEffectNoSchedule}}}})
	_, err = nodeClient.CoreV1().Nodes().Patch(context.Background(), nodeTaint, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "not allowed to modify taints") {
		t.Fatalf("a node identity's taint patch: %v; want NodeRestriction's refusal", err)
	}
	t.Logf("NodeRestriction refuses the node identity: %v", err)

	// The stand-in starts again as a kubelet with the default evictionHard
	// (memory.available 100Mi): its allocatable is then the daemon's, and
	// the two agree on everything while the machine is as it booted.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	boot := e.kubelet.Machine()
	boot.Reserved = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}
	if err := e.kubelet.Restart(rctx, boot); err != nil {
		t.Fatal(err)
	}

	// Two of the four CPUs go. The taint is set before the status says 2.
	e.setCPUs(2)
	n = e.waitNode("cpu 2 published", func(n *corev1.Node) bool {
		q := n.Status.Capacity[corev1.ResourceCPU]
		return q.Value() == 2
	})
	if !hasStaleTaint(n) {
		t.Fatalf("the Node shows cpu 2 without the taint: %+v", n.Spec.Taints)
	}
	e.waitEvent("Warning/EmergencyCapacityReduced")
	if st := e.mustStatus(); st.Kubernetes == nil || st.Kubernetes.Taint != staleTaintKey+":NoSchedule" {
		t.Fatalf("the daemon's status does not show the taint: %+v", st.Kubernetes)
	}
	// The stale kubelet rewrites status.capacity to its boot-time 4 CPUs
	// within 10 s: that is how the daemon learns its view.
	waitKubeletView(t, e, 4)

	pods := e.admin.CoreV1().Pods(metav1.NamespaceDefault)
	small, big := pod("e2e-taint-fits", nodeTaint, "1"), pod("e2e-taint-too-big", nodeTaint, "3")
	create(t, pods, small)
	create(t, pods, big)
	waitUntolerated(t, pods, small.Name)
	if n, err := e.admin.CoreV1().Nodes().Get(context.Background(), nodeTaint, metav1.GetOptions{}); err != nil || len(n.Spec.Taints) != 1 || !hasStaleTaint(n) {
		t.Fatalf("the Node's taints: %+v, %v; want only %s", n.Spec.Taints, err, staleTaintKey)
	}
	// Through at least one more revert of status.capacity by the stale
	// kubelet (every 10 s), and the daemon's answer: still Pending, still
	// tainted.
	for deadline := time.Now().Add(2*cluster.DefaultNodeStatusUpdateFrequency + 2*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, err := e.admin.CoreV1().Nodes().Get(context.Background(), nodeTaint, metav1.GetOptions{})
		if err != nil {
			continue
		}
		q := n.Status.Capacity[corev1.ResourceCPU]
		if !hasStaleTaint(n) {
			t.Fatalf("taint lifted while the kubelet still runs with its boot-time view (capacity cpu %s)", q.String())
		}
		for _, name := range []string{small.Name, big.Name} {
			if p, err := pods.Get(context.Background(), name, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
				t.Fatalf("pod %s bound to %s while the kubelet is stale", name, p.Spec.NodeName)
			}
		}
	}

	// The kubelet restarts on the machine as it is now: 2 CPUs. (Let a
	// second pass, so that its status write is later than the daemon's
	// last one: managedFields have whole seconds.)
	time.Sleep(1100 * time.Millisecond)
	m := boot.Clone()
	m.Capacity[corev1.ResourceCPU] = *resource.NewQuantity(2, resource.DecimalSI)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.kubelet.Restart(ctx, m); err != nil {
		t.Fatal(err)
	}
	n = e.waitNode("taint lifted once the kubelet reports 2 CPUs", func(n *corev1.Node) bool { return !hasStaleTaint(n) })
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 2 {
		t.Fatalf("taint lifted with capacity cpu %s", q.String())
	}
	waitBound(t, pods, small.Name, nodeTaint)
	waitUnschedulable(t, pods, big.Name, corev1.ResourceCPU)
	if st := e.mustStatus(); st.Kubernetes == nil || st.Kubernetes.Taint != "" {
		t.Fatalf("the daemon's status shows a taint after it was lifted: %+v", st.Kubernetes)
	}
}

// waitUntolerated waits until the scheduler reports pod name Unschedulable
// for the node's taint (the scheduler does not name it; the test checks
// that the Node carries no other).
func waitUntolerated(t *testing.T, pods typedcorev1.PodInterface, name string) {
	t.Helper()
	var p *corev1.Pod
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if p = got; p.Spec.NodeName != "" {
			t.Fatalf("pod %s bound to %s while the Node is tainted", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "untolerated taint") {
				t.Logf("pod %s: %s", name, c.Message)
				return
			}
		}
	}
	t.Fatalf("pod %s not reported Unschedulable for the taint within 30s; conditions %+v", name, podConditions(p))
}

// waitKubeletView waits until the daemon's /v1/status shows the kubelet's
// view of the machine with cpus CPUs.
func waitKubeletView(t *testing.T, e *env, cpus int64) {
	t.Helper()
	var last any
	for deadline := time.Now().Add(2*cluster.DefaultNodeStatusUpdateFrequency + 5*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var st struct {
			Kubelet *struct {
				Capacity corev1.ResourceList `json:"capacity"`
			} `json:"kubelet"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := e.daemonAPI(ctx, "GET", "/v1/status", &st)
		cancel()
		if err != nil || st.Kubelet == nil {
			continue
		}
		last = st.Kubelet.Capacity
		if q, ok := st.Kubelet.Capacity[corev1.ResourceCPU]; ok && q.Value() == cpus {
			return
		}
	}
	n, _ := e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	var mfs []string
	if n != nil {
		for _, mf := range n.ManagedFields {
			mfs = append(mfs, fmt.Sprintf("%s %s %s %v %s", mf.Manager, mf.Operation, mf.Subresource, mf.Time, mf.FieldsV1))
		}
	}
	t.Fatalf("the daemon does not know the kubelet's view of %d CPUs; last %v; the Node's managedFields:\n%s", cpus, last, strings.Join(mfs, "\n"))
}
