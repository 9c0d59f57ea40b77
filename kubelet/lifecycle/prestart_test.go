package lifecycle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

// prestartFixture is a kubelet root directory with the v4 CPU manager
// checkpoint (CPUs 0-12, CPU 0 reserved) and the v3 memory manager one
// (node 0 4 GiB, node 1 1 GiB), and a pre-start for a machine with
// online CPUs and node 1's memory as given.
type prestartFixture struct {
	cpu, mem, hold string
	cpu0, mem0     []byte
	p              *Prestart
	ctx            context.Context // Run's (Background when nil)
	after          func()          // called once Run has returned
}

func newPrestartFixture(t *testing.T, online string, node1 uint64) *prestartFixture {
	t.Helper()
	dir := t.TempDir()
	f := &prestartFixture{cpu: filepath.Join(dir, "cpu_manager_state"), mem: filepath.Join(dir, "memory_manager_state"),
		hold: filepath.Join(dir, "state", HoldFile)}
	os.Mkdir(filepath.Dir(f.hold), 0o755)
	var err error
	if f.cpu0, err = os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "cpu_manager_state", "v4")); err != nil {
		t.Fatal(err)
	}
	if f.mem0, err = os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "memory_manager_state", "v3")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(f.cpu, f.cpu0, 0o644)
	os.WriteFile(f.mem, f.mem0, 0o644)
	cpus, err := topology.ParseCPUSet(online)
	if err != nil {
		t.Fatal(err)
	}
	snap := &topology.Snapshot{CPUs: topology.CPUs{Online: cpus},
		Nodes: []topology.Node{{ID: 0, MemTotal: 4 << 30, Hugepages: []topology.Hugepages{{PageSize: 2 << 20}}}, {ID: 1, MemTotal: node1}}}
	f.p = &Prestart{
		Checkpoints: func() (Checkpoints, error) {
			return Checkpoints{CPUManager: f.cpu, MemoryManager: f.mem, ReservedCPUs: topology.CPUSet{0}}, nil
		},
		Machine:  func() (*topology.Snapshot, error) { return snap, nil },
		HoldFile: f.hold,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	return f
}

// untouched fails unless both checkpoints are as the fixture wrote them.
func (f *prestartFixture) untouched(t *testing.T) {
	t.Helper()
	if b, _ := os.ReadFile(f.cpu); !bytes.Equal(b, f.cpu0) {
		t.Error("the CPU manager checkpoint was changed")
	}
	if b, _ := os.ReadFile(f.mem); !bytes.Equal(b, f.mem0) {
		t.Error("the memory manager checkpoint was changed")
	}
}

// TestPrestartRewrites: CPUs added and a NUMA node grown rewrite both
// checkpoints (the kubelet's own reader takes them, the pods keep their
// CPUs, the old files are kept beside them); a second run changes
// nothing.
func TestPrestartRewrites(t *testing.T) {
	f := newPrestartFixture(t, "0-15", 2<<30)
	if got := f.p.Run(context.Background()); got != PrestartRewritten {
		t.Fatalf("outcome %q, want %q", got, PrestartRewritten)
	}
	st, err := checkpoint.ReadCPUManager(f.cpu)
	if err != nil {
		t.Fatal(err)
	}
	if got := topology.CPUSet(st.AllCPUs()).String(); got != "0-15" {
		t.Errorf("the rewritten CPU manager checkpoint covers CPUs %s, want 0-15", got)
	}
	old, _ := checkpoint.ReadCPUManager(f.cpu + checkpoint.BackupSuffix)
	if len(st.Exclusive) != len(old.Exclusive) {
		t.Errorf("exclusive assignments %v, want those of before %v", st.Exclusive, old.Exclusive)
	}
	mem, err := checkpoint.ReadMemoryManager(f.mem)
	if err != nil {
		t.Fatal(err)
	}
	if got := mem.MachineState[1].MemoryMap["memory"].TotalMemSize; got != 2<<30 {
		t.Errorf("node 1's memory in the rewritten checkpoint: %d, want 2 GiB", got)
	}
	for path, want := range map[string][]byte{f.cpu: f.cpu0, f.mem: f.mem0} {
		if b, _ := os.ReadFile(path + checkpoint.BackupSuffix); !bytes.Equal(b, want) {
			t.Errorf("%s: the previous file is not kept beside it", path)
		}
	}

	cpu1, _ := os.ReadFile(f.cpu)
	mem1, _ := os.ReadFile(f.mem)
	again := *f
	again.p = &Prestart{Checkpoints: f.p.Checkpoints, Machine: f.p.Machine, HoldFile: f.hold, Log: f.p.Log}
	if got := again.p.Run(context.Background()); got != PrestartUnchanged {
		t.Fatalf("second run: %q, want %q", got, PrestartUnchanged)
	}
	if b, _ := os.ReadFile(f.cpu); !bytes.Equal(b, cpu1) {
		t.Error("the second run rewrote the CPU manager checkpoint")
	}
	if b, _ := os.ReadFile(f.mem); !bytes.Equal(b, mem1) {
		t.Error("the second run rewrote the memory manager checkpoint")
	}
}

