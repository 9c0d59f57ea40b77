// Package metrics defines the Prometheus metrics node-resized exports and
// the registry that serves them.
//
// Every metric the daemon exposes is declared here, in one place, so that the
// names, labels and buckets documented in docs/operating.md stay in step with the
// code. The other packages receive a *Metrics and only increment or observe.
package metrics
