package kube

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/types"
)

func TestParseNodeConfiguredCapacity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		present bool
		source  string
		raw     map[string]string
		invalid string
	}{
		{"absent", `{"metadata":{"name":"n"}}`, false, "", nil, ""},
		{"spec field wins over annotation",
			`{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"1\"}"}},"spec":{"configuredCapacity":{"cpu":"4","memory":"8Gi"}}}`,
			true, types.SourceSpec, map[string]string{"cpu": "4", "memory": "8Gi"}, ""},
		{"annotation", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"2\",\"memory\":\"4Gi\"}"}}}`,
			true, types.SourceAnnotation, map[string]string{"cpu": "2", "memory": "4Gi"}, ""},
		{"annotation with numbers", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":2}"}}}`,
			true, types.SourceAnnotation, map[string]string{"cpu": "2"}, ""},
		{"garbage annotation", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"four cpus please"}}}`,
			true, types.SourceAnnotation, nil, "not a JSON object"},
		{"nested object", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":{\"n\":1}}"}}}`,
			true, types.SourceAnnotation, nil, "want a quantity string"},
		{"empty annotation is absent", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":""}}}`, false, "", nil, ""},
		{"null spec field falls back", `{"metadata":{"name":"n"},"spec":{"configuredCapacity":null}}`, false, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseNode([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			c := v.Configured
			if c.Present != tc.present || v.Source != tc.source {
				t.Fatalf("present %v source %q, want %v %q", c.Present, v.Source, tc.present, tc.source)
			}
			if tc.invalid != "" {
				if !strings.Contains(c.Invalid, tc.invalid) {
					t.Errorf("Invalid = %q, want it to say %q", c.Invalid, tc.invalid)
				}
				return
			}
			if len(c.Raw) != len(tc.raw) {
				t.Fatalf("raw %v, want %v", c.Raw, tc.raw)
			}
			for k, v := range tc.raw {
				if c.Raw[k] != v {
					t.Errorf("raw[%s] = %q, want %q", k, c.Raw[k], v)
				}
			}
		})
	}
}

