// Package kubeletparity checks node-resized's allocatable and kubepods
// cgroup arithmetic against the kubelet's own code.
//
// For a table of KubeletConfiguration files (testdata/) and machine
// capacities, the tests compute the allocatable resources and the kubepods
// cgroup limits twice:
//
//   - node-resized's way: kubelet.Load, then decide.Allocatable and
//     decide.KubepodsLimits on the Reservations it returns;
//   - the kubelet's way: the effective configuration taken from the kubelet
//     command itself (app.NewKubeletCommand, run with --config and
//     --config-dir up to its validation, which it is made to fail: see
//     command_test.go), so that the file loading, the kubelet's config
//     scheme and v1beta1 defaulting, the eviction defaults and the drop-in
//     merge are all the kubelet's; eviction thresholds parsed by
//     eviction.ParseThresholdConfig and sized by
//     evictionapi.GetThresholdQuantity; capacity built by
//     cadvisor.CapacityFromMachineInfo and
//     cadvisor.EphemeralStorageCapacityFromFsInfo; allocatable produced by
//     the kubelet's node status setter nodestatus.MachineInfo; cgroup shares
//     by cm.MilliCPUToShares and huge page limits by cm.HugePageLimits.
//
// and require them to be equal to the byte (the millicore for cpu). The
// kubelet's file loader (configfiles.NewFsLoader) is also driven directly
// and must agree with the command.
//
// Acceptance is compared too: a file the kubelet refuses to load must be
// refused by kubelet.Load.
//
// The few pieces of the kubelet that are unexported and cannot be reached
// through an exported path are reproduced in kubelet_test.go, each marked
// REPRODUCED with the upstream file it comes from; everything else is the
// kubelet's code, compiled from k8s.io/kubernetes at the version test/go.mod
// requires. functions_test.go compares the individual conversions (cpu
// shares and weight, thresholds, reservations) over wide ranges, and shows
// that the comparison reports deliberate mistakes.
//
// The package holds only tests, built on Linux only: the kubelet's node
// allocatable and cgroup code (pkg/kubelet/cm) and its default eviction
// thresholds are Linux's.
package kubeletparity
