package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const capacityConfigured corev1.NodeConditionType = "CapacityConfigured"

// machine is a boot-time view with cpu and memory capacity, 100Gi of
// ephemeral storage and the kubelet's default 100Mi memory eviction
// threshold reserved.
func machine(cpu, memory string) MachineView {
	return MachineView{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(cpu),
			corev1.ResourceMemory:           resource.MustParse(memory),
			corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		},
		Reserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
	}
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// nodeClientFor is a client with node's identity, separate from any
// stand-in kubelet's.
func nodeClientFor(t *testing.T, c *Cluster, node string) kubernetes.Interface {
	t.Helper()
	cfg, err := c.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	return clientFor(t, cfg)
}

// startKubelet starts a stand-in kubelet for node, stopped and its Node
// deleted when the test ends.
func startKubelet(ctx context.Context, t *testing.T, c *Cluster, opts KubeletOptions) *StandInKubelet {
	t.Helper()
	kc, err := c.NodeKubeconfig(opts.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	opts.Kubeconfig = kc
	opts.Logf = t.Logf
	k, err := StartStandInKubelet(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	admin := clientFor(t, c.AdminConfig())
	t.Cleanup(func() {
		k.Stop()
		if c.Exited() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = admin.CoreV1().Nodes().Delete(ctx, opts.NodeName, metav1.DeleteOptions{})
		}
	})
	return k
}

// eventually polls cond every interval until it returns true, an error, or
// ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, interval time.Duration, cond func() (bool, error)) {
	t.Helper()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

func getNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	return n
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func waitReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	eventually(ctx, t, "node "+name+" Ready", 100*time.Millisecond, func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = n
		c := condition(n, corev1.NodeReady)
		return c != nil && c.Status == corev1.ConditionTrue, nil
	})
	return node
}

// capacityPatch is what node-resized sends: a strategic merge patch on the
// status subresource with capacity, allocatable and its condition.
func capacityPatch(cpu, memory, allocMemory string, cond corev1.NodeCondition) []byte {
	p := map[string]any{"status": map[string]any{
		"capacity":    map[string]string{"cpu": cpu, "memory": memory},
		"allocatable": map[string]string{"cpu": cpu, "memory": allocMemory},
		"conditions":  []corev1.NodeCondition{cond},
	}}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

func patchStatus(ctx context.Context, cs kubernetes.Interface, node string, patch []byte) (*corev1.Node, error) {
	return cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

func accepted(now time.Time) corev1.NodeCondition {
	ts := metav1.NewTime(now.Truncate(time.Second))
	return corev1.NodeCondition{
		Type: capacityConfigured, Status: corev1.ConditionTrue, Reason: "Accepted",
		Message: "target capacity applied", LastHeartbeatTime: ts, LastTransitionTime: ts,
	}
}

func quantity(rl corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := rl[name]
	if !ok {
		return "<none>"
	}
	return q.String()
}

// KEP-3953 layer 1, test 1: a Node registered (here by the stand-in
// kubelet) and Ready accepts a status patch of capacity, allocatable and a
// custom condition from a separate client with the node's own identity.
func TestNodeAcceptsCapacityAndConditionPatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := sharedCluster(t)
	admin := clientFor(t, c.AdminConfig())
	// A long update period, so the stand-in does not revert the patch
	// while this test looks at it (that is the next test's subject).
	startKubelet(ctx, t, c, KubeletOptions{NodeName: nodePatch, Machine: machine("2", "4Gi"), NodeStatusUpdateFrequency: time.Hour})

	n := waitReady(ctx, t, admin, nodePatch)
	if got := n.Annotations[StandInKubeletAnnotation]; got != "true" {
		t.Errorf("annotation %s = %q, want \"true\"", StandInKubeletAnnotation, got)
	}
	if got := n.Labels[corev1.LabelHostname]; got != nodePatch {
		t.Errorf("label %s = %q, want %q", corev1.LabelHostname, got, nodePatch)
	}
	if got := quantity(n.Status.Allocatable, corev1.ResourceMemory); got != "3996Mi" {
		t.Errorf("registered allocatable memory = %s, want 3996Mi (4Gi - 100Mi)", got)
	}
	for _, ct := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := condition(n, ct); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("condition %s = %+v, want False", ct, c)
		}
	}

	// The separate client: the node identity, as node-resized uses the
	// kubelet's kubeconfig.
	nodeClient := nodeClientFor(t, c, nodePatch)
	cond := accepted(time.Now())
	patched, err := patchStatus(ctx, nodeClient, nodePatch, capacityPatch("4", "8Gi", "8092Mi", cond))
	if err != nil {
		t.Fatalf("patching node status as system:node:%s: %v", nodePatch, err)
	}
	for _, n := range []*corev1.Node{patched, getNode(ctx, t, admin, nodePatch)} {
		if got := quantity(n.Status.Capacity, corev1.ResourceCPU); got != "4" {
			t.Errorf("capacity cpu = %s, want 4", got)
		}
		if got := quantity(n.Status.Capacity, corev1.ResourceMemory); got != "8Gi" {
			t.Errorf("capacity memory = %s, want 8Gi", got)
		}
		if got := quantity(n.Status.Allocatable, corev1.ResourceCPU); got != "4" {
			t.Errorf("allocatable cpu = %s, want 4", got)
		}
		if got := quantity(n.Status.Allocatable, corev1.ResourceMemory); got != "8092Mi" {
			t.Errorf("allocatable memory = %s, want 8092Mi", got)
		}
		got := condition(n, capacityConfigured)
		if got == nil || got.Status != cond.Status || got.Reason != cond.Reason || got.Message != cond.Message {
			t.Errorf("condition %s = %+v, want %+v", capacityConfigured, got, cond)
		}
		if r := condition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue {
			t.Errorf("Ready = %+v after the patch, want True", r)
		}
	}

	// The Node authorizer and NodeRestriction are in force: this identity
	// may not touch another Node.
	const other = "node-patch-other"
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer admin.CoreV1().Nodes().Delete(context.Background(), other, metav1.DeleteOptions{})
	_, err = patchStatus(ctx, nodeClient, other, capacityPatch("4", "8Gi", "8092Mi", cond))
	if !apierrors.IsForbidden(err) {
		t.Errorf("patching another node's status as system:node:%s: err = %v, want Forbidden", nodePatch, err)
	}
}

