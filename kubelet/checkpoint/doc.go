// Package checkpoint reads the kubelet's CPU manager and memory manager
// checkpoints (cpu_manager_state, memory_manager_state) as the kubelet
// loads them, and rewrites them for a changed machine so that the
// kubelet's static policies accept them when it starts.
//
// ReadCPUManager and ReadMemoryManager read every layout kubelet v1.37
// loads and verify its checksums as it does. PlanCPUManager and
// PlanMemoryManager plan the checkpoint the policies accept on the new
// machine (their validateState): CPUs added join the shared pool, pods on
// CPUs or NUMA nodes that are gone (evicted first) are dropped, every other
// assignment is kept and the memory manager's machine state is recomputed
// around it. What no checkpoint can fix is an error wrapping ErrInfeasible
// that says what an operator must do. Apply writes a plan in v1.37's
// layout whatever layout it was read in, atomically (temporary file,
// fsync, rename), and keeps the previous file beside it (BackupSuffix).
// That layout's legacy fields, which kubelets before v1.37 read instead of
// its data, are written in the layout that holds the state: the CPU
// manager's v2 and the memory manager's v1, which v1.34 to v1.36 read,
// or v3 and v2 when a pod holds pod-level assignments, which v1.36 with
// PodLevelResourceManagers reads. test/kubeletparity (v1.37) and its
// modules for v1.34 to v1.36 load every written file with each kubelet's
// own state packages and start its policies on it.
//
// Both checkpoints go through one skeleton (checkpoint.go): read with a
// size cap, decode in the first layout that takes the file, newest first,
// as the kubelet tries them, plan, write. Each layout is a file of its own
// (cpu_v2.go … cpu_v4.go, memory_v1.go … memory_v3.go) with its decoding
// and its checksum, listed in cpu.go and memory.go; the test data under
// testdata/ was written by the kubelet's own code. A layout a new kubelet
// writes is one new file, one line in that list, and its test data; which
// layout a plan writes is chosen in cpu_plan.go and memory_plan.go.
//
// Its side effects are reading the checkpoints, and writing them when a
// plan is applied.
package checkpoint
