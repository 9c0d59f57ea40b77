// Package kubelet is what the local kubelet is to node-resized: its
// configuration, and the kubelet that runs.
//
//   - Load reads its KubeletConfiguration the way the kubelet reads it
//     (the file, its drop-in directory, the defaults that matter) and
//     turns it into the reservations the decision core computes with.
//   - Watcher follows what the running kubelet believes the machine is:
//     its unit's state (from systemd), its status writes on the Node, and
//     its pod-resources API, which AllocatableResources asks
//     (GetAllocatableResources over gRPC on the kubelet's unix socket).
//   - Restarter restarts it into a changed machine through systemd, with
//     its CPU and memory manager checkpoints made safe first (package
//     kubelet/checkpoint). When to restart is not decided here.
//
// Its side effects are reading files, the pod-resources calls, and the
// systemd jobs and checkpoint writes of a restart.
package kubelet
