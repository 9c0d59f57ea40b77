package objects

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Every API call goes through the dynamic client, as JSON: client-go's
// typed clientset would bring its scheme of every built-in API group,
// whose registration at start costs the daemon about 8 MiB of memory.
// Where a typed object is wanted, it is converted from and to the
// unstructured form with the default converter (reflection over the
// k8s.io/api struct, no scheme).

// The built-in resources the relay and the evictor use.
var (
	Nodes  = corev1.SchemeGroupVersion.WithResource("nodes")
	Pods   = corev1.SchemeGroupVersion.WithResource("pods")
	Events = eventsv1.SchemeGroupVersion.WithResource("events")
)

// FieldManager is the field manager of every write the daemon makes.
const FieldManager = "node-resized"

// FromUnstructured converts u into the typed object into points at.
func FromUnstructured(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), into); err != nil {
		return fmt.Errorf("read %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// ToUnstructured converts the typed obj into an unstructured object of
// kind gvk (typed objects built in code carry no apiVersion and kind).
func ToUnstructured(obj any, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