// TestPrestartLeavesAlone: every failure leaves both files as they were,
// and Run returns by its deadline whatever the work does.
func TestPrestartLeavesAlone(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		setup func(f *prestartFixture)
		want  PrestartOutcome
	}{
		{"machine as the checkpoints have it", func(f *prestartFixture) {}, PrestartUnchanged},
		{"configuration unreadable", func(f *prestartFixture) {
			f.p.Checkpoints = func() (Checkpoints, error) { return Checkpoints{}, boom }
		}, PrestartFailed},
		{"sysfs unreadable", func(f *prestartFixture) {
			f.p.Machine = func() (*topology.Snapshot, error) { return nil, boom }
		}, PrestartFailed},
		{"panic", func(f *prestartFixture) {
			f.p.Machine = func() (*topology.Snapshot, error) { panic("sysfs went away") }
		}, PrestartFailed},
		{"hang", func(f *prestartFixture) {
			f.p.Timeout = 50 * time.Millisecond
			f.p.Machine = func() (*topology.Snapshot, error) { select {} }
		}, PrestartTimedOut},
		{"reserved CPU gone", func(f *prestartFixture) {
			snap, _ := f.p.Machine()
			snap.CPUs.Online = topology.CPUSet{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
		}, PrestartFailed},
		{"corrupt CPU manager checkpoint", func(f *prestartFixture) {
			f.cpu0 = []byte("{garbage")
			os.WriteFile(f.cpu, f.cpu0, 0o644)
		}, PrestartFailed},
		{"memory manager checkpoint in a layout node-resized does not know", func(f *prestartFixture) {
			f.mem0 = append([]byte(`{"future":1,`), f.mem0[1:]...)
			os.WriteFile(f.mem, f.mem0, 0o644)
		}, PrestartFailed},
		{"memory manager checkpoint changed under the rewrite", func(f *prestartFixture) {
			f.mem0 = f.mem0[:len(f.mem0)-1]
			f.p.betweenWrites = func() { os.WriteFile(f.mem, f.mem0, 0o644) }
		}, PrestartFailed},
		{"hang between the writes", func(f *prestartFixture) {
			// The worker hangs after the first write until Run has
			// returned; the deadline comes while it hangs (the context's,
			// cancelled then, ends Run as its own timeout does).
			reached, release := make(chan struct{}), make(chan struct{})
			f.p.betweenWrites = func() { close(reached); <-release }
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-reached; cancel() }()
			f.ctx, f.after = ctx, func() { close(release) }
		}, PrestartTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			online, node1 := "0-15", uint64(2<<30)
			if tc.want == PrestartUnchanged {
				online, node1 = "0-12", 1<<30
			}
			f := newPrestartFixture(t, online, node1)
			tc.setup(f)
			ctx := f.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got := f.p.Run(ctx) // a Run that waited for a hung worker would never return
			if f.after != nil {
				f.after()
			}
			if got != tc.want {
				t.Fatalf("outcome %q, want %q", got, tc.want)
			}
			f.untouched(t)
		})
	}
}

