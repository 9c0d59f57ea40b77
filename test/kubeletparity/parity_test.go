//go:build linux

package kubeletparity

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kubelet"
)

// configCase is one KubeletConfiguration (and optional drop-in directory)
// under testdata/.
type configCase struct {
	name   string
	file   string
	dropIn string
}

var configs = []configCase{
	{name: "defaults", file: "defaults.yaml"},
	{name: "reserved", file: "reserved.yaml"},
	{name: "evict-500Mi", file: "evict-500mi.yaml"},
	{name: "evict-5pct", file: "evict-5pct.yaml"},
	{name: "evict-7.5pct", file: "evict-7.5pct.yaml"},
	{name: "evict-10pct", file: "evict-10pct.yaml"},
	{name: "nodefs-pct", file: "nodefs-pct.yaml"},
	{name: "evict-fractional", file: "evict-fractional.yaml"},
	{name: "evict-sub-byte", file: "evict-sub-byte.yaml"},
	{name: "reserved-fractional-sum", file: "reserved-fractional-sum.yaml"},
	{name: "enforce-no-pods", file: "enforce-no-pods.yaml"},
	{name: "cgroups-per-qos-off", file: "cgroups-per-qos-off.yaml"},
	{name: "reserved-cpus", file: "reserved-cpus.yaml"},
	{name: "local-storage-off", file: "local-storage-off.yaml"},
	{name: "unquoted-number", file: "unquoted-number.yaml"},
	{name: "drop-in", file: "dropin-base.yaml", dropIn: "dropin.d"},
}

// Huge page sizes in KiB, as cAdvisor reports them.
const (
	pageKi  = 1
	page2Mi = 2048 * pageKi
	page1Gi = 1024 * 1024 * pageKi
)

// machines are the capacities every configuration is tried on. Memory and
// storage sizes are odd byte counts so that no percentage comes out round.
var machines = []machine{
	{
		name: "cpu2-16393012Ki", cpus: 2, memTotalKi: 16393012,
		hugePages: map[uint64]uint64{page2Mi: 0, page1Gi: 0},
		rootfs:    53660876811, pidMax: 4194304,
	},
	{
		name: "cpu3-24683620Ki-2Mix333", cpus: 3, memTotalKi: 24683620,
		hugePages: map[uint64]uint64{page2Mi: 333, page1Gi: 0},
		rootfs:    107321753600, pidMax: 32768,
	},
	{
		name: "cpu64-263921756Ki-2Mix1024-1Gix8", cpus: 64, memTotalKi: 263921756,
		hugePages: map[uint64]uint64{page2Mi: 1024, page1Gi: 8},
		rootfs:    1967317549057, pidMax: 4194304,
	},
	{
		name: "cpu1024-4227856012Ki-1Gix512", cpus: 1024, memTotalKi: 4227856012,
		hugePages: map[uint64]uint64{page2Mi: 0, page1Gi: 512},
		rootfs:    7681484357631, pidMax: 4194304,
	},
}

// maxPods is the kubelet's default maxPods.
const maxPods = 110

// result is one side's answer for one configuration on one machine, in
// base units: millicores for cpu, bytes (or pids) for the rest.
type result struct {
	Capacity    map[string]int64
	Allocatable map[string]int64
	Kubepods    kubepods
}

type kubepods struct {
	MemoryMax int64
	CPUShares uint64
	CPUWeight uint64
	PidsMax   int64
	HugeTLB   map[int64]int64
}

