package kube

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/decide"
)

// AnnotationConfiguredCapacity holds the configured capacity as a JSON
// ResourceList ({"cpu":"4","memory":"8Gi"}) where the API server does not
// serve Node.spec.configuredCapacity.
const AnnotationConfiguredCapacity = "node-resized.io/configured-capacity"

// Configured-capacity sources.
const (
	SourceSpec       = "spec.configuredCapacity"
	SourceAnnotation = "annotation " + AnnotationConfiguredCapacity
)

// NodeView is what the daemon needs of its Node. It is a plain value, safe
// for concurrent reads.
type NodeView struct {
	Name            string
	ResourceVersion string
	// Configured is the configured capacity, and Source where it came from
	// (empty when absent).
	Configured decide.Configured
	Source     string
	// Capacity and Allocatable are status.capacity and status.allocatable
	// as they stand, in decide's base units.
	Capacity    decide.Resources
	Allocatable decide.Resources
	// Ready is the Ready condition's status.
	Ready bool
	// Condition is the CapacityConfigured condition as published, if any.
	Condition *decide.Condition
}

// rawNode is the part of a Node this package reads, decoded from raw JSON so
// that fields the client's types do not know (spec.configuredCapacity) are
// not lost.
type rawNode struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		ConfiguredCapacity json.RawMessage `json:"configuredCapacity"`
	} `json:"spec"`
	Status struct {
		Capacity    map[string]string `json:"capacity"`
		Allocatable map[string]string `json:"allocatable"`
		Conditions  []struct {
			Type               string    `json:"type"`
			Status             string    `json:"status"`
			Reason             string    `json:"reason"`
			Message            string    `json:"message"`
			LastTransitionTime time.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
	} `json:"status"`
}

// ParseNode reads a Node from its JSON.
func ParseNode(b []byte) (NodeView, error) {
	var n rawNode
	if err := json.Unmarshal(b, &n); err != nil {
		return NodeView{}, fmt.Errorf("decode Node: %w", err)
	}
	v := NodeView{
		Name:            n.Metadata.Name,
		ResourceVersion: n.Metadata.ResourceVersion,
		Capacity:        quantities(n.Status.Capacity),
		Allocatable:     quantities(n.Status.Allocatable),
	}
	switch {
	case len(n.Spec.ConfiguredCapacity) > 0 && string(n.Spec.ConfiguredCapacity) != "null":
		v.Configured = parseResourceList(n.Spec.ConfiguredCapacity, SourceSpec)
		v.Source = SourceSpec
	case n.Metadata.Annotations[AnnotationConfiguredCapacity] != "":
		v.Configured = parseResourceList([]byte(n.Metadata.Annotations[AnnotationConfiguredCapacity]), SourceAnnotation)
		v.Source = SourceAnnotation
	}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case "Ready":
			v.Ready = c.Status == "True"
		case decide.ConditionType:
			v.Condition = &decide.Condition{
				Status:             decide.ConditionStatus(c.Status),
				Reason:             decide.Reason(c.Reason),
				Message:            c.Message,
				LastTransitionTime: c.LastTransitionTime,
			}
		}
	}
	return v, nil
}

// parseResourceList reads a configured capacity. Anything that is not a
// JSON object of quantities is kept as Invalid, so that the decision core
// marks the request Infeasible instead of ignoring it. Numbers are taken as
// the quantities they spell.
func parseResourceList(b []byte, source string) decide.Configured {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return decide.Configured{Present: true, Invalid: fmt.Sprintf("%s is not a JSON object of quantities: %.80q", source, string(b))}
	}
	raw := make(map[string]string, len(m))
	var bad []string
	for k, v := range m {
		switch x := v.(type) {
		case string:
			raw[k] = x
		case float64:
			raw[k] = strings.TrimSuffix(fmt.Sprintf("%f", x), ".000000")
			if x == float64(int64(x)) {
				raw[k] = fmt.Sprintf("%d", int64(x))
			}
		default:
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return decide.Configured{Present: true, Invalid: fmt.Sprintf("%s: %s: want a quantity string", source, strings.Join(bad, ", "))}
	}
	return decide.Configured{Present: true, Raw: raw}
}

// quantities converts a ResourceList to base units: cpu in millicores,
// everything else in whole units. Unparsable entries are left out.
func quantities(m map[string]string) decide.Resources {
	if m == nil {
		return nil
	}
	out := make(decide.Resources, len(m))
	for k, s := range m {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			continue
		}
		if k == decide.ResourceCPU {
			out[k] = q.MilliValue()
		} else {
			out[k] = q.Value()
		}
	}
	return out
}

// ResourceList renders decide's amounts as a Kubernetes ResourceList, in
// the forms the kubelet writes (cpu as a decimal count or millicores, bytes
// in binary SI).
func ResourceList(r decide.Resources) map[string]string {
	out := make(map[string]string, len(r))
	for k, v := range r {
		if k == decide.ResourceCPU {
			out[k] = resource.NewMilliQuantity(v, resource.DecimalSI).String()
		} else {
			out[k] = resource.NewQuantity(v, resource.BinarySI).String()
		}
	}
	return out
}
