package topology

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// TestPIDCapacity: the pid capacity is the kubelet's, the smaller of
// pid_max and threads-max (pidlimit.Stats), either alone when the other is
// absent, and absent when both are.
func TestPIDCapacity(t *testing.T) {
	for _, tc := range []struct {
		name              string
		pidMax, threadMax string // "" leaves the file out
		want              int64
		bad               bool
	}{
		{"both, threads-max smaller", "4194304", "15095", 15095, false},
		{"both, pid_max smaller", "32768\n", "126845\n", 32768, false},
		{"pid_max only", "4194304", "", 4194304, false},
		{"threads-max only", "", "15095", 15095, false},
		{"neither", "", "", 0, false},
		{"garbage", "lots", "15095", 0, true},
		{"zero", "0", "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, proc := scenarios()[0].fix.Write(t, topologytest.Dir(t))
			for name, v := range map[string]string{"pid_max": tc.pidMax, "threads-max": tc.threadMax} {
				if v == "" {
					continue
				}
				dir := filepath.Join(proc, "sys/kernel")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			fsys, err := NewFS(sys, proc)
			if err != nil {
				t.Fatal(err)
			}
			s, err := fsys.Snapshot()
			if tc.bad {
				if err == nil {
					t.Fatalf("snapshot with pid_max %q: no error", tc.pidMax)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := s.Capacity()[resources.PID]
			if s.PIDMax != tc.want || got != tc.want || ok != (tc.want > 0) {
				t.Errorf("PIDMax %d, capacity pid %d (present %v); want %d", s.PIDMax, got, ok, tc.want)
			}
		})
	}
}

// The real machine's pid capacity is the smaller of its two limits.
func TestPIDCapacityRealMachine(t *testing.T) {
	read := func(name string) int64 {
		b, err := os.ReadFile("/proc/sys/kernel/" + name)
		if err != nil {
			t.Skipf("no /proc/sys/kernel/%s here: %v", name, err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := min(read("pid_max"), read("threads-max"))
	fsys, err := NewFS("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.PIDMax != want {
		t.Errorf("PIDMax %d, want min(pid_max, threads-max) = %d", s.PIDMax, want)
	}
}
