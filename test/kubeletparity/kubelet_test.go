//go:build linux

package kubeletparity

// The kubelet's side of the comparison. Everything here calls the kubelet's
// own packages, except the blocks marked "REPRODUCED", which copy unexported
// kubelet code (with the upstream file named) because no exported path
// reaches it.

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"

	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	"k8s.io/kubernetes/pkg/kubelet/nodestatus"
	"k8s.io/kubernetes/pkg/kubelet/stats/pidlimit"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
)

// machine is one machine as cAdvisor and the kernel describe it.
type machine struct {
	name       string
	cpus       int               // online logical CPUs, ids 0..cpus-1
	memTotalKi uint64            // /proc/meminfo MemTotal
	hugePages  map[uint64]uint64 // page size in KiB → nr_hugepages
	rootfs     uint64            // capacity of the kubelet root filesystem, bytes
	pidMax     int64             // /proc/sys/kernel/pid_max
}

// cadvisorInfo is the cAdvisor MachineInfo of m: one NUMA node, one socket,
// one thread per core.
func (m machine) cadvisorInfo() *cadvisorapi.MachineInfo {
	mi := &cadvisorapi.MachineInfo{
		NumCores:         m.cpus,
		NumPhysicalCores: m.cpus,
		NumSockets:       1,
		MemoryCapacity:   m.memTotalKi * 1024,
		MachineID:        "parity",
		SystemUUID:       "parity",
		BootID:           "parity",
	}
	node := cadvisorapi.Node{Id: 0, Memory: m.memTotalKi * 1024}
	for id := 0; id < m.cpus; id++ {
		node.Cores = append(node.Cores, cadvisorapi.Core{Id: id, Threads: []int{id}, SocketID: 0})
	}
	for _, size := range sortedKeys(m.hugePages) {
		hp := cadvisorapi.HugePagesInfo{PageSize: size, NumPages: m.hugePages[size]}
		mi.HugePages = append(mi.HugePages, hp)
		node.HugePages = append(node.HugePages, hp)
	}
	mi.Topology = []cadvisorapi.Node{node}
	return mi
}

