// Package kubelet is node-resized's room for everything about the local
// kubelet: its configuration read the way the kubelet reads it (the
// KubeletConfiguration file, its drop-in directory, the defaults that
// matter) turned into the reservations the decision core computes with,
// and its CPU manager checkpoint read and verified the way the kubelet
// verifies it. CPU lists in the kubelet's own formats are parsed with
// k8s.io/utils/cpuset, the package the kubelet itself uses.
//
// The running kubelet's view: AllocatableResources asks the kubelet's
// pod-resources API (GetAllocatableResources on its unix socket, with
// k8s.io/kubelet's podresources v1 types over gRPC) which CPUs and how much
// memory per NUMA node it found when it started.
//
// Its restart: Restarter restarts the kubelet's unit through systemd's
// D-Bus client (systemd.Client, behind the small UnitControl interface),
// only when it is active, waiting for the job's result. When to restart is
// not decided here.
//
// Checkpoint safety before a restart: PlanCPUManagerCheckpoint and
// PlanMemoryManagerCheckpoint read cpu_manager_state and
// memory_manager_state in every layout kubelet v1.37 loads, verify their
// checksums as it does, and plan the checkpoint its static policies accept
// on the new machine (their validateState): CPUs added join the shared
// pool, pods on CPUs or NUMA nodes that are gone (evicted first) are
// dropped, every other assignment is kept and the memory manager's
// machine state is recomputed around it. What no checkpoint can fix is an
// error wrapping ErrCheckpointInfeasible that says what an operator must
// do. Apply writes a plan in v1.37's layout, with the checksums older
// kubelets check too, atomically (temporary file, fsync, rename) and keeps
// the previous file beside it (BackupSuffix). test/kubeletparity loads
// every written file with the kubelet's own state packages and starts its
// policies on it.
//
// Its side effects are reading files, writing the two checkpoints when a
// plan is applied, the systemd jobs of a restart and the gRPC calls above.
package kubelet
