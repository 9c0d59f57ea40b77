//go:build linux

package kubeletparity

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/resources"
)

// TestCPUWeightCopyIsTheKubelets checks the copy of getCPUWeight in
// kubelet_test.go against the compiled kubelet: cm.CPUSharesEqualAfterV2RoundTrip
// (exported) is cpuWeightToCPUShares(getCPUWeight(shares)) == readback, and
// cpuWeightToCPUShares is one-to-one, so agreement for every shares value
// means the copy computes the kubelet's weights.
func TestCPUWeightCopyIsTheKubelets(t *testing.T) {
	for w := uint64(2); w <= decide.MaxWeight; w++ {
		if cpuWeightToCPUShares(w) <= cpuWeightToCPUShares(w-1) {
			t.Fatalf("cpuWeightToCPUShares is not one-to-one at weight %d", w)
		}
	}
	for s := uint64(decide.MinShares); s <= decide.MaxShares; s++ {
		if !cm.CPUSharesEqualAfterV2RoundTrip(s, cpuWeightToCPUShares(getCPUWeight(&s))) {
			t.Fatalf("shares %d: the copy of getCPUWeight gives %d, not the kubelet's weight", s, getCPUWeight(&s))
		}
	}
}

// TestSharesAndWeightMatchKubelet compares decide's conversions with the
// kubelet's over their whole useful range.
func TestSharesAndWeightMatchKubelet(t *testing.T) {
	bad := 0
	// 0 to 300 cpus in millicores: past the 262144-share clamp (256 cpus).
	for m := int64(0); m <= 300_000; m++ {
		if o, k := decide.MilliCPUToShares(m), cm.MilliCPUToShares(m); o != k {
			if bad++; bad < 10 {
				t.Errorf("MilliCPUToShares(%d): ours %d, kubelet %d", m, o, k)
			}
		}
	}
	for s := uint64(decide.MinShares); s <= decide.MaxShares+10; s++ {
		if o, k := decide.SharesToWeight(s), getCPUWeight(&s); o != k {
			if bad++; bad < 10 {
				t.Errorf("SharesToWeight(%d): ours %d, kubelet %d", s, o, k)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d mismatches", bad)
	}
}

// TestThresholdsMatchKubelet compares decide.ParseThreshold and
// Threshold.Amount with eviction.ParseThresholdConfig and
// evictionapi.GetThresholdQuantity, value by value.
func TestThresholdsMatchKubelet(t *testing.T) {
	values := []string{
		"100Mi", "500Mi", "1Gi", "0.3Gi", "1.5G", "1", "1k", "100.5Ki", "1e9", "0.1",
		"1%", "5%", "7.5%", "10%", "12.5%", "15%", "33.3%", "0.1%", "99.99%", "0.5%",
		"0%", "100%", "0.0%", "101%", "-1%", "0", "-1Mi", "abc", "5 %", "%",
	}
	capacities := []int64{0, 1, 1023}
	for _, m := range machines {
		capacities = append(capacities, int64(m.memTotalKi)*1024, int64(m.rootfs))
	}
	for c := int64(1 << 30); c < 1<<42; c = c*7 + 12345 {
		capacities = append(capacities, c)
	}
	for _, val := range values {
		th, ok, oursErr := decide.ParseThreshold(val)
		kth, kErr := eviction.ParseThresholdConfig([]string{}, map[string]string{"memory.available": val}, nil, nil, nil)
		if (oursErr != nil) != (kErr != nil) {
			t.Errorf("%q: ours err %v, kubelet err %v", val, oursErr, kErr)
			continue
		}
		if kErr != nil {
			continue
		}
		if ok != (len(kth) == 1) {
			t.Errorf("%q: ours ok=%v, kubelet %d thresholds", val, ok, len(kth))
			continue
		}
		if !ok {
			continue
		}
		for _, c := range capacities {
			want := evictionapi.GetThresholdQuantity(kth[0].Value, resource.NewQuantity(c, resource.BinarySI))
			// What reaches allocatable: capacity minus the threshold,
			// clamped at 0, read back as an integer (nodestatus.MachineInfo).
			if o, k := clamp(c-decide.Reservations{MemoryAvailable: th}.Eviction(resources.Memory, c)), kubeletSub(resource.NewQuantity(c, resource.BinarySI), *want).Value(); o != k {
				t.Errorf("%q on %d: ours capacity-threshold %d, kubelet %d (ours %+d)", val, c, o, k, o-k)
			}
		}
	}
}

// kubeletSub is how nodestatus.MachineInfo takes a reservation off a
// capacity: Quantity.Sub, and 0 when the result is negative.
func kubeletSub(capacity *resource.Quantity, reserved resource.Quantity) *resource.Quantity {
	v := capacity.DeepCopy()
	v.Sub(reserved)
	if v.Sign() < 0 {
		v.Set(0)
	}
	return &v
}

func clamp(v int64) int64 { return max(v, 0) }

// TestReservationsMatchKubelet compares decide.ParseReservation with the
// kubelet's parseResourceList, through what matters: capacity minus the
// reservation, read back as the integer everybody reads.
func TestReservationsMatchKubelet(t *testing.T) {
	type entry struct{ name, val string }
	entries := []entry{
		{"cpu", "500m"}, {"cpu", "0.3335"}, {"cpu", "1.0005"}, {"cpu", "333500u"}, {"cpu", "0.0004"},
		{"cpu", "2"}, {"cpu", "1e3m"}, {"cpu", "-1"}, {"cpu", "x"},
		{"memory", "1Gi"}, {"memory", "0.1Gi"}, {"memory", "0.7Gi"}, {"memory", "1.3M"}, {"memory", "100.5"},
		{"memory", "1e-3"}, {"memory", "0"}, {"memory", "-1Mi"},
		{"ephemeral-storage", "1.5G"}, {"ephemeral-storage", "10Gi"}, {"ephemeral-storage", "0.33Ti"},
		{"pid", "1000"}, {"pid", "1.5k"},
		{"hugepages-2Mi", "2Mi"}, {"nvidia.com/gpu", "1"}, {"pods", "10"},
	}
	capacities := []int64{3000, 64000, 1 << 30, 16393012 * 1024, 53660876811, 1967317549057, 7681484357631}
	for _, e := range entries {
		o, _, oursErr := decide.ParseReservationExact(e.name, e.val)
		rl, kErr := parseResourceList(map[string]string{e.name: e.val})
		if (oursErr != nil) != (kErr != nil) {
			t.Errorf("%s=%q: ours err %v, kubelet err %v", e.name, e.val, oursErr, kErr)
			continue
		}
		if kErr != nil {
			continue
		}
		q := rl[v1.ResourceName(e.name)]
		for _, c := range capacities {
			// What reaches allocatable: capacity minus the reservation,
			// clamped at 0, read back as an integer.
			if e.name == "cpu" {
				k := kubeletSub(resource.NewMilliQuantity(c, resource.DecimalSI), q).MilliValue()
				if o := clamp(c - o); o != k {
					t.Errorf("%s=%q from %dm: ours %dm, kubelet %dm", e.name, e.val, c, o, k)
				}
				continue
			}
			k := kubeletSub(resource.NewQuantity(c, resource.BinarySI), q).Value()
			if o := clamp(c - o); o != k {
				t.Errorf("%s=%q from %d: ours %d, kubelet %d (ours %+d)", e.name, e.val, c, o, k, o-k)
			}
		}
	}
}

// TestComparisonNoticesMutations shows the comparison is not vacuous: each
// deliberate mistake, on either side, is reported.
func TestComparisonNoticesMutations(t *testing.T) {
	file := testdata(t, "evict-7.5pct.yaml")
	cfg, err := kubelet.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := kubeletEffectiveConfig(file, "")
	if err != nil || eff.LoadErr != nil {
		t.Fatal(err, eff.LoadErr)
	}
	m := machines[1] // MemTotal 24683620Ki
	mi := m.cadvisorInfo()
	nc, err := kubeletNodeAllocatableConfig(eff.Config, mi)
	if err != nil {
		t.Fatal(err)
	}
	k := kubeletWith(t, nc, mi, m)
	if d := compare(ours(cfg, m), k); len(d) != 0 {
		t.Fatalf("unmutated: %v", d)
	}

	expect := func(t *testing.T, diffs []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, d := range diffs {
				found = found || strings.HasPrefix(d, w)
			}
			if !found {
				t.Errorf("no difference reported for %q; got %q", w, diffs)
			}
		}
		t.Logf("reported: %q", diffs)
	}

	t.Run("ours-memory-threshold-5pct-for-7.5pct", func(t *testing.T) {
		res := cfg.Reservations
		res.MemoryAvailable = decide.Threshold{Percentage: 0.05}
		expect(t, compare(oursWith(res, true, m), k), "allocatable memory")
	})
	t.Run("kubelet-threshold-exact-decimal-instead-of-float32", func(t *testing.T) {
		// 7.5% of memory computed exactly, as a quantity: a few bytes
		// away from the kubelet's float32 result.
		capacity := int64(m.memTotalKi) * 1024
		mut := *nc
		mut.HardEvictionThresholds = nil
		for _, th := range nc.HardEvictionThresholds {
			if th.Signal == evictionapi.SignalMemoryAvailable {
				th.Value = evictionapi.ThresholdValue{Quantity: resource.NewQuantity(capacity*75/1000, resource.BinarySI)}
			}
			mut.HardEvictionThresholds = append(mut.HardEvictionThresholds, th)
		}
		expect(t, compare(ours(cfg, m), kubeletWith(t, &mut, mi, m)), "allocatable memory")
	})
	t.Run("kubelet-kubeReserved-cpu-1m", func(t *testing.T) {
		mut := *nc
		mut.KubeReserved = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")}
		expect(t, compare(ours(cfg, m), kubeletWith(t, &mut, mi, m)), "allocatable cpu", "kubepods cpu.shares")
	})
	t.Run("ours-pods-not-enforced", func(t *testing.T) {
		res := cfg.Reservations
		res.PodsNotEnforced = true
		expect(t, compare(oursWith(res, true, m), k), "kubepods memory.max")
	})
	t.Run("kubelet-one-more-2Mi-page", func(t *testing.T) {
		m2 := m
		m2.hugePages = map[uint64]uint64{page2Mi: m.hugePages[page2Mi] + 1, page1Gi: 0}
		mi2 := m2.cadvisorInfo()
		expect(t, compare(ours(cfg, m), kubeletWith(t, nc, mi2, m2)),
			"capacity hugepages-2Mi", "allocatable hugepages-2Mi", "allocatable memory", "kubepods hugetlb hugepages-2Mi")
	})
}