// The stand-in kubelet, like the kubelet, rewrites capacity and
// allocatable from its boot-time view within one update period, and leaves
// a condition it does not own exactly as it was.
func TestStandInKubeletRevertsCapacityKeepsCondition(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := sharedCluster(t)
	admin := clientFor(t, c.AdminConfig())
	const period = time.Second
	startKubelet(ctx, t, c, KubeletOptions{NodeName: nodeRevert, Machine: machine("2", "4Gi"), NodeStatusUpdateFrequency: period})
	waitReady(ctx, t, admin, nodeRevert)

	nodeClient := nodeClientFor(t, c, nodeRevert)
	cond := accepted(time.Now())
	if _, err := patchStatus(ctx, nodeClient, nodeRevert, capacityPatch("4", "8Gi", "8092Mi", cond)); err != nil {
		t.Fatal(err)
	}
	patchedAt := time.Now()

	var reverted *corev1.Node
	eventually(ctx, t, "stand-in kubelet reverting capacity", 20*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeRevert, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		reverted = n
		return quantity(n.Status.Capacity, corev1.ResourceCPU) == "2", nil
	})
	took := time.Since(patchedAt)
	t.Logf("capacity reverted %v after the patch (update period %v)", took.Round(time.Millisecond), period)
	if limit := period + 2*time.Second; took > limit {
		t.Errorf("revert took %v, want within one update period (%v) plus slack", took, period)
	}
	if got := quantity(reverted.Status.Capacity, corev1.ResourceMemory); got != "4Gi" {
		t.Errorf("capacity memory = %s after revert, want 4Gi", got)
	}
	if got := quantity(reverted.Status.Allocatable, corev1.ResourceCPU); got != "2" {
		t.Errorf("allocatable cpu = %s after revert, want 2", got)
	}
	if got := quantity(reverted.Status.Allocatable, corev1.ResourceMemory); got != "3996Mi" {
		t.Errorf("allocatable memory = %s after revert, want 3996Mi", got)
	}

	// Several more periods: the condition is still exactly what was written.
	time.Sleep(3 * period)
	n := getNode(ctx, t, admin, nodeRevert)
	checkConditionKept(t, n, cond)
	if got := quantity(n.Status.Capacity, corev1.ResourceCPU); got != "2" {
		t.Errorf("capacity cpu = %s, want 2", got)
	}
}

