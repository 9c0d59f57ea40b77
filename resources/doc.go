// Package resources is node-resized's one vocabulary for amounts of node
// resources: the names (spelled as the Node API spells them), the base unit
// of each (millicores for cpu, bytes for memory, huge pages and
// ephemeral-storage, a count for pid), the one way to name a huge page
// size, and the one renderer that turns an amount into the quantity string
// the kubelet would write.
//
// The model (package topology) reads a List from the machine; the decision
// core, the API relay, the local API, the CLI and the metrics all take it
// from there. A new resource is declared once, in the table in names.go,
// and read by its reader; nothing else spells it.
package resources