// kubeletConfigFile loads a KubeletConfiguration file the way the kubelet's
// cmd/kubelet/app loadConfigFile does: the kubelet's own file loader (strict
// decoding with the lenient fallback, the kubelet's config scheme, v1beta1
// defaulting, conversion to the internal type), then the eviction defaults.
func kubeletConfigFile(ctx context.Context, path string) (*kubeletconfiginternal.KubeletConfiguration, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, abs)
	if err != nil {
		return nil, err
	}
	kc, err := loader.Load(ctx)
	if err != nil {
		return nil, err
	}
	// REPRODUCED from k8s.io/kubernetes@v1.37.2 cmd/kubelet/app/server.go,
	// loadConfigFile (unexported), the eviction defaults block, verbatim but
	// for a copy of eviction.DefaultEvictionHard so that no case can modify
	// the package-level map.
	if kc.EvictionHard == nil {
		kc.EvictionHard = maps.Clone(eviction.DefaultEvictionHard)
	} else if kc.MergeDefaultEvictionSettings {
		for k, v := range eviction.DefaultEvictionHard {
			if _, exists := kc.EvictionHard[k]; !exists {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, nil
}

// kubeletNodeConfig is what the kubelet's run() hands the container manager
// for node allocatable.
type kubeletNodeConfig struct {
	SystemReserved         v1.ResourceList
	KubeReserved           v1.ResourceList
	HardEvictionThresholds []evictionapi.Threshold
	EnforcePods            bool // cgroupsPerQOS && enforceNodeAllocatable has "pods"
	LocalStorageIsolation  bool
}

// kubeletNodeAllocatableConfig turns a loaded configuration into the node
// allocatable part of cm.NodeConfig exactly as cmd/kubelet/app run() does.
func kubeletNodeAllocatableConfig(kc *kubeletconfiginternal.KubeletConfiguration, mi *cadvisorapi.MachineInfo) (*kubeletNodeConfig, error) {
	// run() edits the configuration's own maps; work on copies.
	sysMap, kubeMap := maps.Clone(kc.SystemReserved), maps.Clone(kc.KubeReserved)

	reservedSystemCPUs, err := getReservedCPUs(mi, kc.ReservedSystemCPUs)
	if err != nil {
		return nil, err
	}
	// REPRODUCED from k8s.io/kubernetes@v1.37.2 cmd/kubelet/app/server.go,
	// run() (unexported), the reserved-cpus override, verbatim.
	if reservedSystemCPUs.Size() > 0 {
		if kubeMap != nil {
			delete(kubeMap, "cpu")
		}
		if sysMap == nil {
			sysMap = make(map[string]string)
		}
		sysMap["cpu"] = strconv.Itoa(reservedSystemCPUs.Size())
	}
	kubeReserved, err := parseResourceList(kubeMap)
	if err != nil {
		return nil, fmt.Errorf("--kube-reserved value failed to parse: %w", err)
	}
	systemReserved, err := parseResourceList(sysMap)
	if err != nil {
		return nil, fmt.Errorf("--system-reserved value failed to parse: %w", err)
	}
	// The kubelet's own parser, called as run() calls it
	// (ExperimentalNodeAllocatableIgnoreEvictionThreshold is a flag, false
	// by default).
	hardEvictionThresholds, err := eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	enforcePods := false
	for _, k := range kc.EnforceNodeAllocatable {
		if k == kubetypes.NodeAllocatableEnforcementKey {
			enforcePods = true
		}
	}
	return &kubeletNodeConfig{
		SystemReserved:         systemReserved,
		KubeReserved:           kubeReserved,
		HardEvictionThresholds: hardEvictionThresholds,
		EnforcePods:            kc.CgroupsPerQOS && enforcePods,
		LocalStorageIsolation:  kc.LocalStorageCapacityIsolation,
	}, nil
}

// getReservedCPUs is cmd/kubelet/app getReservedCPUs (unexported).
// REPRODUCED from k8s.io/kubernetes@v1.37.2 cmd/kubelet/app/server.go; its
// pieces are the kubelet's exported topology.Discover and cpuset.Parse.
func getReservedCPUs(machineInfo *cadvisorapi.MachineInfo, cpus string) (cpuset.CPUSet, error) {
	emptyCPUSet := cpuset.New()

	if cpus == "" {
		return emptyCPUSet, nil
	}

	topo, err := topology.Discover(klog.Background(), machineInfo)
	if err != nil {
		return emptyCPUSet, fmt.Errorf("unable to discover CPU topology info: %s", err)
	}
	reservedCPUSet, err := cpuset.Parse(cpus)
	if err != nil {
		return emptyCPUSet, fmt.Errorf("unable to parse reserved-cpus list: %s", err)
	}
	allCPUSet := topo.CPUDetails.CPUs()
	if !reservedCPUSet.IsSubsetOf(allCPUSet) {
		return emptyCPUSet, fmt.Errorf("reserved-cpus: %s is not a subset of online-cpus: %s", cpus, allCPUSet.String())
	}
	return reservedCPUSet, nil
}

// parseResourceList is cmd/kubelet/app parseResourceList (unexported; the
// only similar exported function, cm.ParseQOSReserved, parses percentages).
// REPRODUCED verbatim from k8s.io/kubernetes@v1.37.2
// cmd/kubelet/app/server.go.
func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	rl := make(v1.ResourceList)
	for k, v := range m {
		switch v1.ResourceName(k) {
		// CPU, memory, local storage, and PID resources are supported.
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, pidlimit.PIDs:
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("failed to parse quantity %q for %q resource: %w", v, k, err)
			}
			if q.Sign() == -1 {
				return nil, fmt.Errorf("resource quantity for %q cannot be negative: %v", k, v)
			}
			if v1.ResourceName(k) == v1.ResourceCPU {
				q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
			}
			rl[v1.ResourceName(k)] = q
		default:
			return nil, fmt.Errorf("cannot reserve %q resource", k)
		}
	}
	return rl, nil
}

// containerManager holds the state of the kubelet's containerManagerImpl
// that node allocatable reads. containerManagerImpl is unexported and only
// cm.NewContainerManager builds one, which needs live cgroups, a cAdvisor,
// the device plugin directory under /var/lib/kubelet and more: too much of
// a real node for a unit test.
type containerManager struct {
	nc *kubeletNodeConfig
	// capacity is cm.capacity: cadvisor.CapacityFromMachineInfo, plus
	// ephemeral-storage once the manager has started with
	// localStorageCapacityIsolation.
	capacity v1.ResourceList
	// internalCapacity is cm.internalCapacity: CapacityFromMachineInfo plus
	// the pid resource (pid_max).
	internalCapacity v1.ResourceList
}

