// Package parity holds node-resized's checkpoint rewrites against kubelet
// v1.34.4's own code (the CPU manager's v2 and the memory manager's v1
// layout): every rewrite the shared cases (test/kubeletparity/cases) make
// is loaded with v1.34.4's state.NewCheckpointState and started with its
// static CPU and memory policies on the new machine, the controls are
// refused, and the rewrites of the checkpoints v1.35.4 wrote start too (a
// downgrade by one minor version).
//
// The package holds only tests, built on Linux only, in a module of its
// own that pins k8s.io/kubernetes at v1.34.4 and every other dependency at
// the version that kubelet's own build selects (test/kubeletparity/sync-pins).
package parity
