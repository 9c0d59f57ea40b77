package resources

import (
	"encoding/json"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := map[string]string{
		"hugepages-2Mi":    "hugepages-2Mi",
		"hugepages-2048Ki": "hugepages-2Mi",
		"hugepages-1Gi":    "hugepages-1Gi",
		"hugepages-":       "",
		"hugepages-abc":    "",
		"hugepages-0":      "",
		"memory":           "memory",
		"example.com/gpu":  "example.com/gpu",
	}
	for in, want := range tests {
		got, ok := Canonical(in)
		if got != want || ok != (want != "") {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestHugePagesName(t *testing.T) {
	for size, want := range map[int64]string{2 << 20: "hugepages-2Mi", 1 << 30: "hugepages-1Gi", 64 << 10: "hugepages-64Ki"} {
		if got := HugePagesName(size); got != want {
			t.Errorf("HugePagesName(%d) = %q, want %q", size, got, want)
		}
		if back, ok := HugePageSize(want); !ok || back != size {
			t.Errorf("HugePageSize(%q) = %d, %v; want %d", want, back, ok, size)
		}
	}
}

// TestFormat pins the renderer to the kubelet's own renderings: cpu as a
// DecimalSI count of millicores, every byte amount (ephemeral-storage
// included, as cAdvisor's EphemeralStorageCapacityFromFsInfo renders it)
// in BinarySI, pid as a DecimalSI count.
func TestFormat(t *testing.T) {
	tests := []struct {
		name string
		v    int64
		want string
	}{
		{CPU, 4000, "4"},
		{CPU, 3500, "3500m"},
		{Memory, 16393012 << 10, "16393012Ki"},
		{Memory, 8 << 30, "8Gi"},
		{EphemeralStorage, 100 << 30, "100Gi"},
		{EphemeralStorage, 52521566208, "51290592Ki"},
		{"hugepages-2Mi", 1 << 30, "1Gi"},
		{PID, 4194304, "4194304"},
		{"example.com/unknown", 3, "3"},
	}
	for _, tt := range tests {
		if got := Format(tt.name, tt.v); got != tt.want {
			t.Errorf("Format(%s, %d) = %q, want %q", tt.name, tt.v, got, tt.want)
		}
		back, err := Parse(tt.name, tt.want)
		if err != nil || back != tt.v {
			t.Errorf("Parse(%s, %q) = %d, %v; want %d", tt.name, tt.want, back, err, tt.v)
		}
	}
}

func TestUnits(t *testing.T) {
	for name, want := range map[string]Unit{CPU: UnitCore, Memory: UnitByte, "hugepages-1Gi": UnitByte, EphemeralStorage: UnitByte, PID: UnitInteger, "pods": ""} {
		if got := UnitOf(name); got != want {
			t.Errorf("UnitOf(%s) = %q, want %q", name, got, want)
		}
	}
	if Value(CPU, 3500) != 3.5 || Value(Memory, 1024) != 1024 {
		t.Error("Value does not convert to the resource's unit")
	}
}

func TestPublished(t *testing.T) {
	l := List{CPU: 2000, Memory: 1 << 30, PID: 32768, "hugepages-2Mi": 0, "pods": 110}
	got := l.Published()
	want := List{CPU: 2000, Memory: 1 << 30, "hugepages-2Mi": 0}
	if !got.Equal(want) {
		t.Fatalf("Published() = %v, want %v", got, want)
	}
}

// TestJSON: a List is a Kubernetes ResourceList on the wire, and reads the
// base-unit integers earlier state files hold.
func TestJSON(t *testing.T) {
	l := List{CPU: 3500, Memory: 8 << 30, "hugepages-2Mi": 0}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"cpu":"3500m","hugepages-2Mi":"0","memory":"8Gi"}`; string(b) != want {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var back List
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(l) {
		t.Fatalf("Unmarshal(%s) = %v, %v; want %v", b, back, err, l)
	}
	var legacy List
	if err := json.Unmarshal([]byte(`{"cpu":3500,"memory":8589934592}`), &legacy); err != nil || !legacy.Equal(List{CPU: 3500, Memory: 8 << 30}) {
		t.Fatalf("legacy Unmarshal = %v, %v", legacy, err)
	}
	for _, bad := range []string{`{"cpu":"lots"}`, `{"cpu":true}`, `{"memory":"1E30"}`, `[1]`} {
		var x List
		if err := json.Unmarshal([]byte(bad), &x); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", bad, x)
		}
	}
	var null List
	if err := json.Unmarshal([]byte(`null`), &null); err != nil || null != nil {
		t.Fatalf("Unmarshal(null) = %v, %v", null, err)
	}
}
