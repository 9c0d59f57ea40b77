package kube

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-resized/node-resized/kube/internal/objects"
	"github.com/node-resized/node-resized/types"
)

// fakeNodes serves the Node worker-1. With served false it drops
// spec.configuredCapacity from every patch, as an API server that does not
// serve the field does.
func fakeNodes(t *testing.T, served bool) *dynamicfake.FakeDynamicClient {
	t.Helper()
	fc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{objects.Nodes: "NodeList"}, unstructuredNode(map[string]any{"cpu": "8"}, map[string]any{"cpu": "8"}, nil))
	if !served {
		fc.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			p := a.(k8stesting.PatchAction)
			var m map[string]any
			if err := json.Unmarshal(p.GetPatch(), &m); err != nil {
				return true, nil, err
			}
			if spec, ok := m["spec"].(map[string]any); ok {
				delete(spec, "configuredCapacity")
			}
			b, _ := json.Marshal(m)
			return k8stesting.ObjectReaction(fc.Tracker())(k8stesting.NewRootPatchAction(objects.Nodes, p.GetName(), p.GetPatchType(), b))
		})
	}
	return fc
}

func getNode(t *testing.T, fc *dynamicfake.FakeDynamicClient) *unstructured.Unstructured {
	t.Helper()
	u, err := fc.Resource(objects.Nodes).Get(context.Background(), "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSetConfiguredCapacityPrefersTheSpec(t *testing.T) {
	fc := fakeNodes(t, true)
	c := NewNodeConfig(fc, "worker-1", nil)
	v, err := c.SetConfiguredCapacity(context.Background(), map[string]string{"cpu": "4", "memory": "8Gi"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Source != types.SourceSpec || v.Configured.Key() != `{"cpu":"4","memory":"8Gi"}` {
		t.Fatalf("wrote %s to %q, want the spec", v.Configured.Key(), v.Source)
	}
	u := getNode(t, fc)
	if _, found, _ := unstructured.NestedString(u.Object, "metadata", "annotations", types.AnnotationConfiguredCapacity); found {
		t.Error("the annotation was written too")
	}
}

func TestSetConfiguredCapacityFallsBackToTheAnnotation(t *testing.T) {
	fc := fakeNodes(t, false)
	c := NewNodeConfig(fc, "worker-1", nil)
	v, err := c.SetConfiguredCapacity(context.Background(), map[string]string{"cpu": "4", "hugepages-2Mi": "1Gi"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Source != types.SourceAnnotation || v.Configured.Key() != `{"cpu":"4","hugepages-2Mi":"1Gi"}` {
		t.Fatalf("wrote %s to %q, want the annotation", v.Configured.Key(), v.Source)
	}
	got, _, _ := unstructured.NestedString(getNode(t, fc).Object, "metadata", "annotations", types.AnnotationConfiguredCapacity)
	if got != `{"cpu":"4","hugepages-2Mi":"1Gi"}` {
		t.Errorf("annotation %q", got)
	}

	// Clearing removes it.
	v, err = c.ClearConfiguredCapacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Configured.Present {
		t.Fatalf("still configured: %+v", v.Configured)
	}
	if _, found, _ := unstructured.NestedString(getNode(t, fc).Object, "metadata", "annotations", types.AnnotationConfiguredCapacity); found {
		t.Error("the annotation is still there")
	}
}

func TestClearConfiguredCapacityRemovesTheSpec(t *testing.T) {
	fc := fakeNodes(t, true)
	c := NewNodeConfig(fc, "worker-1", nil)
	if _, err := c.SetConfiguredCapacity(context.Background(), map[string]string{"cpu": "4"}, false); err != nil {
		t.Fatal(err)
	}
	v, err := c.ClearConfiguredCapacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Configured.Present {
		t.Fatalf("still configured from %s: %+v", v.Source, v.Configured)
	}
}

func TestWatchNodeSeesChangesUntilDone(t *testing.T) {
	fc := fakeNodes(t, false)
	c := NewNodeConfig(fc, "worker-1", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := make(chan types.NodeView, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.WatchNode(ctx, func(v types.NodeView) (bool, error) {
			seen <- v
			return v.Configured.Present, nil
		})
	}()
	if v := <-seen; v.Configured.Present || v.Name != "worker-1" {
		t.Fatalf("first view %+v, want the Node as it stands", v)
	}
	if _, err := c.SetConfiguredCapacity(ctx, map[string]string{"cpu": "2"}, false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WatchNode: %v", err)
	}
	var last types.NodeView
	for len(seen) > 0 {
		last = <-seen
	}
	if last.Configured.Key() != `{"cpu":"2"}` {
		t.Fatalf("last view %+v", last.Configured)
	}

	// Nothing to wait for: the context's end is the error.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	err := c.WatchNode(short, func(types.NodeView) (bool, error) { return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WatchNode past its deadline: %v, want context.DeadlineExceeded", err)
	}
}
