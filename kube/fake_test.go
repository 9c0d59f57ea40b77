package kube

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/kube/internal/objects"
)

// fakeAPI is kubetest.FakeAPI, where strategic-merge patches of a Node
// are applied as the API server applies them (see strategicNodePatch);
// reactors prepended later run first.
func fakeAPI(t testing.TB, objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	t.Helper()
	fc := kubetest.FakeAPI(t, objs...)
	fc.PrependReactor("patch", "nodes", strategicNodePatch(fc.Tracker()))
	return fc
}

// strategicNodePatch applies a strategic-merge patch of a Node with the
// Node's patch strategy (conditions merge by type, "$patch": "delete"
// removes one), which the fake's tracker does not know for unstructured
// objects. As the API server does, a patch of the status subresource
// changes only the status, a patch of the Node everything else, and a
// resourceVersion in the patch is a precondition.
func strategicNodePatch(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok || pa.GetPatchType() != types.StrategicMergePatchType {
			return false, nil, nil
		}
		obj, err := tracker.Get(objects.Nodes, "", pa.GetName())
		if err != nil {
			return true, nil, err
		}
		old := obj.(*unstructured.Unstructured)
		var pre struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &pre); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if rv := pre.Metadata.ResourceVersion; rv != "" && rv != old.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(objects.Nodes.GroupResource(), pa.GetName(), errors.New("the object has been modified"))
		}
		before, err := old.MarshalJSON()
		if err != nil {
			return true, nil, err
		}
		merged, err := strategicpatch.StrategicMergePatch(before, pa.GetPatch(), &corev1.Node{})
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		patched := &unstructured.Unstructured{}
		if err := patched.UnmarshalJSON(merged); err != nil {
			return true, nil, err
		}
		out := old.DeepCopy()
		if pa.GetSubresource() == "status" {
			out.Object["status"] = patched.Object["status"]
		} else {
			patched.Object["status"] = old.Object["status"]
			out = patched
		}
		if err := tracker.Update(objects.Nodes, out, ""); err != nil {
			return true, nil, err
		}
		return true, out, nil
	}
}

// typedNode reads the Node worker-1 from fc.
func typedNode(t testing.TB, fc *dynamicfake.FakeDynamicClient) *corev1.Node {
	t.Helper()
	u, err := fc.Resource(objects.Nodes).Get(context.Background(), "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{}
	if err := objects.FromUnstructured(u, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// typedEvents lists the events fc holds.
func typedEvents(t testing.TB, fc *dynamicfake.FakeDynamicClient) []eventsv1.Event {
	t.Helper()
	list, err := fc.Resource(objects.Events).Namespace(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]eventsv1.Event, len(list.Items))
	for i := range list.Items {
		if err := objects.FromUnstructured(&list.Items[i], &evs[i]); err != nil {
			t.Fatal(err)
		}
		if got := list.Items[i].GetAPIVersion() + "/" + list.Items[i].GetKind(); got != "events.k8s.io/v1/Event" {
			t.Errorf("event %s is a %s, want an events.k8s.io/v1 Event", evs[i].Name, got)
		}
	}
	return evs
}

// watchRegistered makes fc's watches of resource register with its tracker
// in the reactor, and returns a channel closed once the first one is. The
// fake's watch does not replay what changed since the list, as the API
// server does from the list's resourceVersion: a test that changes the
// object after its first list must wait for the watch (awaitWatch), or
// the change may be lost between the two.
func watchRegistered(fc *dynamicfake.FakeDynamicClient, resource string) <-chan struct{} {
	watching := make(chan struct{})
	var once sync.Once
	fc.PrependWatchReactor(resource, func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := fc.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})
	return watching
}

// awaitWatch waits for a channel of watchRegistered.
func awaitWatch(t testing.TB, watching <-chan struct{}) {
	t.Helper()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch registered within 10s")
	}
}