func newContainerManager(nc *kubeletNodeConfig, mi *cadvisorapi.MachineInfo, m machine) *containerManager {
	c := &containerManager{nc: nc, capacity: v1.ResourceList{}, internalCapacity: v1.ResourceList{}}
	// As cm.NewContainerManager (container_manager_linux.go) builds them.
	for k, v := range cadvisor.CapacityFromMachineInfo(mi) {
		c.capacity[k] = v
		c.internalCapacity[k] = v
	}
	c.internalCapacity[pidlimit.PIDs] = *resource.NewQuantity(m.pidMax, resource.DecimalSI)
	// As containerManagerImpl.Start does.
	if nc.LocalStorageIsolation {
		for k, v := range cadvisor.EphemeralStorageCapacityFromFsInfo(cadvisorapi.FsInfo{Capacity: m.rootfs}) {
			c.capacity[k] = v
		}
	}
	return c
}

// GetCapacity is containerManagerImpl.GetCapacity once the manager has
// started (cm.capacity then holds ephemeral-storage already).
func (c *containerManager) GetCapacity(_ klog.Logger, _ bool) v1.ResourceList {
	return c.capacity
}

// GetNodeAllocatableReservation is containerManagerImpl's method of that
// name. REPRODUCED from k8s.io/kubernetes@v1.37.2
// pkg/kubelet/cm/node_container_manager_linux.go (locking dropped).
func (c *containerManager) GetNodeAllocatableReservation() v1.ResourceList {
	evictionReservation := hardEvictionReservation(c.nc.HardEvictionThresholds, c.capacity)
	result := make(v1.ResourceList)
	for k := range c.capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		if c.nc.SystemReserved != nil {
			value.Add(c.nc.SystemReserved[k])
		}
		if c.nc.KubeReserved != nil {
			value.Add(c.nc.KubeReserved[k])
		}
		if evictionReservation != nil {
			value.Add(evictionReservation[k])
		}
		if !value.IsZero() {
			result[k] = *value
		}
	}
	return result
}

// hardEvictionReservation is pkg/kubelet/cm hardEvictionReservation
// (unexported). REPRODUCED verbatim from k8s.io/kubernetes@v1.37.2
// pkg/kubelet/cm/helpers.go; the arithmetic is the kubelet's exported
// evictionapi.GetThresholdQuantity.
func hardEvictionReservation(thresholds []evictionapi.Threshold, capacity v1.ResourceList) v1.ResourceList {
	if len(thresholds) == 0 {
		return nil
	}
	ret := v1.ResourceList{}
	for _, threshold := range thresholds {
		if threshold.Operator != evictionapi.OpLessThan {
			continue
		}
		switch threshold.Signal {
		case evictionapi.SignalMemoryAvailable:
			memoryCapacity := capacity[v1.ResourceMemory]
			value := evictionapi.GetThresholdQuantity(threshold.Value, &memoryCapacity)
			ret[v1.ResourceMemory] = *value
		case evictionapi.SignalNodeFsAvailable:
			storageCapacity := capacity[v1.ResourceEphemeralStorage]
			value := evictionapi.GetThresholdQuantity(threshold.Value, &storageCapacity)
			ret[v1.ResourceEphemeralStorage] = *value
		}
	}
	return ret
}

// kubeletNodeStatus runs the kubelet's node status setter
// nodestatus.MachineInfo on an empty Node, wired as the kubelet wires it
// (pkg/kubelet/kubelet_node_status.go defaultNodeStatusFuncs): the machine
// info from cAdvisor, the container manager's capacity and reservation, no
// device plugins.
func kubeletNodeStatus(ctx context.Context, c *containerManager, mi *cadvisorapi.MachineInfo, maxPods int) (*v1.Node, error) {
	setter := nodestatus.MachineInfo("parity-node", maxPods, 0,
		func() (*cadvisorapi.MachineInfo, error) { return mi, nil },
		c.GetCapacity,
		func(klog.Logger) (v1.ResourceList, v1.ResourceList, []string) { return nil, nil, nil },
		c.GetNodeAllocatableReservation,
		func(eventType, event, message string) {},
		func() *bool { return nil },
		c.nc.LocalStorageIsolation,
	)
	node := &v1.Node{}
	if err := setter(ctx, node); err != nil {
		return nil, err
	}
	return node, nil
}

