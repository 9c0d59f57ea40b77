// Package kube is node-resized's relay to the Kubernetes API server, and the
// only package that speaks client-go.
//
// The Relay's Run runs two workers until its context ends. The Node watch is
// client-go's reflector over the daemon's own Node (a field selector on its
// name): it lists from the API server's cache (resourceVersion 0), watches
// with bookmarks, and relists when its resourceVersion expires. The Node is
// read as unstructured JSON, so that spec.configuredCapacity is seen when
// the API server serves it, with the annotation
// node-resized.io/configured-capacity as the fallback (ParseNode). Each view
// goes to the NodeSubscribers in order; then, if a kubelet rewrote the
// capacity the relay published, the relay publishes it again. The status
// worker publishes the capacity, allocatable and CapacityConfigured
// condition in one minimal strategic-merge status patch, always the newest
// wanted status, so detection never waits for the API server. Events go
// through the events.k8s.io/v1 API, written by a worker of the relay's
// own: recording one never blocks, the queue is bounded (an event more is
// dropped and logged), a transient failure is tried again a few times,
// and what is queued when the context ends is written on the way out.
//
// Every call goes through client-go's dynamic client, as JSON, converted
// to and from the typed k8s.io/api structs where those are wanted; the
// typed clientset and client-go's event recorder are not used, as their
// scheme of every built-in API group would cost the daemon about 8 MiB of
// memory at start (cmd/node-resized's TestNoTypedClientset keeps them
// out).
//
// The evictor, which brings the node's pods back within a shrunken
// allocatable, is package kube/evict; the relay gives it its API client
// (EvictionClient).
//
// NodeConfig is node-resizectl's side: it sets a Node's configured capacity
// where the daemon reads it (spec.configuredCapacity when the API server
// keeps it, the annotation otherwise) and watches the Node while the daemon
// answers in its CapacityConfigured condition.
//
// The NodeResourceTopology publisher is package kube/nrt; the relay
// gives it its API client (Client).
//
// For node-resized --uninstall, RemoveCondition, RemoveTaint and
// RecordRemoval take node-resized's marks off the Node (its condition, its
// taint) and say so in an event, each a single call that waits for the API
// server; the Node's capacity is left to the kubelet, which writes its own
// at its next status update.
//
// Every retry after a failed API call (a patch, a watch restart, a pod list,
// an eviction or a NodeResourceTopology write) backs off exponentially up to
// a cap, and each wait is jittered, so that the nodes of a fleet do not retry
// in lockstep after an API server outage. The Relay and the Evictor take
// their clock from their options.
package kube
