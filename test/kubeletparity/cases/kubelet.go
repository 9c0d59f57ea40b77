package cases

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// Kubelet is one kubelet build as the parity tests run it: a version and
// the feature gates that change which checkpoint fields it writes and
// reads.
type Kubelet struct {
	// Version is the k8s.io/kubernetes version its module pins: v1.36.3.
	Version string
	// PodLevel is the PodLevelResourceManagers gate (v1.36 on): the kubelet
	// keeps pod-level CPU and memory assignments (podEntries), and v1.36
	// then writes and reads the CPU manager's v3 and the memory manager's
	// v2 layout.
	PodLevel bool
	// Baselines is the InPlacePodVerticalScalingExclusiveCPUs gate (v1.37
	// on): the CPU manager keeps each container's CPUs as admitted in its
	// v4 data.
	Baselines bool
}

// Kubelets are the kubelet builds node-resized is tested with, oldest
// first: every supported minor version, and on v1.36 and v1.37 both
// settings of PodLevelResourceManagers.
var Kubelets = []Kubelet{
	{Version: "v1.34.4"},
	{Version: "v1.35.4"},
	{Version: "v1.36.3"},
	{Version: "v1.36.3", PodLevel: true},
	{Version: "v1.37.2"},
	{Version: "v1.37.2", PodLevel: true, Baselines: true},
}

// Of returns the builds of Kubelets at version.
func Of(version string) []Kubelet {
	var out []Kubelet
	for _, k := range Kubelets {
		if k.Version == version {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		panic("cases: no kubelet " + version)
	}
	return out
}

// Minor is the kubelet's minor version: 36 for v1.36.3.
func (k Kubelet) Minor() int {
	parts := strings.Split(strings.TrimPrefix(k.Version, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" {
		panic("cases: kubelet version " + k.Version)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		panic("cases: kubelet version " + k.Version)
	}
	return n
}

// Newer returns the builds one minor version newer than k: those a
// downgrade to k comes from.
func (k Kubelet) Newer() []Kubelet {
	var out []Kubelet
	for _, n := range Kubelets {
		if n.Minor() == k.Minor()+1 {
			out = append(out, n)
		}
	}
	return out
}

func (k Kubelet) String() string {
	s := k.Version
	if k.PodLevel {
		s += "+PodLevelResourceManagers"
	}
	if k.Baselines {
		s += "+InPlacePodVerticalScalingExclusiveCPUs"
	}
	return s
}

// dir names k's directory under testdata/.
func (k Kubelet) dir() string {
	s := k.Version
	if k.PodLevel {
		s += "-podlevel"
	}
	if k.Baselines {
		s += "-baselines"
	}
	return s
}

// ReadsData reports whether the kubelet loads the v4 (CPU) and v3 (memory)
// layouts, whose data and dataChecksum it trusts over the legacy fields
// beside them: v1.37. Older kubelets read only the legacy fields.
func (k Kubelet) ReadsData() bool { return k.Minor() >= 37 }

// CPUWrites is the CPU manager layout the kubelet writes.
func (k Kubelet) CPUWrites() string {
	switch {
	case k.Minor() >= 37:
		return checkpoint.CPUManagerV4
	case k.Minor() == 36 && k.PodLevel:
		return checkpoint.CPUManagerV3
	}
	return checkpoint.CPUManagerV2
}

// MemoryWrites is the memory manager layout the kubelet writes.
func (k Kubelet) MemoryWrites() string {
	switch {
	case k.Minor() >= 37:
		return checkpoint.MemoryManagerV3
	case k.Minor() == 36 && k.PodLevel:
		return checkpoint.MemoryManagerV2
	}
	return checkpoint.MemoryManagerV1
}

func (k Kubelet) check() error {
	if k.PodLevel && k.Minor() < 36 {
		return fmt.Errorf("%s: PodLevelResourceManagers came in v1.36", k)
	}
	if k.Baselines && k.Minor() < 37 {
		return fmt.Errorf("%s: the CPU baselines came in v1.37", k)
	}
	return nil
}
