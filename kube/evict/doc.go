// Package evict brings the pods of one Node back within an allocatable
// that shrank under them, when the agent asks for it (decide.Evict).
//
// The Evictor works on the newest request (a decide.Evict, by generation)
// on a worker of its own: it lists the Node's pods, ranks them with Rank
// in the kubelet's memory-pressure order (a Guaranteed pod whose exclusive
// CPUs went offline goes first; static, mirror and system-critical pods
// never go), and evicts the victims one by one through the Eviction API,
// so that PodDisruptionBudgets are honoured. It reports its progress
// (blocked, done) to the agent and, given a function for it, records an
// event on the Node for each eviction.
//
// A PodDisruptionBudget's refusal, evicted pods still terminating, and
// pods that may not be evicted and do not fit are waited out with a
// steady, jittered poll; a failed API call backs off exponentially up to
// a cap, each wait jittered, so that the nodes of a fleet do not retry in
// lockstep. The Evictor takes its clock from its options. It speaks to
// the API server through the dynamic client it is given
// (kube.Relay.EvictionClient, which hands a 429 back at once).
package evict
