package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Nodes of TestDaemonSetIdentityStaysOnItsNode: Node objects only (no
// node identity, no kubelet), unschedulable so that the scheduler places
// no other test's pod on them.
const (
	nodeBoundA = "e2e-bound-a"
	nodeBoundB = "e2e-bound-b"
)

// TestDaemonSetIdentityStaysOnItsNode applies packaging/kubernetes for
// real and acts as the DaemonSet's pod on node A would: with a token of
// its ServiceAccount bound to a pod scheduled on A (TokenRequest, as the
// kubelet gets it for the pod), whose node claim the API server fills in.
// With it, A's Node status and its capacity-changing taint may be written
// and events about A recorded, and the same on B is refused by the
// admission policy; the account cannot evict at all, and evicts as its
// node (--evict-as-node): a pod on A, not one on B, and it cannot act as
// node B. A token bound to no pod (no node claim) may write nothing.
func TestDaemonSetIdentityStaysOnItsNode(t *testing.T) {
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cl.AdminConfig())

	a := newApplier(t, cl.AdminConfig())
	for _, u := range buildKustomization(t, kustomizeDir) {
		if _, err := a.apply(ctx, u, false); err != nil {
			t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	const ns, sa = "node-resized", "node-resized"

	for _, n := range []string{nodeBoundA, nodeBoundB} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: corev1.NodeSpec{Unschedulable: true}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	// The agent's pod on A (its ServiceAccount's token is bound to it),
	// and a victim pod on each node.
	pod := func(ns, name, node, sa string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
				Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}},
		}
		got, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", ns, name, err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		return got
	}
	agent := pod(ns, "agent-a", nodeBoundA, sa)
	victimA := pod(metav1.NamespaceDefault, "victim-on-a", nodeBoundA, "")
	victimB := pod(metav1.NamespaceDefault, "victim-on-b", nodeBoundB, "")

	token := func(bound *corev1.Pod) string {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
		if bound != nil {
			req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request: %v", err)
		}
		return tr.Status.Token
	}
	clientFor := func(tok, impersonate string) *kubernetes.Clientset {
		cfg := rest.CopyConfig(cl.AdminConfig())
		cfg.BearerToken = tok
		cfg.Impersonate = rest.ImpersonationConfig{UserName: impersonate}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	tokA := token(agent)
	asA := clientFor(tokA, "")

	// The API server put the pod's node in the token's user.
	ssr, err := asA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ssr.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != nodeBoundA {
		t.Fatalf("the pod-bound token's user %+v: want node claim %s", ssr.Status.UserInfo, nodeBoundA)
	}
	t.Logf("token bound to pod %s/%s: user %s, node claim %v", ns, agent.Name, ssr.Status.UserInfo.Username,
		ssr.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"])

	statusPatch := func(c kubernetes.Interface, node string) error {
		p, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: "CapacityConfigured", Status: corev1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now(),
		}}}})
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, p, metav1.PatchOptions{}, "status")
		return err
	}
	specPatch := func(c kubernetes.Interface, node, patch string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	const ownTaint = `{"spec":{"taints":[{"key":"node-resized.io/capacity-changing","effect":"NoSchedule"}]}}`
	refusedBy := func(what string, err error, msg string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want 403 saying %q", what, err, msg)
			return
		}
		t.Logf("%s: refused: %v", what, err)
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v; want it allowed", what, err)
			return
		}
		t.Logf("%s: allowed", what)
	}

	// The policy is in force once the API server has loaded it: until
	// then RBAC alone lets the status patch of B through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := statusPatch(asA, nodeBoundB)
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node A's identity still patches B's status 30 s after the policy was applied: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Node status: A, not B.
	allowed("status patch of A with A's token", statusPatch(asA, nodeBoundA))
	refusedBy("status patch of B with A's token", statusPatch(asA, nodeBoundB), "node-resized on node "+nodeBoundA+" may not change Node "+nodeBoundB)

	// The taint: on A and only that taint; not on B.
	allowed("capacity-changing taint on A", specPatch(asA, nodeBoundA, ownTaint))
	allowed("capacity-changing taint lifted from A", specPatch(asA, nodeBoundA, `{"spec":{"taints":null}}`))
	refusedBy("capacity-changing taint on B", specPatch(asA, nodeBoundB, ownTaint), "may not change Node "+nodeBoundB)
	refusedBy("another taint on A", specPatch(asA, nodeBoundA, `{"spec":{"taints":[{"key":"example.com/other","effect":"NoSchedule"}]}}`),
		"may change only the NoSchedule taint node-resized.io/capacity-changing")
	refusedBy("the taint as NoExecute on A", specPatch(asA, nodeBoundA, `{"spec":{"taints":[{"key":"node-resized.io/capacity-changing","effect":"NoExecute"}]}}`),
		"may change only the NoSchedule taint")
	refusedBy("a label on A", specPatch(asA, nodeBoundA, `{"metadata":{"labels":{"example.com/x":"y"}}}`), "may change only the NoSchedule taint")
	refusedBy("cordoning A", specPatch(asA, nodeBoundA, `{"spec":{"unschedulable":false}}`), "may change only the NoSchedule taint")

	// Events: about A, not about B.
	event := func(node string) error {
		ev := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{GenerateName: "node-resized-e2e-", Namespace: metav1.NamespaceDefault},
			EventTime:           metav1.NowMicro(),
			Regarding:           corev1.ObjectReference{Kind: "Node", Name: node},
			Reason:              "EmergencyCapacityReduced",
			Action:              "Clamp",
			Type:                corev1.EventTypeWarning,
			ReportingController: "node-resized.io/node-resized",
			ReportingInstance:   "node-resized-" + nodeBoundA,
		}
		_, err := asA.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
		return err
	}
	allowed("event about A", event(nodeBoundA))
	refusedBy("event about B", event(nodeBoundB), "may record events only about its own Node")

	// Evictions: the account itself has none.
	evict := func(c kubernetes.Interface, p *corev1.Pod) error {
		return c.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
	}
	refusedBy("eviction of A's pod as the account", evict(asA, victimA), `cannot create resource "pods/eviction"`)

	// As its node (--evict-as-node): list and evict A's pods, not B's.
	asNodeA := clientFor(tokA, "system:node:"+nodeBoundA)
	pods, err := asNodeA.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeBoundA).String(),
	})
	allowed("list of A's pods as node A", err)
	if err == nil && len(pods.Items) != 2 {
		t.Errorf("node A lists %d pods, want 2 (the agent and the victim)", len(pods.Items))
	}
	_, err = asNodeA.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeBoundB).String(),
	})
	refusedBy("list of B's pods as node A", err, "forbidden")
	refusedBy("eviction of B's pod as node A", evict(asNodeA, victimB), "can only evict pods with spec.nodeName set to itself")
	allowed("eviction of A's pod as node A", evict(asNodeA, victimA))
	if p, err := admin.CoreV1().Pods(victimA.Namespace).Get(ctx, victimA.Name, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("pod %s was evicted but is not being deleted", victimA.Name)
	}
	if p, err := admin.CoreV1().Pods(victimB.Namespace).Get(ctx, victimB.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("pod %s on B: %v, deletion %v; want it untouched", victimB.Name, err, p.DeletionTimestamp)
	}

	// Nor can it act as another node.
	err = evict(clientFor(tokA, "system:node:"+nodeBoundB), victimB)
	refusedBy("eviction as node B with A's token", err, "impersonate")

	// A token bound to no pod has no node claim: no writes at all.
	refusedBy("status patch of A with an unbound token", statusPatch(clientFor(token(nil), ""), nodeBoundA), "names no node")
}
