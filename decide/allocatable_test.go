package decide

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"

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
	got := th.value(capacity).floor()
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
		// Fractional quantities are kept exactly, the fraction in nanos.
		{in: "0.1Gi", want: Threshold{Quantity: 107374182, QuantityNanos: 400_000_000}, ok: true},
		{in: "0.3Gi", want: Threshold{Quantity: 322122547, QuantityNanos: 200_000_000}, ok: true},
		{in: "100.5Ki", want: Threshold{Quantity: 102912}, ok: true},
		// Below one byte: still a threshold (the kubelet keeps it), worth 0
		// whole bytes.
		{in: "0.1", want: Threshold{QuantityNanos: 100_000_000}, ok: true},
		{in: "500m", want: Threshold{QuantityNanos: 500_000_000}, ok: true},
		{in: "1n", want: Threshold{QuantityNanos: 1}, ok: true},
		{in: "1e-12", want: Threshold{QuantityNanos: 1}, ok: true}, // ParseQuantity rounds up to 1n
		{in: "1.000000001", want: Threshold{Quantity: 1, QuantityNanos: 1}, ok: true},
		{in: "9223372036854775807", wantErr: true},
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

func TestThresholdSubByte(t *testing.T) {
	for _, val := range []string{"0.1", "500m", "1n"} {
		th, ok, err := ParseThreshold(val)
		if err != nil || !ok {
			t.Fatalf("ParseThreshold(%q) = %+v, %v, %v", val, th, ok, err)
		}
		if th == (Threshold{}) {
			t.Fatalf("ParseThreshold(%q) = no threshold", val)
		}
		// The kubelet: Quantity(capacity − 0.1).Value() rounds back up to
		// capacity.
		for _, c := range []int64{0, 1, 1023, 16 * Gi} {
			if got := th.value(c).floor(); got != 0 {
				t.Errorf("%q.value(%d).floor() = %d, want 0", val, c, got)
			}
			r := Reservations{MemoryAvailable: th}
			if got := Allocatable(resources.List{"memory": c}, r)["memory"]; got != c {
				t.Errorf("%q: allocatable memory of %d = %d, want %d", val, c, got, c)
			}
		}
		// A percentage set alongside loses: the quantity wins, as in the
		// kubelet.
		th.Percentage = 0.5
		if got := th.value(16 * Gi).floor(); got != 0 {
			t.Errorf("%q with a percentage: Amount = %d, want 0", val, got)
		}
	}
}

func TestThresholdString(t *testing.T) {
	tests := map[string]string{
		"100Mi": "100Mi",
		"0.1":   "100m",
		"0.3Gi": "322122547200m",
		"5%":    "5%",
	}
	for in, want := range tests {
		th, _, err := ParseThreshold(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := th.String(); got != want {
			t.Errorf("ParseThreshold(%q).String() = %q, want %q", in, got, want)
		}
	}
	if got := (Threshold{}).String(); got != "none" {
		t.Errorf("zero Threshold = %q", got)
	}
}

func TestParseReservationWhole(t *testing.T) {
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
		got, _, err := ParseReservationExact(tc.name, tc.in)
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("ParseReservationExact(%s, %q) error = %v, want one containing %q", tc.name, tc.in, err, tc.errPart)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseReservationExact(%s, %q) = %d, %v; want %d", tc.name, tc.in, got, err, tc.want)
		}
	}
}

