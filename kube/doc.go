// Package kube is node-resized's relay to the Kubernetes API server, and the
// only package that speaks client-go.
//
// It watches the daemon's own Node (a field selector on its name) for the
// configured capacity, read as raw JSON so that spec.configuredCapacity is
// seen when the API server serves it, with the annotation
// node-resized.io/configured-capacity as the fallback. It publishes the
// capacity, allocatable and CapacityConfigured condition in one minimal
// strategic-merge status patch, from a single worker that always sends the
// newest wanted status and retries with backoff, so detection never waits
// for the API server. It records events through the events.k8s.io/v1 API.
//
// The Evictor brings the node's pods back within a shrunken allocatable in
// the kubelet's memory-pressure order, through the Eviction API so that
// PodDisruptionBudgets are honoured (see Rank).
package kube
