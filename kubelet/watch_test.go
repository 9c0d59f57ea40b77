package kubelet

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/types"
)

type fakeUnits struct {
	mu  sync.Mutex
	st  systemd.UnitState
	err error
}

func (f *fakeUnits) UnitState(context.Context, string) (systemd.UnitState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, f.err
}

func (f *fakeUnits) set(pid uint32, started time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = systemd.UnitState{Unit: DefaultUnit, LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: pid, MainStart: started}
}

type sink struct{ views []types.KubeletView }

func (s *sink) OnKubelet(v types.KubeletView) { s.views = append(s.views, v) }

var w0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const gi = int64(1) << 30

// node is a Node whose status.capacity cpu is owned by cpuOwner; the
// kubelet last wrote status at kw, the daemon at dw.
func node(cpu int64, cpuOwner string, ready bool, kw, dw time.Time) types.NodeView {
	v := types.NodeView{Ready: ready,
		Capacity:       resources.List{resources.CPU: cpu * 1000, resources.Memory: 16 * gi, "pods": 110},
		CapacityOwners: map[string]string{"cpu": cpuOwner, "memory": "kubelet", "pods": "kubelet"},
		StatusWrites:   map[string]time.Time{}}
	if !kw.IsZero() {
		v.StatusWrites["kubelet"] = kw
	}
	if !dw.IsZero() {
		v.StatusWrites["node-resized"] = dw
	}
	return v
}

func change(id uint64, at time.Time, cpus int64) monitor.Change {
	return monitor.Change{ID: id, Time: at, Capacity: resources.List{resources.CPU: cpus * 1000, resources.Memory: 16 * gi}}
}

// TestWatcherFollowsARestart: a stale kubelet is seen from its revert of
// the daemon's value and remembered after the daemon publishes again; a
// restart (whoever did it) starts over from the machine; the new process
// is Ready and its view confirmed only once it has written status.
func TestWatcherFollowsARestart(t *testing.T) {
	units := &fakeUnits{}
	units.set(100, w0.Add(-time.Hour))
	s := &sink{}
	clk := clocktesting.NewFakeClock(w0)
	w := NewWatcher(WatcherOptions{Systemd: units, Sink: s, Clock: clk})
	ctx := context.Background()
	w.OnChange(change(1, w0.Add(-time.Minute), 4), nil) // the daemon's first model
	w.poll(ctx)
	w.OnNode(node(4, "kubelet", true, w0.Add(-30*time.Minute), time.Time{}))
	check := func(what string, cpu int64, stale bool, since uint64, ready bool, source string) {
		t.Helper()
		v := w.View()
		if v.Capacity[resources.CPU] != cpu*1000 || v.Stale != stale || v.StaleSince != since || v.Ready != ready ||
			!strings.Contains(v.Sources["cpu"], source) || !v.Known() {
			t.Fatalf("%s: view cpu %d stale %v since %d ready %v source %q; want %d %v %d %v %q",
				what, v.Capacity[resources.CPU]/1000, v.Stale, v.StaleSince, v.Ready, v.Sources["cpu"], cpu, stale, since, ready, source)
		}
		if last := s.views[len(s.views)-1]; last.Capacity[resources.CPU] != v.Capacity[resources.CPU] || last.Stale != v.Stale {
			t.Fatalf("%s: the sink last got %+v", what, last)
		}
	}
	check("agreeing", 4, false, 0, true, "as the kubelet wrote it")

	// 4 CPUs more; the daemon publishes 8; the kubelet reverts to 4.
	w.OnChange(change(2, w0, 8), nil)
	check("after the change", 4, true, 2, true, "as the kubelet wrote it")
	w.OnNode(node(8, "node-resized", true, w0.Add(-30*time.Minute), w0.Add(time.Second)))
	w.OnNode(node(4, "kubelet", true, w0.Add(10*time.Second), w0.Add(time.Second)))
	check("reverted", 4, true, 2, true, "as the kubelet wrote it")
	// The daemon publishes again: the kubelet's view is remembered.
	w.OnNode(node(8, "node-resized", true, w0.Add(10*time.Second), w0.Add(10*time.Second)))
	check("republished", 4, true, 2, true, "as the kubelet wrote it")

	// Someone restarts the kubelet: it read the machine at its start, but
	// the Node is not Ready for it until it writes status.
	units.set(200, w0.Add(20*time.Second+300*time.Millisecond))
	clk.SetTime(w0.Add(20*time.Second + 500*time.Millisecond))
	w.poll(ctx)
	check("restarted", 8, false, 0, false, "after the machine's last change")
	clk.SetTime(w0.Add(21*time.Second + 100*time.Millisecond))
	w.OnNode(node(8, "node-resized", true, w0.Add(21*time.Second), w0.Add(10*time.Second)))
	check("its first status write", 8, false, 0, true, "kept by the kubelet's status write")

	// A kubelet that restarted before the change (and reverts) is stale.
	units.set(300, w0.Add(30*time.Second))
	w.poll(ctx)
	w.OnChange(change(3, w0.Add(40*time.Second), 6), nil)
	check("a change after the restart", 8, true, 3, false, "after the machine's last change")
}

