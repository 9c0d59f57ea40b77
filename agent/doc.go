// Package agent runs node-resized as a Kubernetes node agent: it feeds the
// decision core (package decide) with the machine model, the configured
// capacity read from the Node and the kubelet's reservations, carries the
// decisions out through its actuators (the API relay, and the kubepods
// cgroup enforcer and the evictor where configured) and persists the
// decision state so that a daemon restart forgets nothing.
//
// Every decision is taken on one goroutine, in order; inputs only record
// the newest value and wake it, so neither detection nor the API watch
// ever waits for a decision or for the API server.
package agent
