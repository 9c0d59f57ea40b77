// Package parity holds node-resized's checkpoint rewrites against kubelet
// v1.36.3's own code, with the PodLevelResourceManagers gate off (the CPU
// manager's v2 and the memory manager's v1 layout) and on (v3 and v2,
// with pod-level assignments): every rewrite the shared cases
// (test/kubeletparity/cases) make is loaded with v1.36.3's
// state.NewCheckpointState and started with its static CPU and memory
// policies on the new machine, the controls are refused, and the rewrites
// of the checkpoints v1.37.2 wrote start too (a downgrade by one minor
// version).
//
// The package holds only tests, built on Linux only, in a module of its
// own that pins k8s.io/kubernetes at v1.36.3 and every other dependency at
// the version that kubelet's own build selects (test/kubeletparity/sync-pins).
package parity