// kubeletCgroupConfig is what the kubelet writes on the kubepods cgroup.
type kubeletCgroupConfig struct {
	Memory        *int64
	CPUShares     *uint64
	CPUWeight     uint64 // cgroup v2
	PidsLimit     *int64
	HugePageLimit map[int64]int64
}

// kubepodsCgroupConfig is what containerManagerImpl.enforceNodeAllocatableCgroups
// (and createNodeAllocatableCgroups) computes for the kubepods cgroup.
func (c *containerManager) kubepodsCgroupConfig() kubeletCgroupConfig {
	// REPRODUCED from k8s.io/kubernetes@v1.37.2
	// pkg/kubelet/cm/node_container_manager_linux.go,
	// enforceNodeAllocatableCgroups (unexported method): the choice of base.
	nodeAllocatable := c.internalCapacity
	if c.nc.EnforcePods {
		nodeAllocatable = c.getNodeAllocatableAbsoluteImpl(c.internalCapacity)
	}
	rc := getCgroupConfigInternal(nodeAllocatable)
	out := kubeletCgroupConfig{
		Memory:        rc.Memory,
		CPUShares:     rc.CPUShares,
		PidsLimit:     rc.PidsLimit,
		HugePageLimit: rc.HugePageLimit,
	}
	out.CPUWeight = getCPUWeight(rc.CPUShares)
	return out
}

// getNodeAllocatableAbsoluteImpl is containerManagerImpl's method of that
// name. REPRODUCED verbatim from k8s.io/kubernetes@v1.37.2
// pkg/kubelet/cm/node_container_manager_linux.go.
func (c *containerManager) getNodeAllocatableAbsoluteImpl(capacity v1.ResourceList) v1.ResourceList {
	result := make(v1.ResourceList)
	for k, v := range capacity {
		value := v.DeepCopy()
		if c.nc.SystemReserved != nil {
			value.Sub(c.nc.SystemReserved[k])
		}
		if c.nc.KubeReserved != nil {
			value.Sub(c.nc.KubeReserved[k])
		}
		if value.Sign() < 0 {
			// Negative Allocatable resources don't make sense.
			value.Set(0)
		}
		result[k] = value
	}
	return result
}

// getCgroupConfigInternal is pkg/kubelet/cm getCgroupConfigInternal
// (unexported) with compressibleResourcesOnly false, as the kubepods cgroup
// uses it. REPRODUCED from k8s.io/kubernetes@v1.37.2
// pkg/kubelet/cm/node_container_manager_linux.go; the conversions are the
// kubelet's exported cm.MilliCPUToShares and cm.HugePageLimits, the result
// its exported cm.ResourceConfig.
func getCgroupConfigInternal(rl v1.ResourceList) *cm.ResourceConfig {
	if rl == nil {
		return nil
	}
	var rc cm.ResourceConfig
	if q, exists := rl[v1.ResourceMemory]; exists {
		// Memory is defined in bytes.
		val := q.Value()
		rc.Memory = &val
	}
	if q, exists := rl[v1.ResourceCPU]; exists {
		// CPU is defined in milli-cores.
		val := cm.MilliCPUToShares(q.MilliValue())
		rc.CPUShares = &val
	}
	if q, exists := rl[pidlimit.PIDs]; exists {
		val := q.Value()
		rc.PidsLimit = &val
	}
	rc.HugePageLimit = cm.HugePageLimits(rl)
	return &rc
}

// getCPUWeight is pkg/kubelet/cm getCPUWeight (unexported), the conversion
// cgroupCommon.toResources applies to the kubepods cpu shares on cgroup v2
// (the kubelet sets CpuWeight itself, so libcontainer's own, different,
// conversion is not used). REPRODUCED verbatim from k8s.io/kubernetes@v1.37.2
// pkg/kubelet/cm/cgroup_manager_linux.go. TestCPUWeightCopyIsTheKubelets
// checks it against the kubelet's exported cm.CPUSharesEqualAfterV2RoundTrip.
func getCPUWeight(cpuShares *uint64) uint64 {
	if cpuShares == nil {
		return 0
	}
	if *cpuShares >= 262144 {
		return 10000
	}
	return 1 + ((*cpuShares-2)*9999)/262142
}

// cpuWeightToCPUShares is the inverse conversion, used only to check the
// copy of getCPUWeight against the kubelet. REPRODUCED verbatim from
// k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/cgroup_v2_manager_linux.go.
func cpuWeightToCPUShares(cpuWeight uint64) uint64 {
	return uint64((((cpuWeight - 1) * 262142) / 9999) + 2)
}
