package kubetest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/node-resized/node-resized/kube/internal/objects"
)

// FakeAPI is a fake API server of Nodes, Pods and Events for the dynamic
// client, holding objs (typed core/v1 and events.k8s.io/v1 objects, stored
// as the API server sends them: unstructured). Reactors prepended later
// run first.
func FakeAPI(t testing.TB, objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	t.Helper()
	typed := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(typed); err != nil {
			t.Fatal(err)
		}
	}
	us := make([]runtime.Object, len(objs))
	for i, o := range objs {
		gvks, _, err := typed.ObjectKinds(o)
		if err != nil {
			t.Fatal(err)
		}
		if us[i], err = objects.ToUnstructured(o, gvks[0]); err != nil {
			t.Fatal(err)
		}
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{objects.Nodes: "NodeList", objects.Pods: "PodList", objects.Events: "EventList"}, us...)
}

// WaitFor waits for another goroutine to make cond true. It polls: what
// it waits for is the scheduler, not time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Microsecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Run runs run (a worker's Run) on a goroutine of its own until the test
// ends; then it cancels run's context and checks that run returns nil
// within 10 seconds.
func Run(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
}

// Buffer is a bytes.Buffer that is safe for concurrent use, for a test's
// logger to write to while the test reads it.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
