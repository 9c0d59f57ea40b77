package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestSpecConfiguredCapacity is README's "spec.configuredCapacity where
// the API server has it" against the real kube-apiserver. KEP-3953's
// field is in no released Node API (this control plane is v1.37.2): with
// strict field validation the API server refuses a patch of it as an
// unknown field, and by default it drops the field, so the daemon, which
// reads the Node as raw JSON, never sees one and the annotation is the way
// in. The day an API server serves it, the patch is taken, and the test
// then requires the daemon to apply it.
func TestSpecConfiguredCapacity(t *testing.T) {
	e := setup(t, nodeSpec, envOptions{cpus: 4})
	e.waitState(4, "Accepted")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	patch := []byte(`{"spec":{"configuredCapacity":{"cpu":"2"}}}`)
	nodes := e.admin.CoreV1().Nodes()
	_, err := nodes.Patch(ctx, nodeSpec, types.MergePatchType, patch, metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict})
	if err == nil {
		t.Logf("the API server took spec.configuredCapacity: node-resized must apply it")
		e.waitConfigured(2, "Accepted", `{"cpu":"2"}`)
		return
	}
	if !strings.Contains(err.Error(), `unknown field "spec.configuredCapacity"`) {
		t.Fatalf("a strict patch of spec.configuredCapacity: %v; want it taken, or refused as an unknown field", err)
	}
	t.Logf("kube-apiserver (the test control plane) does not serve spec.configuredCapacity: %v", err)
	// By default the API server drops the field: nothing reaches the
	// Node, and the daemon stays at the hardware.
	if _, err := nodes.Patch(ctx, nodeSpec, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("a patch of spec.configuredCapacity without strict validation: %v", err)
	}
	raw, err := e.admin.CoreV1().RESTClient().Get().Resource("nodes").Name(nodeSpec).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "configuredCapacity") {
		t.Fatalf("the API server kept spec.configuredCapacity after all: %s", raw)
	}
	e.resync()
	time.Sleep(time.Second)
	e.waitState(4, "Accepted")
	if c := condition(e.waitState(4, "Accepted")); !strings.Contains(c.Message, "no configured capacity") {
		t.Errorf("the condition after the dropped field: %s", c.Message)
	}
}
