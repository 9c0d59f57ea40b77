package decide

import (
	"math/rand"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	Ki = int64(1) << 10
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

func TestThresholdAmountMirrorsKubeletFloat32(t *testing.T) {
	th, ok, err := ParseThreshold("5%")
	if err != nil || !ok {
		t.Fatalf("ParseThreshold(5%%) = %v, %v, %v", th, ok, err)
	}
	// float32(5)/100 is 0.0500000007…: the kubelet reserves a few bytes
	// more than an exact 5% would.
	capacity := 8 * Gi
	got := th.Amount(capacity)
	want := int64(float64(capacity) * float64(float32(5)/100))
	if got != want {
		t.Fatalf("Amount = %d, want %d", got, want)
	}
	if exact := capacity * 5 / 100; got == exact {
		t.Fatalf("Amount = %d equals the exact 5%%; the float32 path should differ here", got)
	}
	if got != 429496736 {
		t.Fatalf("Amount = %d, want 429496736", got)
	}
}

func TestParseThreshold(t *testing.T) {
	tests := []struct {
		in      string
		want    Threshold
		ok      bool
		wantErr bool
	}{
		{in: "100Mi", want: Threshold{Quantity: 100 * Mi}, ok: true},
		{in: "1Gi", want: Threshold{Quantity: Gi}, ok: true},
		{in: "5%", want: Threshold{Percentage: float32(5) / 100}, ok: true},
		{in: "10%", want: Threshold{Percentage: float32(10) / 100}, ok: true},
		{in: "5%%", want: Threshold{Percentage: float32(5) / 100}, ok: true}, // TrimRight, as the kubelet
		{in: "0.0%", want: Threshold{}, ok: true},
		{in: "0%"},
		{in: "100%"},
		{in: "-1%", wantErr: true},
		{in: "101%", wantErr: true},
		{in: "x%", wantErr: true},
		{in: "0", wantErr: true},
		{in: "-5Mi", wantErr: true},
		{in: "lots", wantErr: true},
		{in: "0.1Gi", want: Threshold{Quantity: 107374182}, ok: true},
	}
	for _, tc := range tests {
		got, ok, err := ParseThreshold(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseThreshold(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseThreshold(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseReservation(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
		errPart  string
	}{
		{name: "cpu", in: "100m", want: 100},
		{name: "cpu", in: "0.5", want: 500},
		{name: "cpu", in: "2", want: 2000},
		{name: "cpu", in: "1.0005", want: 1001}, // (1000500µ + 500) / 1000
		{name: "cpu", in: "1.0004", want: 1000},
		{name: "cpu", in: "400u", want: 0},
		{name: "cpu", in: "500u", want: 1},
		{name: "memory", in: "1Gi", want: Gi},
		{name: "memory", in: "0.1Gi", want: 107374182}, // floor of 107374182.4
		{name: "ephemeral-storage", in: "10G", want: 10_000_000_000},
		{name: "pid", in: "1000", want: 1000},
		{name: "memory", in: "-1Gi", errPart: "cannot be negative"},
		{name: "memory", in: "lots", errPart: "failed to parse"},
		{name: "hugepages-2Mi", in: "2Mi", errPart: "cannot reserve"},
		{name: "nvidia.com/gpu", in: "1", errPart: "cannot reserve"},
	}
	for _, tc := range tests {
		got, err := ParseReservation(tc.name, tc.in)
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("ParseReservation(%s, %q) error = %v, want one containing %q", tc.name, tc.in, err, tc.errPart)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseReservation(%s, %q) = %d, %v; want %d", tc.name, tc.in, got, err, tc.want)
		}
	}
}

func TestAllocatable(t *testing.T) {
	fivePct, _, _ := ParseThreshold("5%")
	tenPct, _, _ := ParseThreshold("10%")
	tests := []struct {
		name     string
		capacity Resources
		r        Reservations
		want     Resources
	}{
		{
			name:     "kubelet defaults: memory.available 100Mi",
			capacity: Resources{"cpu": 4000, "memory": 16 * Gi},
			r:        Reservations{MemoryAvailable: Threshold{Quantity: 100 * Mi}},
			want:     Resources{"cpu": 4000, "memory": 16*Gi - 100*Mi},
		},
		{
			name:     "system and kube reserved",
			capacity: Resources{"cpu": 4000, "memory": 16 * Gi},
			r: Reservations{
				SystemReserved:  Resources{"cpu": 100, "memory": 512 * Mi},
				KubeReserved:    Resources{"cpu": 200, "memory": Gi},
				MemoryAvailable: Threshold{Quantity: 100 * Mi},
			},
			want: Resources{"cpu": 3700, "memory": 16*Gi - 512*Mi - Gi - 100*Mi},
		},
		{
			name:     "percentage threshold, float32 then float64, truncated",
			capacity: Resources{"cpu": 2000, "memory": 8 * Gi},
			r:        Reservations{MemoryAvailable: fivePct},
			want:     Resources{"cpu": 2000, "memory": 8*Gi - 429496736},
		},
		{
			name:     "huge pages leave allocatable memory, each clamped",
			capacity: Resources{"cpu": 4000, "memory": 16 * Gi, "hugepages-2Mi": 2 * Gi, "hugepages-1Gi": 4 * Gi},
			r:        Reservations{MemoryAvailable: Threshold{Quantity: 100 * Mi}},
			want:     Resources{"cpu": 4000, "memory": 16*Gi - 100*Mi - 6*Gi, "hugepages-2Mi": 2 * Gi, "hugepages-1Gi": 4 * Gi},
		},
		{
			name:     "huge pages larger than memory clamp at zero",
			capacity: Resources{"cpu": 1000, "memory": 2 * Gi, "hugepages-1Gi": 3 * Gi},
			r:        Reservations{},
			want:     Resources{"cpu": 1000, "memory": 0, "hugepages-1Gi": 3 * Gi},
		},
		{
			name:     "reservations above capacity clamp at zero",
			capacity: Resources{"cpu": 1000, "memory": Gi},
			r:        Reservations{SystemReserved: Resources{"cpu": 2000, "memory": 2 * Gi}},
			want:     Resources{"cpu": 0, "memory": 0},
		},
		{
			name:     "ephemeral-storage loses nodefs.available",
			capacity: Resources{"cpu": 1000, "memory": 4 * Gi, "ephemeral-storage": 100_000_000_000},
			r:        Reservations{NodeFsAvailable: tenPct, KubeReserved: Resources{"ephemeral-storage": 1_000_000_000}},
			want: Resources{"cpu": 1000, "memory": 4 * Gi,
				"ephemeral-storage": 100_000_000_000 - 1_000_000_000 - int64(float64(100_000_000_000)*float64(tenPct.Percentage))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Allocatable(tc.capacity, tc.r)
			if !got.Equal(tc.want) {
				t.Fatalf("Allocatable = %v, want %v", got, tc.want)
			}
		})
	}
}

// kubeletAllocatable is an independent oracle: the kubelet's own code path
// (GetNodeAllocatableReservation + nodestatus.MachineInfo), on Quantities,
// with reservations as written in a KubeletConfiguration.
func kubeletAllocatable(capacity map[string]resource.Quantity, sys, kube map[string]string, memAvail, nodefsAvail string) map[string]resource.Quantity {
	parse := func(m map[string]string) map[string]resource.Quantity {
		out := map[string]resource.Quantity{}
		for k, v := range m {
			q := resource.MustParse(v)
			if k == "cpu" {
				q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
			}
			out[k] = q
		}
		return out
	}
	threshold := func(val string, c resource.Quantity) *resource.Quantity {
		if val == "" || val == "0%" || val == "100%" {
			return nil
		}
		if strings.HasSuffix(val, "%") {
			th, _, _ := ParseThreshold(val) // same float32 parse
			return resource.NewQuantity(int64(float64(c.Value())*float64(th.Percentage)), resource.BinarySI)
		}
		q := resource.MustParse(val)
		return &q
	}
	sr, kr := parse(sys), parse(kube)
	evict := map[string]*resource.Quantity{
		"memory":            threshold(memAvail, capacity["memory"]),
		"ephemeral-storage": threshold(nodefsAvail, capacity["ephemeral-storage"]),
	}
	reservation := map[string]resource.Quantity{}
	for k := range capacity {
		v := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := sr[k]; ok {
			v.Add(q)
		}
		if q, ok := kr[k]; ok {
			v.Add(q)
		}
		if q := evict[k]; q != nil {
			v.Add(*q)
		}
		if !v.IsZero() {
			reservation[k] = *v
		}
	}
	alloc := map[string]resource.Quantity{}
	for k, v := range capacity {
		value := v.DeepCopy()
		if res, ok := reservation[k]; ok {
			value.Sub(res)
		}
		if value.Sign() < 0 {
			value.Set(0)
		}
		alloc[k] = value
	}
	for k, v := range capacity {
		if IsHugePages(k) {
			m := alloc["memory"]
			m.Sub(v)
			if m.Sign() < 0 {
				m.Set(0)
			}
			alloc["memory"] = m
		}
	}
	return alloc
}

func TestAllocatableAgainstKubeletOracle(t *testing.T) {
	rng := rand.New(rand.NewSource(3953))
	cpuRes := []string{"", "0", "100m", "250m", "1", "1500m", "0.0015", "3"}
	memRes := []string{"", "0", "100Mi", "512Mi", "1Gi", "1.5Gi", "0.1Gi", "123456789"}
	thresholds := []string{"", "0%", "100%", "100Mi", "1Gi", "5%", "7.5%", "10%", "33.3%", "0.1%", "500M"}
	for i := 0; i < 5000; i++ {
		capacity := map[string]resource.Quantity{
			"cpu":    *resource.NewMilliQuantity(int64(1+rng.Intn(256))*1000, resource.DecimalSI),
			"memory": *resource.NewQuantity(int64(rng.Intn(512)+1)*Gi/4+int64(rng.Intn(1<<20))*4096, resource.BinarySI),
		}
		if rng.Intn(2) == 0 {
			capacity["hugepages-2Mi"] = *resource.NewQuantity(int64(rng.Intn(2048))*2*Mi, resource.BinarySI)
		}
		if rng.Intn(2) == 0 {
			capacity["hugepages-1Gi"] = *resource.NewQuantity(int64(rng.Intn(8))*Gi, resource.BinarySI)
		}
		if rng.Intn(2) == 0 {
			capacity["ephemeral-storage"] = *resource.NewQuantity(rng.Int63n(4_000_000_000_000)+1, resource.DecimalSI)
		}
		sys, kube := map[string]string{}, map[string]string{}
		// At most one fractional memory term per resource: the case the
		// floor rounding reproduces exactly.
		if v := cpuRes[rng.Intn(len(cpuRes))]; v != "" {
			sys["cpu"] = v
		}
		if v := cpuRes[rng.Intn(len(cpuRes))]; v != "" {
			kube["cpu"] = v
		}
		if v := memRes[rng.Intn(len(memRes))]; v != "" {
			sys["memory"] = v
		}
		if v := memRes[rng.Intn(4)]; v != "" { // whole bytes only
			kube["memory"] = v
		}
		if rng.Intn(2) == 0 {
			kube["ephemeral-storage"] = "1G"
		}
		memAvail := thresholds[rng.Intn(len(thresholds))]
		nodefsAvail := thresholds[rng.Intn(len(thresholds))]

		want := kubeletAllocatable(capacity, sys, kube, memAvail, nodefsAvail)

		c := Resources{}
		for k, q := range capacity {
			if k == "cpu" {
				c[k] = q.MilliValue()
			} else {
				c[k] = q.Value()
			}
		}
		r := Reservations{SystemReserved: Resources{}, KubeReserved: Resources{}}
		for k, v := range sys {
			n, err := ParseReservation(k, v)
			if err != nil {
				t.Fatal(err)
			}
			r.SystemReserved[k] = n
		}
		for k, v := range kube {
			n, err := ParseReservation(k, v)
			if err != nil {
				t.Fatal(err)
			}
			r.KubeReserved[k] = n
		}
		if th, ok, err := ParseThreshold(memAvail); err == nil && ok {
			r.MemoryAvailable = th
		}
		if th, ok, err := ParseThreshold(nodefsAvail); err == nil && ok {
			r.NodeFsAvailable = th
		}
		got := Allocatable(c, r)
		for k, q := range want {
			w := q.Value()
			if k == "cpu" {
				w = q.MilliValue()
			}
			if got[k] != w {
				t.Fatalf("case %d: %s: Allocatable = %d, kubelet = %d (%s)\ncapacity %v sys %v kube %v memory.available %q nodefs.available %q",
					i, k, got[k], w, q.String(), c, sys, kube, memAvail, nodefsAvail)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("case %d: Allocatable has %d resources, kubelet %d", i, len(got), len(want))
		}
	}
}

func TestMilliCPUToShares(t *testing.T) {
	tests := []struct {
		milli int64
		want  uint64
	}{
		{0, 2}, {1, 2}, {2, 2}, {3, 3}, {10, 10}, {100, 102}, {1000, 1024},
		{3900, 3993}, {256000, 262144}, {300000, 262144},
	}
	for _, tc := range tests {
		if got := MilliCPUToShares(tc.milli); got != tc.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.want)
		}
	}
}

func TestSharesToWeight(t *testing.T) {
	tests := []struct {
		shares, want uint64
	}{
		{0, 0}, {2, 1}, {3, 1}, {1024, 39}, {3993, 153}, {262142, 9999}, {262143, 9999}, {262144, 10000}, {1 << 20, 10000},
	}
	for _, tc := range tests {
		if got := SharesToWeight(tc.shares); got != tc.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tc.shares, got, tc.want)
		}
		// The formula from SPEC.md.
		if tc.shares >= 2 && tc.shares < 262144 {
			if f := 1 + ((tc.shares-2)*9999)/262142; f != tc.want {
				t.Errorf("formula(%d) = %d, want %d", tc.shares, f, tc.want)
			}
		}
	}
}

func TestKubepodsLimits(t *testing.T) {
	r := Reservations{
		SystemReserved:  Resources{"cpu": 100, "memory": 512 * Mi, "pid": 1000},
		KubeReserved:    Resources{"memory": 256 * Mi},
		MemoryAvailable: Threshold{Quantity: 100 * Mi},
	}
	capacity := Resources{"cpu": 4000, "memory": 16 * Gi, "hugepages-2Mi": Gi, "hugepages-1Gi": 0, "ephemeral-storage": 50_000_000_000, "pid": 4194304}
	got := KubepodsLimits(capacity, r)
	want := CgroupLimits{
		MemoryMax: 16*Gi - 512*Mi - 256*Mi, // no eviction threshold, no huge pages
		CPUShares: 3993,                    // 3900m × 1024 / 1000
		CPUWeight: 153,
		PidsMax:   4194304 - 1000,
		HugeTLB:   map[int64]int64{2 * Mi: Gi, Gi: 0},
	}
	if got.MemoryMax != want.MemoryMax || got.CPUShares != want.CPUShares || got.CPUWeight != want.CPUWeight || got.PidsMax != want.PidsMax ||
		len(got.HugeTLB) != 2 || got.HugeTLB[2*Mi] != Gi || got.HugeTLB[Gi] != 0 {
		t.Fatalf("KubepodsLimits = %+v, want %+v", got, want)
	}

	r.PodsNotEnforced = true
	raw := KubepodsLimits(capacity, r)
	if raw.MemoryMax != 16*Gi || raw.CPUShares != 4096 || raw.PidsMax != 4194304 {
		t.Fatalf("KubepodsLimits without pods enforcement = %+v, want the raw capacity", raw)
	}

	// Reservations above capacity: zero cpu gives the minimum shares.
	tiny := KubepodsLimits(Resources{"cpu": 100, "memory": Gi}, Reservations{SystemReserved: Resources{"cpu": 500}})
	if tiny.CPUShares != MinShares || tiny.CPUWeight != 1 {
		t.Fatalf("KubepodsLimits with cpu fully reserved = %+v, want 2 shares, weight 1", tiny)
	}
}

func TestCanonicalHugePagesName(t *testing.T) {
	tests := map[string]string{
		"hugepages-2Mi":    "hugepages-2Mi",
		"hugepages-2048Ki": "hugepages-2Mi",
		"hugepages-1Gi":    "hugepages-1Gi",
		"hugepages-":       "",
		"hugepages-abc":    "",
		"hugepages-0":      "",
		"memory":           "",
	}
	for in, want := range tests {
		got, ok := CanonicalHugePagesName(in)
		if got != want || ok != (want != "") {
			t.Errorf("CanonicalHugePagesName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