func testdata(t testing.TB, name string) string {
	t.Helper()
	if name == "" {
		return ""
	}
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ours is node-resized's answer: kubelet.Load, then decide.
func ours(cfg *kubelet.Config, m machine) result {
	return oursWith(cfg.Reservations, cfg.LocalStorageCapacityIsolation, m)
}

func oursWith(res decide.Reservations, localStorage bool, m machine) result {
	capacity := resources.List{
		resources.CPU:    int64(m.cpus) * 1000,
		resources.Memory: int64(m.memTotalKi) * 1024,
	}
	for size, n := range m.hugePages {
		capacity[resources.HugePagesName(int64(size)*1024)] = int64(size*1024) * int64(n)
	}
	if localStorage {
		capacity[resources.EphemeralStorage] = int64(m.rootfs)
	}
	withPID := capacity.Clone()
	withPID[resources.PID] = m.pidMax
	l := decide.KubepodsLimits(withPID, res)
	return result{
		Capacity:    capacity,
		Allocatable: decide.Allocatable(capacity, res),
		Kubepods: kubepods{
			MemoryMax: l.MemoryMax,
			CPUShares: l.CPUShares,
			CPUWeight: l.CPUWeight,
			PidsMax:   l.PidsMax,
			HugeTLB:   l.HugeTLB,
		},
	}
}

// theirs is the kubelet's answer for an effective configuration.
func theirs(t testing.TB, kc *kubeletconfiginternal.KubeletConfiguration, m machine) result {
	t.Helper()
	mi := m.cadvisorInfo()
	nc, err := kubeletNodeAllocatableConfig(kc, mi)
	if err != nil {
		t.Fatalf("the kubelet's run() would fail: %v", err)
	}
	return kubeletWith(t, nc, mi, m)
}

func kubeletWith(t testing.TB, nc *kubeletNodeConfig, mi *cadvisorapi.MachineInfo, m machine) result {
	t.Helper()
	c := newContainerManager(nc, mi, m)
	node, err := kubeletNodeStatus(context.Background(), c, mi, maxPods)
	if err != nil {
		t.Fatalf("nodestatus.MachineInfo: %v", err)
	}
	r := result{
		Capacity:    quantities(t, node.Status.Capacity),
		Allocatable: quantities(t, node.Status.Allocatable),
	}
	cg := c.kubepodsCgroupConfig()
	if cg.Memory != nil {
		r.Kubepods.MemoryMax = *cg.Memory
	}
	if cg.CPUShares != nil {
		r.Kubepods.CPUShares = *cg.CPUShares
	}
	r.Kubepods.CPUWeight = cg.CPUWeight
	if cg.PidsLimit != nil {
		r.Kubepods.PidsMax = *cg.PidsLimit
	}
	r.Kubepods.HugeTLB = cg.HugePageLimit
	return r
}

// quantities converts a ResourceList to base units, dropping "pods" (the
// kubelet's, not node-resized's).
func quantities(t testing.TB, rl v1.ResourceList) map[string]int64 {
	t.Helper()
	if _, ok := rl[v1.ResourcePods]; !ok {
		t.Errorf("the kubelet published no pods resource")
	}
	out := map[string]int64{}
	for name, q := range rl {
		switch name {
		case v1.ResourcePods:
		case v1.ResourceCPU:
			out[string(name)] = q.MilliValue()
		default:
			out[string(name)] = q.Value()
		}
	}
	return out
}

// compare lists every difference between ours and the kubelet's.
func compare(o, k result) []string {
	var diffs []string
	cmpMap := func(what string, a, b map[string]int64) {
		for _, name := range unionKeys(a, b) {
			av, aok := a[name]
			bv, bok := b[name]
			switch {
			case !aok:
				diffs = append(diffs, fmt.Sprintf("%s %s: missing in ours, kubelet %d", what, name, bv))
			case !bok:
				diffs = append(diffs, fmt.Sprintf("%s %s: ours %d, missing in the kubelet's", what, name, av))
			case av != bv:
				diffs = append(diffs, fmt.Sprintf("%s %s: ours %d, kubelet %d (ours %+d)", what, name, av, bv, av-bv))
			}
		}
	}
	cmpMap("capacity", o.Capacity, k.Capacity)
	cmpMap("allocatable", o.Allocatable, k.Allocatable)
	field := func(name string, a, b int64) {
		if a != b {
			diffs = append(diffs, fmt.Sprintf("kubepods %s: ours %d, kubelet %d (ours %+d)", name, a, b, a-b))
		}
	}
	field("memory.max", o.Kubepods.MemoryMax, k.Kubepods.MemoryMax)
	field("cpu.shares", int64(o.Kubepods.CPUShares), int64(k.Kubepods.CPUShares))
	field("cpu.weight", int64(o.Kubepods.CPUWeight), int64(k.Kubepods.CPUWeight))
	field("pids.max", o.Kubepods.PidsMax, k.Kubepods.PidsMax)
	for _, size := range unionKeys(o.Kubepods.HugeTLB, k.Kubepods.HugeTLB) {
		a, aok := o.Kubepods.HugeTLB[size]
		b, bok := k.Kubepods.HugeTLB[size]
		if a != b || aok != bok {
			diffs = append(diffs, fmt.Sprintf("kubepods hugetlb %s: ours %d (set %v), kubelet %d (set %v)", pageName(size), a, aok, b, bok))
		}
	}
	return diffs
}

// table renders both answers side by side, in base units (cpu in
// millicores, the rest in bytes or pids).
func table(o, k result) string {
	var b strings.Builder
	const format = "  %-30s %15s %15s %15s%s\n"
	fmt.Fprintf(&b, "\n"+format, "", "capacity", "kubelet", "node-resized", "")
	mark := func(a, b int64) string {
		if a != b {
			return "  <-- differs"
		}
		return ""
	}
	for _, name := range unionKeys(o.Capacity, k.Capacity) {
		unit := ""
		if name == resources.CPU {
			unit = "m"
		}
		fmt.Fprintf(&b, format, "allocatable "+name, fmt.Sprint(k.Capacity[name])+unit,
			fmt.Sprint(k.Allocatable[name])+unit, fmt.Sprint(o.Allocatable[name])+unit,
			mark(k.Allocatable[name]+k.Capacity[name], o.Allocatable[name]+o.Capacity[name]))
	}
	row := func(name string, kv, ov int64) {
		fmt.Fprintf(&b, format, name, "", fmt.Sprint(kv), fmt.Sprint(ov), mark(kv, ov))
	}
	row("kubepods memory.max", k.Kubepods.MemoryMax, o.Kubepods.MemoryMax)
	row("kubepods cpu.shares", int64(k.Kubepods.CPUShares), int64(o.Kubepods.CPUShares))
	row("kubepods cpu.weight", int64(k.Kubepods.CPUWeight), int64(o.Kubepods.CPUWeight))
	row("kubepods pids.max", k.Kubepods.PidsMax, o.Kubepods.PidsMax)
	for _, size := range unionKeys(o.Kubepods.HugeTLB, k.Kubepods.HugeTLB) {
		row("kubepods hugetlb."+strings.TrimPrefix(pageName(size), v1.ResourceHugePagesPrefix), k.Kubepods.HugeTLB[size], o.Kubepods.HugeTLB[size])
	}
	return b.String()
}

func pageName(size int64) string {
	return v1.ResourceHugePagesPrefix + resource.NewQuantity(size, resource.BinarySI).String()
}

func unionKeys[K cmp.Ordered, V any](a, b map[K]V) []K {
	seen := map[K]bool{}
	var keys []K
	for _, m := range []map[K]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return unionKeys(m, nil)
}

// TestAllocatableMatchesKubelet is the claim: for every configuration and
// machine, node-resized computes the kubelet's capacity, allocatable and
// kubepods limits exactly.
func TestAllocatableMatchesKubelet(t *testing.T) {
	ctx := context.Background()
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			file, dropIn := testdata(t, c.file), testdata(t, c.dropIn)

			var opts []kubelet.Option
			if dropIn != "" {
				opts = append(opts, kubelet.WithDropInDir(dropIn))
			}
			cfg, oursErr := kubelet.Load(file, opts...)

			eff, err := kubeletEffectiveConfig(file, dropIn)
			if err != nil {
				t.Fatal(err)
			}
			// Both must accept, or both refuse, the same files.
			switch {
			case eff.LoadErr != nil && oursErr != nil:
				t.Logf("both refuse the configuration:\n  kubelet: %v\n  ours:    %v", eff.LoadErr, oursErr)
				return
			case eff.LoadErr != nil:
				t.Fatalf("the kubelet refuses the configuration, kubelet.Load accepts it:\n  kubelet: %v\n  ours reservations: %+v", eff.LoadErr, cfg.Reservations)
			case oursErr != nil:
				t.Fatalf("kubelet.Load refuses a configuration the kubelet accepts: %v", oursErr)
			}
			if eff.Invalid != nil {
				t.Errorf("testdata is not a configuration the kubelet starts with: %v", eff.Invalid)
			}
			if dropIn == "" {
				// The kubelet's own loader, driven piecewise, agrees with
				// the kubelet command (and so the one reproduced block in
				// kubeletConfigFile is right).
				kc, err := kubeletConfigFile(ctx, file)
				if err != nil {
					t.Fatalf("configfiles loader: %v", err)
				}
				if d := configDiff(kc, eff.Config); d != "" {
					t.Errorf("the configfiles loader and the kubelet command disagree: %s", d)
				}
			}
			t.Logf("effective: systemReserved=%v kubeReserved=%v evictionHard=%v enforceNodeAllocatable=%v cgroupsPerQOS=%v reservedSystemCPUs=%q localStorageCapacityIsolation=%v",
				eff.Config.SystemReserved, eff.Config.KubeReserved, eff.Config.EvictionHard, eff.Config.EnforceNodeAllocatable,
				eff.Config.CgroupsPerQOS, eff.Config.ReservedSystemCPUs, eff.Config.LocalStorageCapacityIsolation)

			for _, m := range machines {
				t.Run(m.name, func(t *testing.T) {
					o, k := ours(cfg, m), theirs(t, eff.Config, m)
					t.Log(table(o, k))
					for _, d := range compare(o, k) {
						t.Error(d)
					}
				})
			}
		})
	}
}

