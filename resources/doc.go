// Package resources is node-resized's one vocabulary for amounts of node
// resources: the names (spelled as the Node API spells them), the base unit
// of each (millicores for cpu, bytes for memory, huge pages and
// ephemeral-storage, a count for pid), the one way to name a huge page
// size, and the one renderer that turns an amount into the quantity string
// the kubelet would write.
//
// The table in names.go is also where the other parts learn what a
// resource is to them: whether Node status carries it (Published), whether
// the configured capacity may give it (Configurable), whether the kubelet
// lets systemReserved and kubeReserved hold it (Reservable), which kubepods
// cgroup limit it sets (KubepodsLimit), whether its amount drifts within
// the memory-jitter tolerance (Jitters), whether it decides a pod's QoS
// class or may be set at pod level (QoSCompute, PodLevel), its unit, and
// its place in displays. Names and Kinds loop over the resources for which
// a fact holds, in display order.
//
// The model (package topology) reads a List from the machine; the decision
// core, the API relay, the local API, the CLI and the metrics all take it
// from there. A new resource is declared once, as a row of that table, and
// read by its reader; nothing else spells it, which spelling_test.go checks.
package resources
