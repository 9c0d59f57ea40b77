// Package types holds the small values that node-resized's parts pass to
// one another: what the daemon needs of its Node (NodeView) and wants
// published on it (NodeStatus), the CapacityConfigured condition and its
// reasons, the configured capacity as the user wrote it, the running
// kubelet's view, the evictor's and the restarter's reports, the events
// the daemon records and the relay's counters.
//
// They are plain values with no behaviour beyond formatting and
// comparison, safe for concurrent reads. The decision core (package
// decide) takes them in and hands them out; the detectors, the relay, the
// actuators and the local API meet through them without importing one
// another or the decision core.
package types
