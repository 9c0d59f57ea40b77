package types

import (
	"encoding/json"

	"github.com/node-resized/node-resized/resources"
)

// Configured is the configured capacity as read from the API
// (spec.configuredCapacity, or the node-resized.io/configured-capacity
// annotation), kept as the user wrote it so that a malformed value is judged by
// the decision core (package decide). A Configured value is safe for concurrent reads.
type Configured struct {
	// Present is false when the field (or annotation) is absent: the node
	// then follows its physical capacity.
	Present bool `json:"present"`
	// Raw maps resource names to quantities exactly as written.
	Raw map[string]string `json:"raw,omitempty"`
	// Invalid, when not empty, says why the value is not a ResourceList at
	// all (an annotation that is not a JSON object of strings). The whole
	// request is then malformed, hence Infeasible.
	Invalid string `json:"invalid,omitempty"`
	// Release says that the request asks for a planned release (the
	// annotation AnnotationRelease is "true"): the surplus CPUs and memory
	// are taken offline where the node allows it.
	Release bool `json:"release,omitempty"`
}

// ReleaseSuffix ends the Key of a request that asks for a planned
// release, so that asking for it, or no longer asking, is a new request.
const ReleaseSuffix = " with release"

// Key returns a canonical string for the request, used to recognise the same
// spec value across passes and daemon restarts: "" when absent, otherwise the
// JSON object of the recognised entries, as written, keys sorted. Unknown
// resource names do not take part: adding one does not make a new request.
func (c Configured) Key() string {
	if !c.Present {
		return ""
	}
	if c.Invalid != "" {
		b, _ := json.Marshal(map[string]string{"invalid": c.Invalid})
		return string(b)
	}
	m := make(map[string]string)
	for k, v := range c.Raw {
		if recognised(k) {
			m[k] = v
		}
	}
	b, err := json.Marshal(m) // sorted keys
	if err != nil {
		// A map of strings always marshals.
		panic(err)
	}
	if c.Release {
		return string(b) + ReleaseSuffix
	}
	return string(b)
}

// recognised reports whether a configured-capacity key is one node-resized
// validates (the KEP's well-known types); everything else is ignored.
func recognised(name string) bool {
	return resources.Configurable(name)
}