func TestParseNodeStatus(t *testing.T) {
	v, err := ParseNode([]byte(`{"metadata":{"name":"n","resourceVersion":"7"},"status":{
		"nodeInfo":{"kubeletVersion":"v1.36.3","containerRuntimeVersion":"containerd://2.4.1"},
		"capacity":{"cpu":"4","memory":"16Gi","pods":"110"},"allocatable":{"cpu":"3500m","memory":"15Gi"},
		"conditions":[{"type":"Ready","status":"True"},{"type":"CapacityConfigured","status":"False","reason":"Infeasible","message":"too big"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v.Capacity["cpu"] != 4000 || v.Capacity["memory"] != 16<<30 || v.Allocatable["cpu"] != 3500 {
		t.Errorf("capacity %v allocatable %v", v.Capacity, v.Allocatable)
	}
	if v.KubeletVersion != "v1.36.3" {
		t.Errorf("kubelet version %q", v.KubeletVersion)
	}
	if !v.Ready || v.Condition == nil || v.Condition.Reason != types.ReasonInfeasible || v.Condition.Message != "too big" {
		t.Errorf("ready %v condition %+v", v.Ready, v.Condition)
	}
	if _, err := ParseNode([]byte(`{`)); err == nil {
		t.Error("ParseNode accepted broken JSON")
	}
}

// TestAnnotationNumbers: JSON numbers in the annotation are the quantities
// their literals spell, to the last digit; anything else that is not a
// string makes the request malformed.
func TestAnnotationNumbers(t *testing.T) {
	c := parseResourceList([]byte(`{"cpu": 1.5, "memory": 8589934592, "hugepages-2Mi": 1e3, "ephemeral-storage": 0.0000001, "x": "4"}`), types.SourceAnnotation)
	want := map[string]string{"cpu": "1.5", "memory": "8589934592", "hugepages-2Mi": "1e3", "ephemeral-storage": "0.0000001", "x": "4"}
	if c.Invalid != "" || !reflect.DeepEqual(c.Raw, want) {
		t.Fatalf("parsed %+v, want raw %v", c, want)
	}
	for _, bad := range []string{`{"cpu": true}`, `{"cpu": {"a": 1}}`, `{"cpu": null}`, `[1]`, `4`} {
		if c := parseResourceList([]byte(bad), types.SourceAnnotation); c.Invalid == "" {
			t.Errorf("%s: parsed %+v, want it invalid", bad, c)
		}
	}
}

func TestResourceListMatchesKubeletForms(t *testing.T) {
	got := (resources.List{"cpu": 4000, "memory": 24683620 << 10, "hugepages-2Mi": 0, "ephemeral-storage": 264212084 << 10}).Strings()
	want := map[string]string{"cpu": "4", "memory": "24683620Ki", "hugepages-2Mi": "0", "ephemeral-storage": "264212084Ki"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if got := (resources.List{"cpu": 3500}).Strings(); got["cpu"] != "3500m" {
		t.Errorf("cpu 3500m rendered %q", got["cpu"])
	}
}

// TestCapacityOwners runs the API server's own field manager
// (k8s.io/apimachinery's managedfields, as the status subresource uses it)
// over the status writes of a kubelet and of the daemon: the manager of a
// capacity value is the last writer that changed it, a write that keeps a
// value leaves its owner alone, and a manager's time moves only when its
// write changed something.
func TestCapacityOwners(t *testing.T) {
	fm := managedfieldstest.NewTestFieldManagerSubresource(managedfields.NewDeducedTypeConverter(),
		schema.GroupVersionKind{Version: "v1", Kind: "Node"}, "status")
	write := func(manager string, capacity map[string]any, heartbeat string) types.NodeView {
		t.Helper()
		obj := fm.Live().(*unstructured.Unstructured).DeepCopy()
		obj.SetName("n")
		if err := unstructured.SetNestedMap(obj.Object, capacity, "status", "capacity"); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(obj.Object, heartbeat, "status", "heartbeat"); err != nil {
			t.Fatal(err)
		}
		if err := fm.Update(obj, manager); err != nil {
			t.Fatalf("%s: %v", manager, err)
		}
		live := fm.Live().(*unstructured.Unstructured)
		b, err := live.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseNode(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	owners := func(v types.NodeView, want map[string]string) {
		t.Helper()
		if !reflect.DeepEqual(v.CapacityOwners, want) {
			t.Fatalf("capacity owners %v, want %v", v.CapacityOwners, want)
		}
	}
	// The kubelet writes its boot-time view.
	v := write("kubelet", map[string]any{"cpu": "4", "memory": "16Gi"}, "1")
	owners(v, map[string]string{"cpu": "kubelet", "memory": "kubelet"})
	if v.StatusWrites["kubelet"].IsZero() {
		t.Fatalf("status writes %v", v.StatusWrites)
	}
	// The daemon publishes 8 CPUs: it owns cpu, the kubelet keeps memory.
	v = write("node-resized", map[string]any{"cpu": "8", "memory": "16Gi"}, "1")
	owners(v, map[string]string{"cpu": "node-resized", "memory": "kubelet"})
	// A kubelet that agrees (its status write leaves cpu at 8 and changes
	// only its heartbeat) takes nothing over.
	v = write("kubelet", map[string]any{"cpu": "8", "memory": "16Gi"}, "2")
	owners(v, map[string]string{"cpu": "node-resized", "memory": "kubelet"})
	// A stale kubelet reverts cpu to its view: it owns it again.
	v = write("kubelet", map[string]any{"cpu": "4", "memory": "16Gi"}, "2")
	owners(v, map[string]string{"cpu": "kubelet", "memory": "kubelet"})
	// A write that changes nothing leaves the writer's time alone.
	before := v.StatusWrites["node-resized"]
	v = write("node-resized", map[string]any{"cpu": "4", "memory": "16Gi"}, "2")
	if !v.StatusWrites["node-resized"].Equal(before) {
		t.Fatalf("a write that changed nothing moved its time from %v to %v", before, v.StatusWrites["node-resized"])
	}
}

// The release annotation belongs to the configured capacity beside it:
// only "true" asks, and without a configured capacity it asks for nothing.
func TestParseNodeRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want bool
	}{
		{"annotation with release", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"2\"}","node-resized.io/release":"true"}}}`, true},
		{"spec with release", `{"metadata":{"name":"n","annotations":{"node-resized.io/release":"true"}},"spec":{"configuredCapacity":{"cpu":"2"}}}`, true},
		{"not true", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"2\"}","node-resized.io/release":"yes"}}}`, false},
		{"absent", `{"metadata":{"name":"n","annotations":{"node-resized.io/configured-capacity":"{\"cpu\":\"2\"}"}}}`, false},
		{"alone", `{"metadata":{"name":"n","annotations":{"node-resized.io/release":"true"}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseNode([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if v.Configured.Release != tc.want {
				t.Errorf("Release %v, want %v (%+v)", v.Configured.Release, tc.want, v.Configured)
			}
		})
	}
}
