// Package cases holds the checkpoint rewrites that every kubelet version
// node-resized supports is held against, shared by the parity modules of
// each version (test/kubeletparity for v1.37, test/kubeletparity/v1_34 …
// v1_36 for the older ones).
//
// It describes machines before and after a change (CPUs hot-added or
// removed, NUMA nodes whose memory grew or shrank, nodes added or gone),
// the CPU manager and memory manager state a kubelet had on the old machine
// (exclusive CPUs kept, pod-level assignments where the kubelet has them,
// CPU baselines on v1.37), and plans and writes each rewrite with
// node-resized's own kubelet/checkpoint package, as the daemon does. It also
// holds the controls, files every kubelet or some versions must refuse.
//
// It depends on no version of k8s.io/kubernetes. A version module
// implements CPUKubelet and MemoryKubelet with that version's own state
// packages and static policies (write a checkpoint, load one and run the
// policy's Start on it for a machine) and calls RunCPU, RunMemory,
// CheckStarting and the Downgrade functions; everything else, what is
// written and what must hold, is here.
//
// The starting checkpoints a newer kubelet wrote, which the downgrade tests
// of the next older version rewrite and load, are committed under testdata/
// (see CheckStarting for how they are made and kept current).
package cases