// TestPrestartHold: a hold whose files are as it lists them keeps the
// pre-start from rewriting; one that no longer matches, or that cannot
// be read, is removed and the pre-start goes on.
func TestPrestartHold(t *testing.T) {
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	hold := func(files map[string]string) []byte {
		b, _ := json.Marshal(map[string]any{"at": time.Now().UTC().Format(time.RFC3339), "reason": "the kubelet refused the rewrite", "files": files})
		return b
	}
	for _, tc := range []struct {
		name string
		hold func(f *prestartFixture) []byte
		want PrestartOutcome
	}{
		{"applies", func(f *prestartFixture) []byte {
			return hold(map[string]string{f.cpu: sum(f.cpu0), f.mem: sum(f.mem0)})
		}, PrestartHeld},
		{"a file changed", func(f *prestartFixture) []byte {
			return hold(map[string]string{f.cpu: sum(f.cpu0), f.mem: sum([]byte("other"))})
		}, PrestartRewritten},
		{"a file missing", func(f *prestartFixture) []byte {
			return hold(map[string]string{f.cpu: sum(f.cpu0), f.cpu + ".gone": sum(nil)})
		}, PrestartRewritten},
		{"no files", func(f *prestartFixture) []byte { return hold(nil) }, PrestartRewritten},
		{"not JSON", func(f *prestartFixture) []byte { return []byte("{") }, PrestartRewritten},
		{"too large", func(f *prestartFixture) []byte { return make([]byte, maxHoldSize+1) }, PrestartRewritten},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPrestartFixture(t, "0-15", 2<<30)
			os.WriteFile(f.hold, tc.hold(f), 0o644)
			if got := f.p.Run(context.Background()); got != tc.want {
				t.Fatalf("outcome %q, want %q", got, tc.want)
			}
			_, err := os.Stat(f.hold)
			if tc.want == PrestartHeld {
				f.untouched(t)
				if err != nil {
					t.Errorf("the hold is gone: %v", err)
				}
			} else if err == nil {
				t.Error("a hold that does not apply was kept")
			}
		})
	}

	// A FIFO at the hold's path neither blocks nor holds.
	f := newPrestartFixture(t, "0-15", 2<<30)
	if err := syscall.Mkfifo(f.hold, 0o600); err != nil {
		t.Fatal(err)
	}
	f.p.Timeout = 2 * time.Second
	if got := f.p.Run(context.Background()); got != PrestartRewritten {
		t.Fatalf("a FIFO as the hold: %q, want %q", got, PrestartRewritten)
	}
}

// TestHasPrestart: the drop-in counts when it is listed and is a file
// with contents; systemd lists a masked one (a link to /dev/null, an empty
// file) too, and that does not count.
func TestHasPrestart(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o755)
		return filepath.Join(d, PrestartDropIn)
	}
	dropIn, masked, empty, gone := path("ours"), path("masked"), path("empty"), path("gone")
	os.WriteFile(dropIn, []byte("[Service]\nExecStartPre=-/usr/bin/node-resized kubelet-prestart\n"), 0o644)
	os.Symlink("/dev/null", masked)
	os.WriteFile(empty, nil, 0o644)
	other := filepath.Join(dir, "10-kubeadm.conf")
	os.WriteFile(other, []byte("[Service]\n"), 0o644)
	for _, tc := range []struct {
		paths []string
		want  bool
	}{
		{nil, false},
		{[]string{other}, false},
		{[]string{other, dropIn}, true},
		{[]string{other, masked}, false},
		{[]string{empty}, false},
		{[]string{gone}, false},
		{[]string{dropIn + ".disabled"}, false},
	} {
		if got := HasPrestart(systemd.UnitState{DropInPaths: tc.paths}); got != tc.want {
			t.Errorf("HasPrestart(%v) = %v, want %v", tc.paths, got, tc.want)
		}
	}
}
