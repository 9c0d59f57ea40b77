// Package kubelet is what the local kubelet is to node-resized, as read:
// its configuration, its version, and the kubelet that runs.
//
//   - Load reads its KubeletConfiguration the way the kubelet reads it
//     (the file, its drop-in directory, the defaults that matter) and
//     turns it into the reservations the decision core computes with.
//   - Watcher follows what the running kubelet believes the machine is:
//     its unit's state (from systemd), its status writes on the Node, and
//     its pod-resources API, which AllocatableResources asks
//     (GetAllocatableResources over gRPC on the kubelet's unix socket).
//   - VersionNote says what a kubelet version means for its checkpoints.
//
// It only reads: its side effects are reading files and the
// pod-resources and systemd calls. What node-resized does to the kubelet
// (a restart, the pre-start, a recovery, a rollback) is package
// kubelet/lifecycle; its checkpoints are package kubelet/checkpoint.
package kubelet
