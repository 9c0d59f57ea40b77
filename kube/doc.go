// Package kube is node-resized's relay to the Kubernetes API server for its
// own Node, and the client plumbing it shares with the packages below it,
// the only ones that speak client-go: kube/evict (the evictor) and
// kube/nrt (the NodeResourceTopology publisher).
//
// Connect builds the API clients from a kubeconfig (RestConfig; the
// in-cluster config inside a pod), limited to the kubelet's own request
// rates by default: the relay's, and one for the evictor (EvictionClient)
// that hands a 429 back at once instead of sitting out its Retry-After,
// and that can act as the Node itself (Options.EvictAsNode). Client is
// the relay's, for the publisher. NodeIdentity says which Node a
// kubeconfig speaks as.
//
// The Relay's Run runs three workers until its context ends, each on a
// goroutine of its own that Run waits for:
//
//   - The status worker patches the newest wanted status (Publish): the
//     capacity, allocatable and CapacityConfigured condition in one
//     minimal strategic-merge patch of the Node's status, so detection
//     never waits for the API server. A status that only adds capacity
//     waits until it has not changed for Options.GainWindow (at most
//     twice that), so that one hot-add costs one patch. With
//     Options.Taint, the NoSchedule taint is set on the Node before the
//     status that asks for it and lifted after the one that no longer
//     does.
//   - The Node watch is client-go's reflector over the daemon's own Node
//     (a field selector on its name): it lists from the API server's cache
//     (resourceVersion 0), watches with bookmarks, and relists when its
//     resourceVersion expires. The Node is read as unstructured JSON, so
//     that spec.configuredCapacity is seen when the API server serves it,
//     with the annotation node-resized.io/configured-capacity as the
//     fallback (ParseNode). Each view goes to the NodeSubscribers in
//     order; then, if a kubelet rewrote the capacity the relay published,
//     the relay publishes it again.
//   - The event writer writes the events recorded with Event through the
//     events.k8s.io/v1 API: recording one never blocks, the queue is
//     bounded (an event more is dropped and logged), a transient failure
//     is tried again a few times, and what is queued when the context ends
//     is written on the way out, for up to a few seconds.
//
// Every call goes through client-go's dynamic client, as JSON, converted
// to and from the typed k8s.io/api structs where those are wanted; the
// typed clientset and client-go's event recorder are not used, as their
// scheme of every built-in API group would cost the daemon about 8 MiB of
// memory at start (cmd/node-resized's TestNoTypedClientset keeps them
// out).
//
// NodeConfig is node-resizectl's side: it sets a Node's configured capacity
// where the daemon reads it (spec.configuredCapacity when the API server
// keeps it, the annotation otherwise) and watches the Node while the daemon
// answers in its CapacityConfigured condition.
//
// For node-resized --uninstall, RemoveCondition, RemoveTaint and
// RecordRemoval take node-resized's marks off the Node (its condition, its
// taint) and say so in an event, each a single call that waits for the API
// server; the Node's capacity is left to the kubelet, which writes its own
// at its next status update.
//
// Every retry after a failed API call (a status or taint patch, a watch
// restart, an event write) backs off exponentially up to a cap, and each
// wait is jittered, so that the nodes of a fleet do not retry in lockstep
// after an API server outage. The relay takes its clock from its options;
// the reflector keeps the real one.
package kube
