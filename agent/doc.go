// Package agent runs node-resized as a Kubernetes node agent: it feeds the
// decision core (package decide) with the machine model, the configured
// capacity read from the Node and the kubelet's reservations, carries the
// decisions out through its actuators (the API relay, and the kubepods
// cgroup enforcer and the evictor where configured) and persists the
// decision state so that a daemon restart forgets nothing.
//
// Every decision is taken on one goroutine, in order; inputs only record
// the newest value and wake it, so neither detection nor the API watch
// ever waits for a decision or for the API server. A loss goes from the
// model to the kubepods limits with no file read on the way: the kubelet's
// checkpoints, which a restart of the kubelet needs, are read before a
// decision only when it may restart the kubelet, and otherwise after the
// decision's actions.
package agent