// configDiff compares the fields node allocatable depends on.
func configDiff(a, b *kubeletconfiginternal.KubeletConfiguration) string {
	var d []string
	check := func(name string, x, y any) {
		if fmt.Sprint(x) != fmt.Sprint(y) {
			d = append(d, fmt.Sprintf("%s: %v vs %v", name, x, y))
		}
	}
	check("systemReserved", a.SystemReserved, b.SystemReserved)
	check("kubeReserved", a.KubeReserved, b.KubeReserved)
	check("evictionHard", a.EvictionHard, b.EvictionHard)
	check("enforceNodeAllocatable", a.EnforceNodeAllocatable, b.EnforceNodeAllocatable)
	check("cgroupsPerQOS", a.CgroupsPerQOS, b.CgroupsPerQOS)
	check("reservedSystemCPUs", a.ReservedSystemCPUs, b.ReservedSystemCPUs)
	check("localStorageCapacityIsolation", a.LocalStorageCapacityIsolation, b.LocalStorageCapacityIsolation)
	return strings.Join(d, "; ")
}

// TestPercentagesExerciseFloat32 makes sure the table is not passing by
// luck: for some of its percentage thresholds the kubelet's float32
// arithmetic gives a different byte count than exact decimal arithmetic
// would, so an implementation that got the rounding wrong would fail above.
func TestPercentagesExerciseFloat32(t *testing.T) {
	sensitive := 0
	for _, c := range configs {
		if c.dropIn != "" {
			continue
		}
		kc, err := kubeletConfigFile(context.Background(), testdata(t, c.file))
		if err != nil {
			continue // refused configurations are covered above
		}
		for _, signal := range []string{"memory.available", "nodefs.available"} {
			val := kc.EvictionHard[signal]
			if !strings.HasSuffix(val, "%") {
				continue
			}
			pct, ok := new(big.Rat).SetString(strings.TrimSuffix(val, "%"))
			if !ok {
				t.Fatalf("%s: %q", c.name, val)
			}
			pct.Quo(pct, big.NewRat(100, 1))
			f32, _ := pct.Float32()
			for _, m := range machines {
				capacity := int64(m.memTotalKi) * 1024
				if signal == "nodefs.available" {
					capacity = int64(m.rootfs)
				}
				got := evictionapi.GetThresholdQuantity(evictionapi.ThresholdValue{Percentage: f32}, resource.NewQuantity(capacity, resource.BinarySI)).Value()
				exact := new(big.Rat).Mul(pct, new(big.Rat).SetInt64(capacity))
				exactInt := new(big.Int).Quo(exact.Num(), exact.Denom()).Int64()
				if got != exactInt {
					sensitive++
					t.Logf("%s %s=%s on %s (capacity %d): kubelet %d, exact decimal %d (%+d)", c.name, signal, val, m.name, capacity, got, exactInt, got-exactInt)
				}
			}
		}
	}
	if sensitive == 0 {
		t.Fatal("no percentage in the table is sensitive to float32 rounding")
	}
}
