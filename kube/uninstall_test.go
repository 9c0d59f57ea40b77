package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/types"
)

// removalRelay is a relay that is not run (as node-resized --uninstall
// uses it) over a fake API server holding node.
func removalRelay(t *testing.T, node *corev1.Node) (*Relay, *dynamicfake.FakeDynamicClient) {
	client := fakeAPI(t, node)
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return New(client, dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Options{NodeName: node.Name, Clock: clock}), client
}

func readNode(t *testing.T, client *dynamicfake.FakeDynamicClient) *corev1.Node {
	t.Helper()
	return typedNode(t, client)
}

// countPatches counts the patches of the Node (subresource "" or
// "status").
func countPatches(client *dynamicfake.FakeDynamicClient) func() int {
	n := 0
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		n++
		return false, nil, nil
	})
	return func() int { return n }
}

func TestRemoveConditionKeepsTheOthers(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	ours := corev1.NodeCondition{Type: types.ConditionType, Status: corev1.ConditionTrue, Reason: "Accepted"}
	memory := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}
	r, client := removalRelay(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready, ours, memory}},
	})
	patches := countPatches(client)
	removed, err := r.RemoveCondition(context.Background())
	if err != nil || !removed {
		t.Fatalf("RemoveCondition = %v, %v; want true, nil", removed, err)
	}
	var types []corev1.NodeConditionType
	for _, c := range readNode(t, client).Status.Conditions {
		types = append(types, c.Type)
	}
	if want := []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure}; !slices.Equal(types, want) {
		t.Errorf("conditions after the removal %v, want %v", types, want)
	}
	// Again: nothing to remove, and nothing is patched.
	removed, err = r.RemoveCondition(context.Background())
	if err != nil || removed {
		t.Errorf("second RemoveCondition = %v, %v; want false, nil", removed, err)
	}
	if n := patches(); n != 1 {
		t.Errorf("%d patches, want 1", n)
	}
}

func TestRemoveTaintKeepsTheOthers(t *testing.T) {
	r, client := removalRelay(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{otherTaint, staleTaint}},
	})
	removed, err := r.RemoveTaint(context.Background())
	if err != nil || !removed {
		t.Fatalf("RemoveTaint = %v, %v; want true, nil", removed, err)
	}
	if got := readNode(t, client).Spec.Taints; !slices.Equal(got, []corev1.Taint{otherTaint}) {
		t.Errorf("taints %v, want only %v", got, otherTaint)
	}
	if removed, err = r.RemoveTaint(context.Background()); err != nil || removed {
		t.Errorf("second RemoveTaint = %v, %v; want false, nil", removed, err)
	}
}

// TestRemoveTaintForbidden: under NodeRestriction the node's own identity
// may not change taints; the error says so and what to do.
func TestRemoveTaintForbidden(t *testing.T) {
	r, client := removalRelay(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{staleTaint}},
	})
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "worker-1",
			errors.New("node \"worker-1\" is not allowed to modify taints"))
	})
	_, err := r.RemoveTaint(context.Background())
	var fe *TaintForbiddenError
	if !errors.As(err, &fe) || !apierrors.IsForbidden(err) {
		t.Fatalf("err %v, want a TaintForbiddenError wrapping the refusal", err)
	}
	for _, want := range []string{"NodeRestriction", "kubectl taint node worker-1 " + types.TaintKey + ":NoSchedule-"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := readNode(t, client).Spec.Taints; len(got) != 1 {
		t.Errorf("taints %v", got)
	}
}

// TestRemoveTaintAbsentNeedsNoPatch: a Node without the taint is only
// read, so the node's own identity suffices.
func TestRemoveTaintAbsentNeedsNoPatch(t *testing.T) {
	r, client := removalRelay(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}})
	patches := countPatches(client)
	if removed, err := r.RemoveTaint(context.Background()); err != nil || removed {
		t.Errorf("RemoveTaint = %v, %v; want false, nil", removed, err)
	}
	if n := patches(); n != 0 {
		t.Errorf("%d patches, want none", n)
	}
}

func TestRecordRemoval(t *testing.T) {
	r, client := removalRelay(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}})
	if err := r.RecordRemoval(context.Background(), "node-resized was removed"); err != nil {
		t.Fatal(err)
	}
	list := typedEvents(t, client)
	if len(list) != 1 {
		t.Fatalf("%d events, want 1", len(list))
	}
	ev := list[0]
	if ev.Reason != ReasonRemoved || ev.Type != corev1.EventTypeNormal || ev.Regarding.Kind != "Node" ||
		ev.Regarding.Name != "worker-1" || ev.Note != "node-resized was removed" || ev.ReportingController != "node-resized" ||
		ev.EventTime.IsZero() || ev.Action == "" {
		t.Errorf("event %+v", ev)
	}
}
