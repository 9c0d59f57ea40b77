package kube

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/types"
)

// rawNode is the part of a Node this package reads, decoded from raw JSON so
// that fields the client's types do not know (spec.configuredCapacity) are
// not lost.
type rawNode struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
		ManagedFields   []managedFields   `json:"managedFields"`
	} `json:"metadata"`
	Spec struct {
		ConfiguredCapacity json.RawMessage `json:"configuredCapacity"`
	} `json:"spec"`
	Status struct {
		NodeInfo struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
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

// managedFields is one entry of metadata.managedFields.
type managedFields struct {
	Manager     string    `json:"manager"`
	Operation   string    `json:"operation"`
	Subresource string    `json:"subresource"`
	Time        time.Time `json:"time"`
	FieldsType  string    `json:"fieldsType"`
	FieldsV1    struct {
		Status struct {
			Capacity map[string]json.RawMessage `json:"f:capacity"`
		} `json:"f:status"`
	} `json:"fieldsV1"`
}

// ParseNode reads what the daemon needs of a Node from the Node's JSON.
//
// Who wrote status.capacity comes from metadata.managedFields. The API
// server records a field under the manager whose write changed its value
// (an Update, which is what the kubelet's and the daemon's status patches
// are, takes over only the fields whose values it changes; a write that
// leaves a value as it was leaves its owner too), and stamps a manager's
// entry with the time of its last write that changed anything. So a
// status.capacity value owned by the kubelet is the kubelet's own view,
// written after whatever the daemon last published there.
func ParseNode(b []byte) (types.NodeView, error) {
	var n rawNode
	if err := json.Unmarshal(b, &n); err != nil {
		return types.NodeView{}, fmt.Errorf("decode Node: %w", err)
	}
	v := types.NodeView{
		Name:            n.Metadata.Name,
		ResourceVersion: n.Metadata.ResourceVersion,
		Capacity:        quantities(n.Status.Capacity),
		Allocatable:     quantities(n.Status.Allocatable),
		KubeletVersion:  n.Status.NodeInfo.KubeletVersion,
	}
	switch {
	case len(n.Spec.ConfiguredCapacity) > 0 && string(n.Spec.ConfiguredCapacity) != "null":
		v.Configured = parseResourceList(n.Spec.ConfiguredCapacity, types.SourceSpec)
		v.Source = types.SourceSpec
	case n.Metadata.Annotations[types.AnnotationConfiguredCapacity] != "":
		v.Configured = parseResourceList([]byte(n.Metadata.Annotations[types.AnnotationConfiguredCapacity]), types.SourceAnnotation)
		v.Source = types.SourceAnnotation
	}
	if v.Configured.Present {
		v.Configured.Release = n.Metadata.Annotations[types.AnnotationRelease] == "true"
	}
	for _, mf := range n.Metadata.ManagedFields {
		if mf.Subresource == "status" {
			if v.StatusWrites == nil {
				v.StatusWrites = map[string]time.Time{}
			}
			if t := v.StatusWrites[mf.Manager]; mf.Time.After(t) {
				v.StatusWrites[mf.Manager] = mf.Time
			}
		}
		for key := range mf.FieldsV1.Status.Capacity {
			name, ok := strings.CutPrefix(key, "f:")
			if !ok {
				continue
			}
			if v.CapacityOwners == nil {
				v.CapacityOwners = map[string]string{}
			}
			v.CapacityOwners[name] = mf.Manager // the kubelet's registration (no subresource) included
		}
	}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case "Ready":
			v.Ready = c.Status == "True"
		case types.ConditionType:
			v.Condition = &types.Condition{
				Status:             types.ConditionStatus(c.Status),
				Reason:             types.Reason(c.Reason),
				Message:            c.Message,
				LastTransitionTime: c.LastTransitionTime,
			}
		}
	}
	return v, nil
}

// parseResourceList reads a configured capacity. Anything that is not a
// JSON object of quantities is kept as Invalid, so that the decision core
// marks the request Infeasible instead of ignoring it. Each value is taken
// as resource.Quantity takes it: a string as written, a JSON number as the
// quantity its literal spells (1.5, 1e3, 0.0000001), never rounded.
func parseResourceList(b []byte, source string) types.Configured {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return types.Configured{Present: true, Invalid: fmt.Sprintf("%s is not a JSON object of quantities: %.80q", source, string(b))}
	}
	raw := make(map[string]string, len(m))
	var bad []string
	for k, v := range m {
		var s string
		var n json.Number
		switch {
		case string(v) == "null":
			bad = append(bad, k)
		case json.Unmarshal(v, &s) == nil:
			raw[k] = s
		case json.Unmarshal(v, &n) == nil:
			raw[k] = n.String()
		default:
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return types.Configured{Present: true, Invalid: fmt.Sprintf("%s: %s: want a quantity string", source, strings.Join(bad, ", "))}
	}
	return types.Configured{Present: true, Raw: raw}
}

// quantities converts a ResourceList to base units. Unparsable entries are
// left out.
func quantities(m map[string]string) resources.List {
	if m == nil {
		return nil
	}
	out := make(resources.List, len(m))
	for k, s := range m {
		if v, err := resources.Parse(k, s); err == nil {
			out[k] = v
		}
	}
	return out
}