// TestWatcherNotActive: while the kubelet's unit is not active (stopped,
// or starting: its ExecStartPre runs, there is no main process yet) the
// Node's Ready condition and status writes are a gone process's. The view
// is not Ready and takes nothing from the Node, so that a restart is not
// taken as adopted before the new kubelet has written status: a kubelet
// frozen from its start (the real node's restart-timeout scenario) was
// Accepted at once because the view, empty for the changed CPU count,
// matched and the old process's Ready stood.
func TestWatcherNotActive(t *testing.T) {
	units := &fakeUnits{}
	units.set(100, w0.Add(-time.Hour))
	s := &sink{}
	clk := clocktesting.NewFakeClock(w0)
	w := NewWatcher(WatcherOptions{Systemd: units, Sink: s, Clock: clk})
	ctx := context.Background()
	w.OnChange(change(1, w0.Add(-time.Minute), 4), nil)
	w.poll(ctx)
	w.OnNode(node(4, "kubelet", true, w0.Add(-30*time.Second), time.Time{}))
	if v := w.View(); !v.Ready || v.Capacity[resources.CPU] != 4000 {
		t.Fatalf("the running kubelet: ready %v cpu %d, want ready with 4", v.Ready, v.Capacity[resources.CPU]/1000)
	}
	// A CPU goes; the daemon publishes 3; the kubelet's unit is
	// restarted and its pre-start runs.
	w.OnChange(change(2, w0, 3), nil)
	w.OnNode(node(3, "node-resized", true, w0.Add(-30*time.Second), w0.Add(time.Second)))
	for _, state := range []string{"activating", "inactive", "deactivating"} {
		units.mu.Lock()
		units.st = systemd.UnitState{Unit: DefaultUnit, LoadState: "loaded", ActiveState: state, SubState: "start-pre", MainStart: w0.Add(-time.Hour)}
		units.mu.Unlock()
		w.poll(ctx)
		if v := w.View(); v.Ready || len(v.Capacity) != 0 {
			t.Errorf("unit %s: view ready %v capacity %v; want not ready, nothing known", state, v.Ready, v.Capacity)
		}
	}
	// The new process runs: it read the machine, but is Ready only once
	// it has written status.
	units.set(200, w0.Add(2*time.Second+300*time.Millisecond))
	clk.SetTime(w0.Add(3 * time.Second))
	w.poll(ctx)
	if v := w.View(); v.Ready || v.Capacity[resources.CPU] != 3000 {
		t.Errorf("the new kubelet before its first status write: ready %v cpu %d, want not ready, 3", v.Ready, v.Capacity[resources.CPU]/1000)
	}
	clk.SetTime(w0.Add(4*time.Second + 200*time.Millisecond))
	w.OnNode(node(3, "node-resized", true, w0.Add(4*time.Second), w0.Add(time.Second)))
	if v := w.View(); !v.Ready || v.Capacity[resources.CPU] != 3000 {
		t.Errorf("after its first status write: ready %v cpu %d, want ready, 3", v.Ready, v.Capacity[resources.CPU]/1000)
	}
}