func checkConditionKept(t *testing.T, n *corev1.Node, want corev1.NodeCondition) {
	t.Helper()
	got := condition(n, want.Type)
	if got == nil {
		t.Fatalf("condition %s gone; conditions: %+v", want.Type, n.Status.Conditions)
	}
	if got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message ||
		!got.LastTransitionTime.Equal(&want.LastTransitionTime) || !got.LastHeartbeatTime.Equal(&want.LastHeartbeatTime) {
		t.Errorf("condition %s = %+v, want it untouched: %+v", want.Type, *got, want)
	}
}

// A restarted kubelet reads the machine again: after Restart the stand-in
// is NotReady for a moment, as a starting kubelet, then Ready with the new
// view's capacity (not the value someone patched), and it still leaves the
// custom condition alone.
func TestStandInKubeletRestartAdoptsNewMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := sharedCluster(t)
	admin := clientFor(t, c.AdminConfig())
	const notReadyFor = 2 * time.Second
	k := startKubelet(ctx, t, c, KubeletOptions{
		NodeName: nodeRestart, Machine: machine("2", "4Gi"),
		// No periodic revert during the test: what changes the Node is the
		// restart alone.
		NodeStatusUpdateFrequency: time.Hour, NotReadyAfterStart: notReadyFor,
	})
	n := getNode(ctx, t, admin, nodeRestart)
	if r := condition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionFalse {
		t.Errorf("Ready right after start = %+v, want False (NotReadyAfterStart)", r)
	}
	waitReady(ctx, t, admin, nodeRestart)

	// What node-resized would do first: patch the target (4 cpu).
	cond := accepted(time.Now())
	if _, err := patchStatus(ctx, nodeClientFor(t, c, nodeRestart), nodeRestart, capacityPatch("4", "8Gi", "8092Mi", cond)); err != nil {
		t.Fatal(err)
	}
	// The machine the restarted kubelet reads has 3 cpu and 6Gi.
	t0 := time.Now()
	if err := k.Restart(ctx, machine("3", "6Gi")); err != nil {
		t.Fatal(err)
	}
	sawNotReady := false
	eventually(ctx, t, "Ready with the re-read machine after Restart", 20*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeRestart, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		r := condition(n, corev1.NodeReady)
		if r != nil && r.Status == corev1.ConditionFalse {
			sawNotReady = true
		}
		return sawNotReady && r != nil && r.Status == corev1.ConditionTrue, nil
	})
	took := time.Since(t0)
	t.Logf("NotReady, then Ready again %v after Restart", took.Round(time.Millisecond))
	if took < notReadyFor {
		t.Errorf("Ready again after %v, before NotReadyAfterStart (%v) ended", took, notReadyFor)
	}
	n = getNode(ctx, t, admin, nodeRestart)
	for _, tc := range []struct {
		rl          corev1.ResourceList
		name        corev1.ResourceName
		field, want string
	}{
		{n.Status.Capacity, corev1.ResourceCPU, "capacity", "3"},
		{n.Status.Capacity, corev1.ResourceMemory, "capacity", "6Gi"},
		{n.Status.Allocatable, corev1.ResourceCPU, "allocatable", "3"},
		{n.Status.Allocatable, corev1.ResourceMemory, "allocatable", "6044Mi"},
	} {
		if got := quantity(tc.rl, tc.name); got != tc.want {
			t.Errorf("%s %s = %s after Restart, want %s", tc.field, tc.name, got, tc.want)
		}
	}
	checkConditionKept(t, n, cond)
	if got := quantity(k.Machine().Capacity, corev1.ResourceCPU); got != "3" {
		t.Errorf("Machine() cpu = %s after Restart, want 3", got)
	}
}

