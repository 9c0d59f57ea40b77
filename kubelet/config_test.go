package kubelet

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/decide"
)

const (
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

func testdata(name string) string { return filepath.Join("testdata", name) }

func pct(s string) decide.Threshold {
	th, _, err := decide.ParseThreshold(s)
	if err != nil {
		panic(err)
	}
	return th
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		dropIns string
		check   func(t *testing.T, c *Config)
	}{
		{
			name: "defaults only",
			path: "minimal.yaml",
			check: func(t *testing.T, c *Config) {
				want := decide.Reservations{
					MemoryAvailable: decide.Threshold{Quantity: 100 * Mi},
					NodeFsAvailable: pct("10%"),
				}
				if !reflect.DeepEqual(c.Reservations, want) {
					t.Fatalf("reservations %+v, want %+v", c.Reservations, want)
				}
				if c.CgroupDriver != "cgroupfs" || c.CgroupRoot != "/" || !c.CgroupsPerQOS || c.CPUManagerPolicy != "none" ||
					!reflect.DeepEqual(c.EnforceNodeAllocatable, []string{"pods"}) || !c.LocalStorageCapacityIsolation {
					t.Fatalf("defaults not applied: %+v", c)
				}
				if len(c.EvictionHard) != 5 || c.EvictionHard["imagefs.available"] != "15%" {
					t.Fatalf("evictionHard %v, want the kubelet's five defaults", c.EvictionHard)
				}
				if len(c.Warnings) != 0 {
					t.Fatalf("warnings %v", c.Warnings)
				}
			},
		},
		{
			name: "systemReserved and kubeReserved",
			path: "reserved.yaml",
			check: func(t *testing.T, c *Config) {
				want := decide.Reservations{
					SystemReserved:  resources.List{"cpu": 500, "memory": Gi, "ephemeral-storage": Gi},
					KubeReserved:    resources.List{"cpu": 250, "memory": 512 * Mi, "pid": 1000},
					MemoryAvailable: decide.Threshold{Quantity: 200 * Mi},
					NodeFsAvailable: pct("5%"),
				}
				if !reflect.DeepEqual(c.Reservations, want) {
					t.Fatalf("reservations %+v, want %+v", c.Reservations, want)
				}
				// An evictionHard that is set replaces the defaults.
				if len(c.EvictionHard) != 2 {
					t.Fatalf("evictionHard %v", c.EvictionHard)
				}
				if c.CgroupDriver != "systemd" || c.Reservations.PodsNotEnforced {
					t.Fatalf("config %+v", c)
				}
				if len(c.Warnings) != 0 {
					t.Fatalf("warnings %v", c.Warnings)
				}
				// 16Gi node: allocatable as the kubelet publishes it.
				alloc := decide.Allocatable(resources.List{"cpu": 4000, "memory": 16 * Gi}, c.Reservations)
				if alloc["cpu"] != 3250 || alloc["memory"] != 16*Gi-Gi-512*Mi-200*Mi {
					t.Fatalf("allocatable %v", alloc)
				}
			},
		},
		{
			name: "evictionHard as a percentage",
			path: "percent.yaml",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.MemoryAvailable != pct("5%") || c.Reservations.MemoryAvailable.Percentage != float32(5)/100 {
					t.Fatalf("memory.available %+v", c.Reservations.MemoryAvailable)
				}
				// Set, so no default: nodefs.available is not reserved.
				if c.Reservations.NodeFsAvailable != (decide.Threshold{}) {
					t.Fatalf("nodefs.available %+v", c.Reservations.NodeFsAvailable)
				}
				if got := c.Reservations.Eviction(resources.Memory, 8*Gi); got != 429496736 {
					t.Fatalf("5%% of 8Gi = %d, want the kubelet's 429496736", got)
				}
			},
		},
		{
			name: "mergeDefaultEvictionSettings fills in missing signals",
			path: "merge-defaults.yaml",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.MemoryAvailable != (decide.Threshold{Quantity: Gi}) || c.Reservations.NodeFsAvailable != pct("10%") {
					t.Fatalf("reservations %+v", c.Reservations)
				}
			},
		},
		{
			name:    "drop-ins merged in lexical order, recursively, *.conf only",
			path:    "reserved.yaml",
			dropIns: "dropin",
			check: func(t *testing.T, c *Config) {
				want := decide.Reservations{
					SystemReserved:  resources.List{"cpu": 500, "memory": 2 * Gi, "ephemeral-storage": Gi},
					KubeReserved:    resources.List{"memory": 512 * Mi, "pid": 1000},
					MemoryAvailable: pct("5%"),
				}
				if !reflect.DeepEqual(c.Reservations, want) {
					t.Fatalf("reservations %+v, want %+v", c.Reservations, want)
				}
				if c.CgroupDriver != "cgroupfs" || !reflect.DeepEqual(c.EnforceNodeAllocatable, []string{"pods"}) {
					t.Fatalf("config %+v", c)
				}
				wantFiles := []string{
					testdata("dropin/10-reserved.conf"),
					testdata("dropin/20-driver.conf"),
					testdata("dropin/sub/30-enforce.conf"),
				}
				if !reflect.DeepEqual(c.DropIns, wantFiles) {
					t.Fatalf("drop-ins %v, want %v", c.DropIns, wantFiles)
				}
				if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "README.md") {
					t.Fatalf("warnings %v", c.Warnings)
				}
			},
		},
		{
			// The kubelet defaults evictionHard before merging drop-ins, so a
			// drop-in that sets one signal keeps the other defaults, unlike
			// the same setting in the main file.
			name:    "a drop-in evictionHard merges into the defaults",
			path:    "minimal.yaml",
			dropIns: "dropin-evict",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.MemoryAvailable != pct("5%") || c.Reservations.NodeFsAvailable != pct("10%") || len(c.EvictionHard) != 5 {
					t.Fatalf("reservations %+v, evictionHard %v", c.Reservations, c.EvictionHard)
				}
			},
		},
		{
			name: "reservedSystemCPUs overrides the cpu reservations",
			path: "reserved-cpus.yaml",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.ReservedCPUs, []int{0, 1, 4}) || c.CPUManagerPolicy != "static" {
					t.Fatalf("reserved CPUs %v, policy %s", c.ReservedCPUs, c.CPUManagerPolicy)
				}
				if c.Reservations.SystemReserved["cpu"] != 3000 || c.Reservations.SystemReserved["memory"] != Gi {
					t.Fatalf("systemReserved %v", c.Reservations.SystemReserved)
				}
				if _, ok := c.Reservations.KubeReserved["cpu"]; ok {
					t.Fatalf("kubeReserved %v still reserves cpu", c.Reservations.KubeReserved)
				}
				if c.SystemReserved["cpu"] != "100m" {
					t.Fatalf("the file's systemReserved was modified: %v", c.SystemReserved)
				}
			},
		},
		{
			name: "no pods enforcement: kubepods gets the raw capacity",
			path: "no-pods-enforcement.yaml",
			check: func(t *testing.T, c *Config) {
				if !c.Reservations.PodsNotEnforced || len(c.EnforceNodeAllocatable) != 0 {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{
			name: "unknown fields are tolerated with a warning",
			path: "unknown-field.yaml",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.SystemReserved["memory"] != Gi {
					t.Fatalf("reservations %+v", c.Reservations)
				}
				if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "someFutureField") {
					t.Fatalf("warnings %v", c.Warnings)
				}
			},
		},
		{
			// 0.6Gi + 0.4Gi of memory reserved is exactly 1Gi; the kubelet
			// adds the exact quantities and rounds once.
			name: "fractional reservations and thresholds are kept exactly",
			path: "fractional.yaml",
			check: func(t *testing.T, c *Config) {
				want := decide.Reservations{
					SystemReserved:      resources.List{"memory": 644245094},
					SystemReservedNanos: map[string]int64{"memory": 400_000_000},
					KubeReserved:        resources.List{"memory": 429496729, "ephemeral-storage": 751619276},
					KubeReservedNanos:   map[string]int64{"memory": 600_000_000, "ephemeral-storage": 800_000_000},
					MemoryAvailable:     decide.Threshold{QuantityNanos: 500_000_000},
					NodeFsAvailable:     decide.Threshold{Quantity: 322122547, QuantityNanos: 200_000_000},
				}
				if !reflect.DeepEqual(c.Reservations, want) {
					t.Fatalf("reservations %+v, want %+v", c.Reservations, want)
				}
				capacity := resources.List{"cpu": 4000, "memory": 16 * Gi, "ephemeral-storage": 100 * Gi}
				alloc := decide.Allocatable(capacity, c.Reservations)
				// memory: 16Gi − 1Gi − 0.5 byte, rounded up; storage:
				// 100Gi − (0.7Gi + 0.3Gi).
				if alloc["memory"] != 15*Gi || alloc["ephemeral-storage"] != 99*Gi || alloc["cpu"] != 4000 {
					t.Fatalf("allocatable %v", alloc)
				}
				if l := decide.KubepodsLimits(capacity, c.Reservations); l.MemoryMax != 15*Gi {
					t.Fatalf("kubepods memory.max %d, want %d", l.MemoryMax, 15*Gi)
				}
			},
		},
		{
			name: "field names are matched case-sensitively, as the kubelet matches them",
			path: "miscased-field.yaml",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.SystemReserved != nil || c.Reservations.KubeReserved["memory"] != 256*Mi {
					t.Fatalf("reservations %+v", c.Reservations)
				}
				if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "SystemReserved") {
					t.Fatalf("warnings %v", c.Warnings)
				}
			},
		},
		{
			name: "JSON is YAML",
			path: "config.json",
			check: func(t *testing.T, c *Config) {
				if c.Reservations.KubeReserved["memory"] != 256*Mi {
					t.Fatalf("reservations %+v", c.Reservations)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.dropIns != "" {
				opts = append(opts, WithDropInDir(testdata(tc.dropIns)))
			}
			c, err := Load(testdata(tc.path), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Path != testdata(tc.path) || c.Raw == nil {
				t.Fatalf("Path %q, Raw %v", c.Path, c.Raw)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		dropIns string
		field   string   // Error.Field
		parts   []string // in the message
	}{
		{name: "missing file", path: "absent.yaml", parts: []string{"absent.yaml", "--kubelet-config"}},
		{name: "empty file", path: "empty.yaml", parts: []string{"empty"}},
		{name: "malformed YAML", path: "malformed.yaml", parts: []string{"malformed.yaml"}},
		{name: "wrong kind", path: "wrong-kind.yaml", parts: []string{"KubeProxyConfiguration", "want apiVersion kubelet.config.k8s.io/v1beta1, kind KubeletConfiguration"}},
		{name: "no kind", path: "no-kind.yaml", parts: []string{"missing apiVersion/kind"}},
		{name: "bad quantity", path: "bad-quantity.yaml", field: "kubeReserved", parts: []string{`"lots"`}},
		{name: "resource that cannot be reserved", path: "bad-resource.yaml", field: "systemReserved", parts: []string{`cannot reserve "hugepages-2Mi"`}},
		{name: "unknown eviction signal", path: "bad-signal.yaml", field: `evictionHard["memory.free"]`, parts: []string{"unsupported eviction signal"}},
		{name: "percentage above 100", path: "bad-percent.yaml", field: `evictionHard["memory.available"]`, parts: []string{"<= 100%"}},
		// The kubelet decodes YAML numbers as JSON numbers, which a map of
		// strings refuses.
		{name: "unquoted number in systemReserved", path: "unquoted-number.yaml", field: `systemReserved["cpu"]`,
			parts: []string{"unquoted-number.yaml", `"1"`, "json: cannot unmarshal number into Go struct field KubeletConfiguration.systemReserved of type string"}},
		{name: "unquoted number in evictionHard", path: "unquoted-threshold.yaml", field: `evictionHard["pid.available"]`,
			parts: []string{"the number 1000 must be a string", "cannot unmarshal number"}},
		{name: "unquoted number in a drop-in", path: "minimal.yaml", dropIns: "dropin-unquoted", field: `kubeReserved["pid"]`,
			parts: []string{"dropin-unquoted", "cannot unmarshal number"}},
		{name: "drop-in of the wrong version", path: "minimal.yaml", dropIns: "dropin-bad", parts: []string{"10-wrong.conf", "v1alpha1"}},
		{name: "missing drop-in directory", path: "minimal.yaml", dropIns: "absent.d", parts: []string{"absent.d"}},
		{name: "no path", parts: []string{"no configuration file given"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.dropIns != "" {
				opts = append(opts, WithDropInDir(testdata(tc.dropIns)))
			}
			path := ""
			if tc.path != "" {
				path = testdata(tc.path)
			}
			c, err := Load(path, opts...)
			if err == nil {
				t.Fatalf("Load = %+v, want an error", c)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if e.Field != tc.field {
				t.Fatalf("Field %q, want %q (%v)", e.Field, tc.field, err)
			}
			for _, p := range tc.parts {
				if !strings.Contains(err.Error(), p) {
					t.Fatalf("error %q does not contain %q", err, p)
				}
			}
		})
	}
	if _, err := Load(testdata("absent.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file should wrap fs.ErrNotExist: %v", err)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	fromFile, err := Load(testdata("minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Reservations, fromFile.Reservations) || c.CgroupDriver != fromFile.CgroupDriver ||
		c.CgroupRoot != fromFile.CgroupRoot || !reflect.DeepEqual(c.EvictionHard, fromFile.EvictionHard) {
		t.Fatalf("Default %+v differs from an empty configuration file %+v", c, fromFile)
	}
}

func TestMergePatch(t *testing.T) {
	tests := []struct{ doc, patch, want string }{
		{`{"a":1,"b":{"c":2,"d":3}}`, `{"b":{"c":null,"e":4}}`, `{"a":1,"b":{"d":3,"e":4}}`},
		{`{"a":[1,2]}`, `{"a":[3]}`, `{"a":[3]}`},
		{`{"a":"x"}`, `{"a":{"b":1,"c":null}}`, `{"a":{"b":1}}`},
		{`{"big":9007199254740993}`, `{}`, `{"big":9007199254740993}`},
	}
	for _, tc := range tests {
		got, err := mergePatch([]byte(tc.doc), []byte(tc.patch))
		if err != nil || string(got) != tc.want {
			t.Errorf("mergePatch(%s, %s) = %s, %v; want %s", tc.doc, tc.patch, got, err, tc.want)
		}
	}
}