// TestWatcherOldWriteAcrossClocks: the status write times are the API
// server's, in whole seconds, and the process's start is this machine's.
// A kubelet frozen (SIGSTOP) right after a status write, and restarted
// within the same second by the API server's clock, or on a machine whose
// clock is behind the API server's, left a write whose time is not before
// the new process's start: it was taken for the new process's, and the
// restart was Accepted 0.4 s after it, with the old process's Ready and
// view. A write counts for the process only when it was seen after the
// process started, whatever the clocks say; the new process's own first
// write, seen before the watcher's poll finds the process, still counts.
func TestWatcherOldWriteAcrossClocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lastOld is the old process's last write, by the API server's
		// clock; start is the new process's start, by this machine's.
		lastOld, start time.Time
	}{
		{"the same second", w0.Add(10 * time.Second), w0.Add(10*time.Second + 600*time.Millisecond)},
		{"this machine's clock 3 s behind", w0.Add(13 * time.Second), w0.Add(10*time.Second + 600*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			units := &fakeUnits{}
			units.set(100, w0.Add(-time.Hour))
			clk := clocktesting.NewFakeClock(w0.Add(10 * time.Second))
			w := NewWatcher(WatcherOptions{Systemd: units, Clock: clk})
			ctx := context.Background()
			w.OnChange(change(1, w0.Add(-time.Minute), 4), nil)
			w.poll(ctx)
			w.OnNode(node(4, "kubelet", true, tc.lastOld, time.Time{})) // then it is frozen
			w.OnChange(change(2, w0.Add(10*time.Second+100*time.Millisecond), 3), nil)
			w.OnNode(node(3, "node-resized", true, tc.lastOld, w0.Add(10*time.Second+200*time.Millisecond)))
			units.set(200, tc.start) // restarted
			clk.SetTime(w0.Add(11 * time.Second))
			w.poll(ctx)
			if v := w.View(); v.Ready || v.Capacity[resources.CPU] != 3000 {
				t.Fatalf("the new kubelet before its first status write: ready %v cpu %d (%s); want not ready, 3", v.Ready, v.Capacity[resources.CPU]/1000, v.Sources["cpu"])
			}
			// A Node event with the old write again (the daemon's own
			// patch) changes nothing.
			clk.SetTime(w0.Add(12 * time.Second))
			w.OnNode(node(3, "node-resized", true, tc.lastOld, w0.Add(12*time.Second)))
			if v := w.View(); v.Ready {
				t.Fatalf("the old process's write, seen again after the start: ready")
			}
			// Its first write.
			clk.SetTime(w0.Add(20 * time.Second))
			w.OnNode(node(3, "kubelet", true, tc.lastOld.Add(9*time.Second), w0.Add(12*time.Second)))
			if v := w.View(); !v.Ready || v.Capacity[resources.CPU] != 3000 || !strings.Contains(v.Sources["cpu"], "as the kubelet wrote it") {
				t.Fatalf("after its first status write: ready %v cpu %d (%s); want ready, 3 as it wrote it", v.Ready, v.Capacity[resources.CPU]/1000, v.Sources["cpu"])
			}
		})
	}

	// The new process writes before the poll finds it: the write was
	// seen after its start, and counts once the poll comes.
	units := &fakeUnits{}
	units.set(100, w0.Add(-time.Hour))
	clk := clocktesting.NewFakeClock(w0)
	w := NewWatcher(WatcherOptions{Systemd: units, Clock: clk})
	ctx := context.Background()
	w.OnChange(change(1, w0.Add(-time.Minute), 4), nil)
	w.poll(ctx)
	w.OnNode(node(4, "kubelet", true, w0.Add(-time.Minute), time.Time{}))
	w.OnChange(change(2, w0.Add(time.Second), 3), nil)
	clk.SetTime(w0.Add(4 * time.Second))
	w.OnNode(node(3, "kubelet", true, w0.Add(4*time.Second), time.Time{})) // restarted at 2 s, written at 4 s
	units.set(200, w0.Add(2*time.Second))
	clk.SetTime(w0.Add(5 * time.Second))
	w.poll(ctx)
	if v := w.View(); !v.Ready || v.Capacity[resources.CPU] != 3000 {
		t.Fatalf("a write seen before the poll found its process: ready %v cpu %d, want ready, 3", v.Ready, v.Capacity[resources.CPU]/1000)
	}
}