func TestParseReservationExact(t *testing.T) {
	tests := []struct {
		name, in     string
		whole, nanos int64
		errPart      string
	}{
		{name: "cpu", in: "1.0005", whole: 1001},
		{name: "cpu", in: "0.3335", whole: 334}, // rounded to the millicore, no fraction kept
		{name: "memory", in: "1Gi", whole: Gi},
		{name: "memory", in: "0.6Gi", whole: 644245094, nanos: 400_000_000},
		{name: "memory", in: "0.4Gi", whole: 429496729, nanos: 600_000_000},
		{name: "memory", in: "0.7Gi", whole: 751619276, nanos: 800_000_000},
		{name: "memory", in: "100.5", whole: 100, nanos: 500_000_000},
		{name: "memory", in: "1e-3", nanos: 1_000_000},
		{name: "memory", in: "0", whole: 0},
		{name: "ephemeral-storage", in: "0.33Ti", whole: 362838837166, nanos: 80_000_000},
		{name: "pid", in: "1.5k", whole: 1500},
		{name: "memory", in: "-0.5", errPart: "cannot be negative"},
		{name: "memory", in: "9223372036854775807", errPart: "does not fit"},
		{name: "pods", in: "10", errPart: "cannot reserve"},
	}
	for _, tc := range tests {
		whole, nanos, err := ParseReservationExact(tc.name, tc.in)
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("ParseReservationExact(%s, %q) error = %v, want one containing %q", tc.name, tc.in, err, tc.errPart)
			}
			continue
		}
		if err != nil || whole != tc.whole || nanos != tc.nanos {
			t.Errorf("ParseReservationExact(%s, %q) = %d, %d, %v; want %d, %d", tc.name, tc.in, whole, nanos, err, tc.whole, tc.nanos)
		}
		// Exact: whole + nanos/1e9 is the quantity (cpu: rounded to the
		// millicore first).
		if tc.name != "cpu" {
			q := resource.MustParse(tc.in)
			sum := resource.NewQuantity(whole, resource.DecimalSI)
			sum.Add(*resource.NewScaledQuantity(nanos, resource.Nano))
			if sum.Cmp(q) != 0 {
				t.Errorf("ParseReservationExact(%s, %q): %d + %dn = %s, not %s", tc.name, tc.in, whole, nanos, sum, q.String())
			}
		}
	}
}

