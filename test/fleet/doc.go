// Package fleet is the fleet benchmark: many real node-resized processes,
// each with its own synthetic machine, Node and node identity, against
// one test control plane, measuring what the fleet costs the API server
// (from its audit log) and how fast every Node is right when all change
// at once, after an outage and after a rollout (TestFleet). make e2e runs
// a small instance (10 agents) so that it cannot rot; make fleet-bench
// runs 100, 250 and 500.
package fleet
