package hotplug

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/topology/topologytest"
)

func writeFile(root, rel, content string) error {
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// machine is a synthetic sysfs tree: cpu0 (no online file, as on x86),
// cpu1 online, cpu2 and cpu3 offline; memory blocks 0-3 online, 4-5
// offline.
func machine(t *testing.T) string {
	t.Helper()
	m := topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 4, 0, 0, 2, 3),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 1 << 20}},
		BlockSize: 128 << 20,
		Blocks: append(topologytest.Blocks(0, 4, topologytest.BlockOnline, "Normal", 0),
			topologytest.Blocks(4, 2, topologytest.BlockOffline, "Movable Normal", 0)...),
		MemKB: 1 << 20,
	}
	return m.WriteTree(t, topologytest.Dir(t)).Sys
}

func TestWrites(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		do    func(*Writer) error
		file  string // under the sysfs root
		want  string // the file afterwards; "" for a file that must not exist
		isErr error  // nil: the write succeeds
	}{
		{"online cpu", func(w *Writer) error { return w.OnlineCPU(ctx, 2) }, "devices/system/cpu/cpu2/online", "1", nil},
		{"offline cpu", func(w *Writer) error { return w.OfflineCPU(ctx, 1) }, "devices/system/cpu/cpu1/online", "0", nil},
		{"offline cpu0, which has no online file", func(w *Writer) error { return w.OfflineCPU(ctx, 0) }, "devices/system/cpu/cpu0/online", "", ErrNotHotpluggable},
		{"online cpu0", func(w *Writer) error { return w.OnlineCPU(ctx, 0) }, "devices/system/cpu/cpu0/online", "", ErrNotHotpluggable},
		{"offline a cpu not present", func(w *Writer) error { return w.OfflineCPU(ctx, 9) }, "devices/system/cpu/cpu9/online", "", fs.ErrNotExist},
		{"offline a negative cpu", func(w *Writer) error { return w.OfflineCPU(ctx, -1) }, "devices/system/cpu/cpu-1/online", "", fs.ErrInvalid},
		{"online a block movable", func(w *Writer) error { return w.OnlineBlock(ctx, 4, true) }, "devices/system/memory/memory4/state", "online_movable", nil},
		{"online a block to its default zone", func(w *Writer) error { return w.OnlineBlock(ctx, 5, false) }, "devices/system/memory/memory5/state", "online", nil},
		{"offline a block", func(w *Writer) error { return w.OfflineBlock(ctx, 3) }, "devices/system/memory/memory3/state", "offline", nil},
		{"offline a block that is gone", func(w *Writer) error { return w.OfflineBlock(ctx, 40) }, "devices/system/memory/memory40/state", "", fs.ErrNotExist},
		{"online a block being removed, its directory left without state", func(w *Writer) error {
			if err := os.MkdirAll(filepath.Join(w.root, "devices/system/memory/memory41"), 0o755); err != nil {
				return err
			}
			return w.OnlineBlock(ctx, 41, true)
		}, "devices/system/memory/memory41/state", "", fs.ErrNotExist},
		{"offline a negative block", func(w *Writer) error { return w.OfflineBlock(ctx, -3) }, "devices/system/memory/memory-3/state", "", fs.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := machine(t)
			w := NewWriter(root, Config{})
			err := tc.do(w)
			var werr *WriteError
			switch {
			case tc.isErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.isErr != nil && (!errors.Is(err, tc.isErr) || !errors.As(err, &werr)):
				t.Fatalf("error %v, want a *WriteError that is %v", err, tc.isErr)
			case werr != nil && (werr.Path != filepath.Join(root, tc.file) || errors.Is(err, ErrTimeout)):
				t.Errorf("error %#v names %s, want %s and no timeout", werr, werr.Path, tc.file)
			}
			b, rerr := os.ReadFile(filepath.Join(root, tc.file))
			switch {
			case tc.want == "" && !errors.Is(rerr, fs.ErrNotExist):
				t.Errorf("%s exists (%q, %v): a refused write made it", tc.file, b, rerr)
			case tc.want != "" && strings.TrimSpace(string(b)) != tc.want:
				t.Errorf("%s = %q (%v), want %q", tc.file, b, rerr, tc.want)
			}
		})
	}
}

// Each write is counted by kind, op and result, every series at 0 from
// the Writer's making; the writes tried are timed.
func TestWritesAreCounted(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	w := NewWriter(machine(t), Config{Metrics: m})
	if n := testutil.CollectAndCount(m.HotplugWrites); n != 2*2*len(metrics.HotplugResults) {
		t.Errorf("%d series at start, want every kind, op and result", n)
	}
	w.Holds().Hold(nil, []int{4})
	_ = w.OnlineCPU(ctx, 2)         // ok
	_ = w.OfflineCPU(ctx, 0)        // refused: no online file
	_ = w.OfflineCPU(ctx, 9)        // gone
	_ = w.OnlineBlock(ctx, 4, true) // refused: held
	_ = w.OfflineBlock(ctx, 3)      // ok
	_ = w.OfflineBlock(ctx, 3)      // ok again (a file; the kernel would say EINVAL)
	for _, c := range []struct {
		kind, op, result string
		want             float64
	}{
		{"cpu", "online", "ok", 1},
		{"cpu", "offline", "refused", 1},
		{"cpu", "offline", "gone", 1},
		{"memory_block", "online", "refused", 1},
		{"memory_block", "offline", "ok", 2},
		{"memory_block", "offline", "error", 0},
	} {
		if got := testutil.ToFloat64(m.HotplugWrites.WithLabelValues(c.kind, c.op, c.result)); got != c.want {
			t.Errorf("%s %s %s counted %v, want %v", c.kind, c.op, c.result, got, c.want)
		}
	}
	// timed: the cpu online and the two block offlines; not the refused
	if got := testutil.CollectAndCount(m.HotplugWriteDuration); got != 2 {
		t.Errorf("%d duration series, want 2 (cpu online, memory_block offline)", got)
	}
}
