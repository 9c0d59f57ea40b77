// Package nrt keeps the Node's NodeResourceTopology object
// (topology.node.k8s.io/v1alpha2, the custom resource of
// node-feature-discovery's topology-updater and the scheduler's
// NodeResourceTopologyMatch plugin) equal to the newest machine model.
//
// Build turns a model and what the kubelet's configuration says about
// topology into the object, one zone per NUMA node; it is pure. The
// Publisher is told of each model change (Publish never blocks) and
// writes the newest one on a worker of its own, at once, with server-side
// apply, owned by the Node; it does not poll. A failed write is retried
// with jittered exponential backoff up to a cap, always with the newest
// model. The Publisher takes its clock from its options, and speaks to
// the API server through the dynamic client it is given
// (kube.Relay.Client).
package nrt