// TestWatcherSources: the pod-resources API adds back what is reserved;
// without systemd the Node alone says what the kubelet believes.
func TestWatcherSources(t *testing.T) {
	t.Run("pod-resources", func(t *testing.T) {
		units := &fakeUnits{}
		units.set(100, w0.Add(-time.Hour))
		w := NewWatcher(WatcherOptions{Systemd: units, ReservedCPUs: []int{0},
			ReservedMemory: map[int]map[string]uint64{0: {"memory": 512 << 20}},
			PodResources: func(context.Context) (Allocatable, error) {
				return Allocatable{CPUs: []int{1, 2, 3}, Memory: map[int]map[string]uint64{
					0: {"memory": 8<<30 - 512<<20 - 1<<30, "hugepages-1Gi": 1 << 30}, 1: {"memory": 8 << 30}}}, nil
			}})
		w.OnChange(change(1, w0.Add(-time.Minute), 8), nil)
		w.poll(context.Background())
		v := w.View()
		if v.Capacity[resources.CPU] != 4000 || v.Capacity[resources.Memory] != 16*gi || v.Capacity["hugepages-1Gi"] != gi ||
			!v.Stale || v.StaleSince != 1 || !strings.Contains(v.Sources["memory"], "pod-resources") || len(v.PodResourcesCPUs) != 3 {
			t.Fatalf("view %+v", v)
		}
	})
	t.Run("no systemd", func(t *testing.T) {
		units := &fakeUnits{err: errors.New("no bus")}
		w := NewWatcher(WatcherOptions{Systemd: units})
		w.OnChange(change(1, w0, 8), nil)
		w.poll(context.Background())
		if v := w.View(); v.Known() || v.UnitError == "" {
			t.Fatalf("nothing known yet: %+v", v)
		}
		w.OnNode(node(4, "kubelet", true, w0.Add(-time.Hour), time.Time{}))
		if v := w.View(); v.Capacity[resources.CPU] != 4000 || !v.Ready || !v.Stale || !v.Known() {
			t.Fatalf("view %+v", v)
		}
	})
	t.Run("as registered", func(t *testing.T) {
		// The kubelet registered the Node with its capacity, which no
		// manager then owns, and has written status since its start
		// without changing it: that capacity is its view, before any
		// change, so that a change right after the daemon starts finds
		// the kubelet stale at once.
		units := &fakeUnits{}
		units.set(100, w0.Add(-time.Hour))
		w := NewWatcher(WatcherOptions{Systemd: units})
		w.OnChange(change(1, w0.Add(-time.Minute), 4), nil)
		w.poll(context.Background())
		v := node(4, "", true, w0.Add(-30*time.Minute), w0.Add(-time.Minute))
		v.CapacityOwners = map[string]string{"ephemeral-storage": "node-resized"}
		w.OnNode(v)
		got := w.View()
		if got.Capacity[resources.CPU] != 4000 || got.Capacity[resources.Memory] != 16*gi || got.Stale ||
			!strings.Contains(got.Sources["cpu"], "as the kubelet registered the Node") {
			t.Fatalf("view %+v", got)
		}
		w.OnChange(change(2, w0, 6), nil)
		if got := w.View(); !got.Stale || got.StaleSince != 2 || got.Capacity[resources.CPU] != 4000 {
			t.Fatalf("after a change: %+v", got)
		}
		// Not before the running process has written status.
		units.set(200, w0.Add(time.Second))
		w.poll(context.Background())
		w.OnNode(v)
		if got := w.View(); got.Capacity[resources.CPU] != 6000 || !strings.Contains(got.Sources["cpu"], "after the machine's last change") {
			t.Fatalf("a process newer than the status write: %+v", got)
		}
	})
	t.Run("another writer is not the kubelet", func(t *testing.T) {
		w := NewWatcher(WatcherOptions{})
		w.OnChange(change(1, w0, 8), nil)
		v := node(4, "node-resized-stand-in-kubelet", true, time.Time{}, time.Time{})
		v.CapacityOwners["memory"] = "node-resized-stand-in-kubelet"
		v.StatusWrites["node-resized-stand-in-kubelet"] = w0
		w.OnNode(v)
		if v := w.View(); v.Known() {
			t.Fatalf("a writer that is not the kubelet's field manager made a view: %+v", v)
		}
	})
}

// TestWatcherKubeletVersion: the view carries the kubelet's version from
// its Node, and a version outside the known ones is noted in the view and
// warned about once, not on every Node update.
func TestWatcherKubeletVersion(t *testing.T) {
	var logs strings.Builder
	w := NewWatcher(WatcherOptions{Clock: clocktesting.NewFakeClock(w0), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	w.OnChange(change(1, w0.Add(-time.Minute), 4), nil)
	for i, tc := range []struct {
		version, note string
		warnings      int // so far
	}{
		{"v1.37.2", "", 0},
		{"v1.38.1", "newer than the versions whose checkpoints node-resized knows (v1.34 to v1.37)", 1},
		{"v1.38.1", "newer than", 1},
		{"v1.33.0", "older than", 2},
		{"v1.36.3", "", 2},
	} {
		n := node(4, "kubelet", true, w0.Add(-time.Duration(10-i)*time.Minute), time.Time{})
		n.KubeletVersion = tc.version
		w.OnNode(n)
		v := w.View()
		if v.Version != tc.version || (tc.note == "") != (v.VersionNote == "") || !strings.Contains(v.VersionNote, tc.note) {
			t.Fatalf("step %d: version %q note %q, want %q with %q", i, v.Version, v.VersionNote, tc.version, tc.note)
		}
		if got := strings.Count(logs.String(), "level=WARN"); got != tc.warnings {
			t.Fatalf("step %d: %d warnings, want %d:\n%s", i, got, tc.warnings, logs.String())
		}
	}
}