func TestAllocatable(t *testing.T) {
	fivePct, _, _ := ParseThreshold("5%")
	tenPct, _, _ := ParseThreshold("10%")
	tests := []struct {
		name     string
		capacity resources.List
		r        Reservations
		want     resources.List
	}{
		{
			name:     "kubelet defaults: memory.available 100Mi",
			capacity: resources.List{"cpu": 4000, "memory": 16 * Gi},
			r:        Reservations{MemoryAvailable: Threshold{Quantity: 100 * Mi}},
			want:     resources.List{"cpu": 4000, "memory": 16*Gi - 100*Mi},
		},
		{
			name:     "system and kube reserved",
			capacity: resources.List{"cpu": 4000, "memory": 16 * Gi},
			r: Reservations{
				SystemReserved:  resources.List{"cpu": 100, "memory": 512 * Mi},
				KubeReserved:    resources.List{"cpu": 200, "memory": Gi},
				MemoryAvailable: Threshold{Quantity: 100 * Mi},
			},
			want: resources.List{"cpu": 3700, "memory": 16*Gi - 512*Mi - Gi - 100*Mi},
		},
		{
			name:     "percentage threshold, float32 then float64, truncated",
			capacity: resources.List{"cpu": 2000, "memory": 8 * Gi},
			r:        Reservations{MemoryAvailable: fivePct},
			want:     resources.List{"cpu": 2000, "memory": 8*Gi - 429496736},
		},
		{
			name:     "huge pages leave allocatable memory, each clamped",
			capacity: resources.List{"cpu": 4000, "memory": 16 * Gi, "hugepages-2Mi": 2 * Gi, "hugepages-1Gi": 4 * Gi},
			r:        Reservations{MemoryAvailable: Threshold{Quantity: 100 * Mi}},
			want:     resources.List{"cpu": 4000, "memory": 16*Gi - 100*Mi - 6*Gi, "hugepages-2Mi": 2 * Gi, "hugepages-1Gi": 4 * Gi},
		},
		{
			name:     "huge pages larger than memory clamp at zero",
			capacity: resources.List{"cpu": 1000, "memory": 2 * Gi, "hugepages-1Gi": 3 * Gi},
			r:        Reservations{},
			want:     resources.List{"cpu": 1000, "memory": 0, "hugepages-1Gi": 3 * Gi},
		},
		{
			name:     "reservations above capacity clamp at zero",
			capacity: resources.List{"cpu": 1000, "memory": Gi},
			r:        Reservations{SystemReserved: resources.List{"cpu": 2000, "memory": 2 * Gi}},
			want:     resources.List{"cpu": 0, "memory": 0},
		},
		{
			name:     "ephemeral-storage loses nodefs.available",
			capacity: resources.List{"cpu": 1000, "memory": 4 * Gi, "ephemeral-storage": 100_000_000_000},
			r:        Reservations{NodeFsAvailable: tenPct, KubeReserved: resources.List{"ephemeral-storage": 1_000_000_000}},
			want: resources.List{"cpu": 1000, "memory": 4 * Gi,
				"ephemeral-storage": 100_000_000_000 - 1_000_000_000 - int64(float64(100_000_000_000)*float64(tenPct.Percentage))},
		},
		{
			// systemReserved 0.6Gi + kubeReserved 0.4Gi: exactly 1Gi, not
			// floor(0.6Gi) + floor(0.4Gi) = 1Gi − 1.
			name:     "fractional reservations summing to a whole byte",
			capacity: resources.List{"cpu": 2000, "memory": 16 * Gi},
			r: Reservations{
				SystemReserved:      resources.List{"memory": 644245094},
				SystemReservedNanos: map[string]int64{"memory": 400_000_000},
				KubeReserved:        resources.List{"memory": 429496729},
				KubeReservedNanos:   map[string]int64{"memory": 600_000_000},
			},
			want: resources.List{"cpu": 2000, "memory": 15 * Gi},
		},
		{
			// kubeReserved 0.7Gi + memory.available 0.3Gi: exactly 1Gi.
			name:     "fractional reservation and threshold summing to a whole byte",
			capacity: resources.List{"cpu": 2000, "memory": 16 * Gi},
			r: Reservations{
				KubeReserved:      resources.List{"memory": 751619276},
				KubeReservedNanos: map[string]int64{"memory": 800_000_000},
				MemoryAvailable:   Threshold{Quantity: 322122547, QuantityNanos: 200_000_000},
			},
			want: resources.List{"cpu": 2000, "memory": 15 * Gi},
		},
		{
			// 0.5 + 0.6 bytes: 1.1 bytes, read back as capacity − 1.
			name:     "fractions carrying past a whole byte",
			capacity: resources.List{"memory": Gi},
			r: Reservations{
				SystemReservedNanos: map[string]int64{"memory": 500_000_000},
				MemoryAvailable:     Threshold{QuantityNanos: 600_000_000},
			},
			want: resources.List{"memory": Gi - 1},
		},
		{
			name:     "sub-byte threshold changes nothing",
			capacity: resources.List{"cpu": 1000, "memory": 16*Gi + 1},
			r:        Reservations{MemoryAvailable: Threshold{QuantityNanos: 100_000_000}},
			want:     resources.List{"cpu": 1000, "memory": 16*Gi + 1},
		},
		{
			// 0.5 byte above capacity: negative, so 0.
			name:     "fractional reservation just above capacity clamps at zero",
			capacity: resources.List{"memory": 100, "hugepages-2Mi": 0},
			r:        Reservations{SystemReserved: resources.List{"memory": 100}, SystemReservedNanos: map[string]int64{"memory": 500_000_000}},
			want:     resources.List{"memory": 0, "hugepages-2Mi": 0},
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
// with reservations as written in a KubeletConfiguration. It returns the
// allocatable resources and the reservation they are computed from.
func kubeletAllocatable(capacity map[string]resource.Quantity, sys, kube map[string]string, memAvail, nodefsAvail string) (alloc, reservation map[string]resource.Quantity) {
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
	reservation = map[string]resource.Quantity{}
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
	alloc = map[string]resource.Quantity{}
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
		if resources.IsHugePages(k) {
			m := alloc["memory"]
			m.Sub(v)
			if m.Sign() < 0 {
				m.Set(0)
			}
			alloc["memory"] = m
		}
	}
	return alloc, reservation
}

func TestAllocatableAgainstKubeletOracle(t *testing.T) {
	rng := rand.New(rand.NewSource(3953))
	cpuRes := []string{"", "0", "100m", "250m", "1", "1500m", "0.0015", "3"}
	memRes := []string{"", "0", "100Mi", "512Mi", "1Gi", "1.5Gi", "0.1Gi", "123456789", "0.6Gi", "0.4Gi", "0.7Gi", "100.5", "0.5", "1e-3"}
	thresholds := []string{"", "0%", "100%", "100Mi", "1Gi", "5%", "7.5%", "10%", "33.3%", "0.1%", "500M", "0.3Gi", "0.9Gi", "0.1", "500m", "0.5"}
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
		// Fractional amounts on every term: their sum is exact, rounded
		// once.
		if v := cpuRes[rng.Intn(len(cpuRes))]; v != "" {
			sys["cpu"] = v
		}
		if v := cpuRes[rng.Intn(len(cpuRes))]; v != "" {
			kube["cpu"] = v
		}
		if v := memRes[rng.Intn(len(memRes))]; v != "" {
			sys["memory"] = v
		}
		if v := memRes[rng.Intn(len(memRes))]; v != "" {
			kube["memory"] = v
		}
		if rng.Intn(2) == 0 {
			kube["ephemeral-storage"] = []string{"1G", "0.5", "0.9Gi"}[rng.Intn(3)]
		}
		memAvail := thresholds[rng.Intn(len(thresholds))]
		nodefsAvail := thresholds[rng.Intn(len(thresholds))]

		want, reservation := kubeletAllocatable(capacity, sys, kube, memAvail, nodefsAvail)

		c := resources.List{}
		for k, q := range capacity {
			if k == "cpu" {
				c[k] = q.MilliValue()
			} else {
				c[k] = q.Value()
			}
		}
		r := Reservations{
			SystemReserved: resources.List{}, SystemReservedNanos: map[string]int64{},
			KubeReserved: resources.List{}, KubeReservedNanos: map[string]int64{},
		}
		for k, v := range sys {
			n, nanos, err := ParseReservationExact(k, v)
			if err != nil {
				t.Fatal(err)
			}
			r.SystemReserved[k], r.SystemReservedNanos[k] = n, nanos
		}
		for k, v := range kube {
			n, nanos, err := ParseReservationExact(k, v)
			if err != nil {
				t.Fatal(err)
			}
			r.KubeReserved[k], r.KubeReservedNanos[k] = n, nanos
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
		// The kubelet's validateNodeAllocatable refuses a capacity below
		// the exact reservation; Total is its threshold.
		for _, k := range []string{"cpu", "memory", "ephemeral-storage"} {
			q, ok := capacity[k]
			if !ok {
				continue
			}
			left := q.DeepCopy()
			left.Sub(reservation[k])
			refused := left.Sign() < 0
			if (c[k] < r.Total(k, c[k])) != refused {
				t.Fatalf("case %d: %s: capacity %d, Total %d, kubelet refuses %v\nsys %v kube %v memory.available %q nodefs.available %q",
					i, k, c[k], r.Total(k, c[k]), refused, sys, kube, memAvail, nodefsAvail)
			}
		}
	}
}

// TestTotalMatchesValidateNodeAllocatable checks Total against the kubelet's
// validateNodeAllocatable, which refuses a capacity when capacity minus the
// exact reservation is negative, at the capacities around the reservation.
func TestTotalMatchesValidateNodeAllocatable(t *testing.T) {
	amounts := []string{"", "1Gi", "0.6Gi", "0.4Gi", "0.7Gi", "0.3Gi", "100.5", "0.5", "0.1", "1n"}
	for _, sys := range amounts {
		for _, kube := range amounts {
			for _, th := range amounts {
				var r Reservations
				exact := resource.NewQuantity(0, resource.DecimalSI)
				if sys != "" {
					whole, nanos, err := ParseReservationExact("memory", sys)
					if err != nil {
						t.Fatal(err)
					}
					r.SystemReserved, r.SystemReservedNanos = resources.List{"memory": whole}, map[string]int64{"memory": nanos}
					exact.Add(resource.MustParse(sys))
				}
				if kube != "" {
					whole, nanos, err := ParseReservationExact("memory", kube)
					if err != nil {
						t.Fatal(err)
					}
					r.KubeReserved, r.KubeReservedNanos = resources.List{"memory": whole}, map[string]int64{"memory": nanos}
					exact.Add(resource.MustParse(kube))
				}
				if th != "" {
					var err error
					if r.MemoryAvailable, _, err = ParseThreshold(th); err != nil {
						t.Fatal(err)
					}
					exact.Add(resource.MustParse(th))
				}
				for c := exact.Value() - 2; c <= exact.Value()+1; c++ {
					if c < 0 {
						continue
					}
					left := resource.NewQuantity(c, resource.BinarySI)
					left.Sub(*exact)
					if refused := left.Sign() < 0; (c < r.Total("memory", c)) != refused {
						t.Errorf("sys %q kube %q threshold %q, capacity %d: Total %d, kubelet refuses %v",
							sys, kube, th, c, r.Total("memory", c), refused)
					}
					want := int64(0) // nodestatus.MachineInfo clamps before reading back
					if left.Sign() > 0 {
						want = left.Value()
					}
					if got := Allocatable(resources.List{"memory": c}, r)["memory"]; got != want {
						t.Errorf("sys %q kube %q threshold %q, capacity %d: Allocatable %d, kubelet %d", sys, kube, th, c, got, want)
					}
				}
			}
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
		SystemReserved:  resources.List{"cpu": 100, "memory": 512 * Mi, "pid": 1000},
		KubeReserved:    resources.List{"memory": 256 * Mi},
		MemoryAvailable: Threshold{Quantity: 100 * Mi},
	}
	capacity := resources.List{"cpu": 4000, "memory": 16 * Gi, "hugepages-2Mi": Gi, "hugepages-1Gi": 0, "ephemeral-storage": 50_000_000_000, "pid": 4194304}
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
	tiny := KubepodsLimits(resources.List{"cpu": 100, "memory": Gi}, Reservations{SystemReserved: resources.List{"cpu": 500}})
	if tiny.CPUShares != MinShares || tiny.CPUWeight != 1 {
		t.Fatalf("KubepodsLimits with cpu fully reserved = %+v, want 2 shares, weight 1", tiny)
	}

	// systemReserved 0.6Gi + kubeReserved 0.4Gi is exactly 1Gi; the
	// eviction threshold (here below one byte) is not subtracted at all.
	frac := Reservations{
		SystemReserved:      resources.List{"memory": 644245094, "pid": 10},
		SystemReservedNanos: map[string]int64{"memory": 400_000_000, "pid": 500_000_000},
		KubeReserved:        resources.List{"memory": 429496729},
		KubeReservedNanos:   map[string]int64{"memory": 600_000_000},
		MemoryAvailable:     Threshold{QuantityNanos: 100_000_000},
	}
	fl := KubepodsLimits(resources.List{"memory": 16 * Gi, "pid": 1000}, frac)
	if fl.MemoryMax != 15*Gi || fl.PidsMax != 990 { // 1000 − 10.5, rounded up
		t.Fatalf("KubepodsLimits with fractional reservations = %+v, want memory.max %d, pids.max 990", fl, 15*Gi)
	}
}
