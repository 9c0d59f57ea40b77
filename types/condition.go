package types

import (
	"strings"
	"time"
)

// ConditionType is the Node condition node-resized owns.
const ConditionType = "CapacityConfigured"

// ConditionStatus is the status of the CapacityConfigured condition.
type ConditionStatus string

// Condition statuses, as in the Node API.
const (
	StatusTrue  ConditionStatus = "True"
	StatusFalse ConditionStatus = "False"
)

// Reason is the reason of the CapacityConfigured condition (KEP-3953).
type Reason string

// The four reasons of the CapacityConfigured condition.
const (
	// ReasonAccepted: the target is applied to cgroups and Node status;
	// stable. Status True.
	ReasonAccepted Reason = "Accepted"
	// ReasonInProgress: a change is being applied (cgroups shrinking, pods
	// being evicted, the kubelet being restarted). Status False.
	ReasonInProgress Reason = "InProgress"
	// ReasonInfeasible: the request exceeds physical capacity or is
	// malformed; nothing of it is actuated. Status False.
	ReasonInfeasible Reason = "Infeasible"
	// ReasonEmergencyReduced: the hardware fell below the configured value;
	// the clamped target is kept and the oversized spec ignored until it is
	// changed. Status False.
	ReasonEmergencyReduced Reason = "EmergencyReduced"
)

// Reasons are the four reasons, in the order above.
var Reasons = []Reason{ReasonAccepted, ReasonInProgress, ReasonInfeasible, ReasonEmergencyReduced}

// Condition is the CapacityConfigured condition to publish. It is a plain
// value, safe for concurrent reads.
type Condition struct {
	Status  ConditionStatus `json:"status,omitempty"`
	Reason  Reason          `json:"reason,omitempty"`
	Message string          `json:"message,omitempty"`
	// LastTransitionTime is the Input.Now at which Status or Reason last
	// changed.
	LastTransitionTime time.Time `json:"lastTransitionTime,omitempty"`
}

// Same reports whether c and o would publish the same condition (status,
// reason and message; the transition time follows from those).
func (c Condition) Same(o Condition) bool {
	return c.Status == o.Status && c.Reason == o.Reason && c.Message == o.Message
}

// ConfiguredPhrase names a configured capacity by its Key. While one is
// present, every condition message starts with it and a colon.
func ConfiguredPhrase(key string) string { return "configured capacity " + key }

// DecidedFor reports whether the condition was decided for the configured
// capacity c, going by its message: while a configured capacity is present
// every message starts with "configured capacity <c.Key()>: ", and none
// starts with "configured capacity " while it is absent. The Node condition
// has no observedGeneration (and an annotation has no generation at all), so
// this is how whoever set a value tells a condition decided for it from
// one left from an earlier value. A condition decided for an earlier,
// equal value counts: it is the same request.
func (c Condition) DecidedFor(conf Configured) bool {
	if c.Message == "" {
		return false
	}
	if !conf.Present {
		return !strings.HasPrefix(c.Message, ConfiguredPhrase(""))
	}
	return strings.HasPrefix(c.Message, ConfiguredPhrase(conf.Key())+": ")
}