func pod(name, node, cpu string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:  "pause",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu),
				}},
			}},
		},
	}
}

func createPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	t.Cleanup(func() {
		// No kubelet confirms a graceful deletion: delete at once.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		zero := int64(0)
		_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// waitUnschedulable waits for the scheduler to give up on a pod for lack
// of cpu: PodScheduled False/Unschedulable and a FailedScheduling event
// saying "Insufficient cpu".
func waitUnschedulable(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	eventually(ctx, t, "pod "+name+" unschedulable", 100*time.Millisecond, func() (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	eventually(ctx, t, "FailedScheduling event for "+name, 100*time.Millisecond, func() (bool, error) {
		evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
		})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "Insufficient cpu") {
				t.Logf("event for %s: %s %s", name, e.Reason, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
}

func waitBound(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node string) {
	t.Helper()
	eventually(ctx, t, "pod "+name+" bound to "+node, 50*time.Millisecond, func() (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != node {
			return false, fmt.Errorf("bound to %s", p.Spec.NodeName)
		}
		return p.Spec.NodeName == node, nil
	})
}

// The scheduler follows allocatable: a pending pod that does not fit is
// bound after an upscale patch, and after a downscale a pod that would have
// fitted before stays Pending with FailedScheduling.
func TestSchedulerFollowsAllocatablePatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := sharedCluster(t)
	admin := clientFor(t, c.AdminConfig())
	// Isolate the scheduler's reaction from the kubelet's revert.
	startKubelet(ctx, t, c, KubeletOptions{NodeName: nodeScheduler, Machine: machine("2", "4Gi"), NodeStatusUpdateFrequency: time.Hour})
	waitReady(ctx, t, admin, nodeScheduler)
	nodeClient := nodeClientFor(t, c, nodeScheduler)

	createPod(ctx, t, admin, pod("big", nodeScheduler, "3"))
	waitUnschedulable(ctx, t, admin, "big")

	// Upscale 2 -> 8 cpu.
	if _, err := patchStatus(ctx, nodeClient, nodeScheduler, capacityPatch("8", "4Gi", "3996Mi", accepted(time.Now()))); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	waitBound(ctx, t, admin, "big", nodeScheduler)
	t.Logf("pending pod bound %v after the allocatable upscale", time.Since(t0).Round(time.Millisecond))

	// Downscale 8 -> 4 cpu: 3 are taken, so a 2-cpu pod no longer fits
	// (it would have with 8).
	if _, err := patchStatus(ctx, nodeClient, nodeScheduler, capacityPatch("4", "4Gi", "3996Mi", accepted(time.Now()))); err != nil {
		t.Fatal(err)
	}
	// Let the scheduler's cache see the downscale before the pod arrives.
	eventually(ctx, t, "node allocatable 4", 50*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeScheduler, metav1.GetOptions{})
		return err == nil && quantity(n.Status.Allocatable, corev1.ResourceCPU) == "4", err
	})
	// The scheduler's node informer trails the API by milliseconds; give
	// it a moment so the pod meets the downscaled Node.
	time.Sleep(time.Second)
	createPod(ctx, t, admin, pod("second", nodeScheduler, "2"))
	waitUnschedulable(ctx, t, admin, "second")
	time.Sleep(2 * time.Second)
	p, err := admin.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "second", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod second: node %q phase %s, want unbound and Pending", p.Spec.NodeName, p.Status.Phase)
	}
}

// Taking the API server down and bringing it back on the same port with the
// same etcd keeps the Node (same UID, status and custom condition), and the
// stand-in kubelet carries on renewing its Lease.
func TestAPIServerRestartKeepsNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const node = "node-apiserver-restart"
	t0 := time.Now()
	c, err := Start(ctx, Options{BinDir: binDir, SkipBuild: true, Dir: t.TempDir(), Nodes: []string{node}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane up in %v", time.Since(t0).Round(time.Millisecond))
	logTailsOnFailure(t, c)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin := clientFor(t, c.AdminConfig())
	startKubelet(ctx, t, c, KubeletOptions{
		NodeName: node, Machine: machine("2", "4Gi"),
		NodeStatusUpdateFrequency: time.Second, NodeLeaseDuration: 4 * time.Second,
	})
	before := waitReady(ctx, t, admin, node)
	cond := accepted(time.Now())
	nodeClient := nodeClientFor(t, c, node)
	if _, err := patchStatus(ctx, nodeClient, node, capacityPatch("2", "4Gi", "3996Mi", cond)); err != nil {
		t.Fatal(err)
	}

	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(c.APIServerURL(), "https://"), time.Second); err == nil {
		conn.Close()
		t.Fatal("API server port still accepts connections after StopAPIServer")
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		t.Fatal("Get succeeded with the API server stopped")
	}
	time.Sleep(2 * time.Second) // the stand-in's heartbeats fail meanwhile
	scheduler := c.SchedulerPID()
	t1 := time.Now()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server ready again %v after StartAPIServer", time.Since(t1).Round(time.Millisecond))
	// The scheduler is a new process, not one whose watches back off.
	if pid := c.SchedulerPID(); pid == 0 || pid == scheduler {
		t.Errorf("kube-scheduler pid %d after StartAPIServer, %d before: want a new scheduler", pid, scheduler)
	}
	if err := c.StartAPIServer(ctx); err == nil {
		t.Error("a second StartAPIServer succeeded while it runs")
	}

	after := getNode(ctx, t, admin, node)
	if after.UID != before.UID {
		t.Errorf("node UID %s after the restart, was %s", after.UID, before.UID)
	}
	if got := quantity(after.Status.Capacity, corev1.ResourceCPU); got != "2" {
		t.Errorf("capacity cpu = %s after the restart, want 2", got)
	}
	checkConditionKept(t, after, cond)

	// The Lease is renewed again.
	eventually(ctx, t, "lease renewed after the API server restart", 200*time.Millisecond, func() (bool, error) {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != before.UID {
			return false, errors.New("lease not owned by the node")
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t1), nil
	})

	// Stop ends everything and is safe twice.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{strings.TrimPrefix(c.APIServerURL(), "https://"), strings.TrimPrefix(c.EtcdURL(), "http://")} {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Stop", addr)
		}
	}
	if err := c.StartAPIServer(ctx); err == nil {
		t.Error("StartAPIServer after Stop succeeded")
	}
}

