// Package fault injects faults into test builds of node-resized: a process
// killed or frozen at a named point of an operation that changes the node,
// or a step made to misbehave, so that the fault tests on the real node can
// prove each window safe. Only a binary built with the tag faultinject
// acts on it; in every other build Point does nothing and Active is false,
// and the compiler removes both.
//
// A test build reads NODE_RESIZED_FAULT, a comma-separated list of
// name=action pairs (action kill, stop or on). Each fault acts once: the
// first time its point is reached it creates a marker file
// NODE_RESIZED_FAULT_DIR/fault-<name> (default /var/lib/node-resized), and
// a marker that exists turns the fault off, so that a daemon restarted by
// systemd after a kill does not die at the same point again.
package fault
