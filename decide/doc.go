// Package decide is node-resized's decision core: given the machine's physical
// capacity, the configured capacity read from the API, the kubelet's static
// reservations and the state persisted by the previous pass, it decides the
// capacity to publish, the CapacityConfigured condition and the ordered list
// of actions that carry the decision out (KEP-3953's validation rules and
// Paths A1, A2 and B).
//
// Everything here is a pure function of its arguments: no I/O, no clock (the
// time comes in as Input.Now), no goroutines. The arithmetic that the kubelet
// performs (allocatable, the hard eviction reservation, the kubepods cgroup
// limits) is reproduced exactly, so that what node-resized publishes and
// enforces is what a kubelet started on the same machine would compute.
//
// One pass goes in steps, each a function of what the earlier ones
// established: refuse a nonsense physical reading; hold memory within the
// jitter tolerance; judge the configured capacity (configured.go); choose the
// path and the target (paths.go); follow a shrink in flight or settle the
// CapacityConfigured condition, with the kubelet restart step and its
// restart budget (condition.go, kubelet.go, budget.go); and list the actions
// in the order the path prescribes.
//
// Amounts are int64 in base units: cpu in millicores, every other resource in
// bytes. The kubelet's reservations and eviction thresholds may be a fraction
// of a unit (0.3Gi is 322122547.2 bytes); Reservations and Threshold carry
// that fraction separately, in billionths of a unit, so that sums are exact
// and rounded once, as the kubelet rounds them.
package decide