// The kubeconfigs authenticate as the identities they name, and
// NodeKubeconfig only knows the nodes listed in Options.Nodes.
func TestKubeconfigIdentities(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := sharedCluster(t)
	if _, err := c.NodeKubeconfig("no-such-node"); err == nil {
		t.Error("NodeKubeconfig(no-such-node) succeeded")
	}
	nodeKC, err := c.NodeKubeconfig(nodePatch)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, user, group string
	}{
		{c.AdminKubeconfig(), AdminUser, "system:masters"},
		{nodeKC, NodeUserPrefix + nodePatch, NodesGroup},
	} {
		cfg, err := clientcmd.BuildConfigFromFlags("", tc.path)
		if err != nil {
			t.Fatal(err)
		}
		cs := clientFor(t, cfg)
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: SelfSubjectReview: %v", tc.path, err)
		}
		if u := r.Status.UserInfo; u.Username != tc.user || !slices.Contains(u.Groups, tc.group) {
			t.Errorf("%s authenticates as %s %v, want %s in %s", tc.path, u.Username, u.Groups, tc.user, tc.group)
		}
	}
}

// The API server's /version is the k8s.io/kubernetes release the test
// module builds it from, as a released binary's is (Helm's kubeVersion
// check, for one, reads it).
func TestAPIServerVersion(t *testing.T) {
	c := sharedCluster(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	v, err := clientFor(t, cfg).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(out))
	if v.GitVersion != want || !strings.HasPrefix(want, "v"+v.Major+"."+v.Minor+".") {
		t.Errorf("the API server says %s (major %q, minor %q), want %s", v.GitVersion, v.Major, v.Minor, want)
	}
}
