package agent

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// recordingEvictor records the evictions it is asked to start.
type recordingEvictor struct {
	mu      sync.Mutex
	started []decide.Evict
}

func (e *recordingEvictor) Start(_ context.Context, x decide.Evict, _ []int, report func(types.EvictionReport)) {
	e.mu.Lock()
	e.started = append(e.started, x)
	e.mu.Unlock()
}

func (e *recordingEvictor) all() []decide.Evict {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]decide.Evict(nil), e.started...)
}

// An eviction remembered in the state file is resumed only when the
// machine as it is still calls for it, and then towards what the first
// pass decides for it: a file that says "evicting" towards 1 CPU on a
// machine that has 4 must not evict the node's pods down to 1 CPU.
func TestResumedEvictionFollowsTheMachine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		applied  int // CPUs the file says were applied
		machine  int // CPUs online now
		resumed  bool
		towardsN int64
	}{
		{name: "the machine is still the size evicted towards", applied: 2, machine: 2, resumed: true, towardsN: 2},
		{name: "the file evicts towards less than the machine has", applied: 1, machine: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			applied := machine(tc.applied).Capacity()
			st := decide.State{Version: decide.StateVersion, Generation: 3, Evicting: true,
				Applied: applied, Physical: applied.Clone(), Outcome: types.ReasonEmergencyReduced,
				Condition: types.Condition{Status: types.StatusFalse, Reason: types.ReasonEmergencyReduced}}
			if err := SaveState(path, st); err != nil {
				t.Fatal(err)
			}
			ev := &recordingEvictor{}
			r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
			r.a = New(Config{StatePath: path, Evictor: ev}, r.relay)
			ctx, cancel := context.WithCancel(context.Background())
			r.cancel = cancel
			go func() { r.done <- r.a.Run(ctx) }()
			t.Cleanup(r.stop)
			hw(r, tc.machine, 0)
			waitUntil(t, func() bool { return r.a.Status().Decisions > 0 })
			time.Sleep(20 * time.Millisecond)
			got := ev.all()
			if !tc.resumed {
				for _, x := range got {
					if x.Capacity[resources.CPU] < int64(tc.machine)*1000 {
						t.Fatalf("eviction started towards %s on a machine of %d CPUs", x.Capacity, tc.machine)
					}
				}
				return
			}
			if len(got) != 1 || got[0].Generation != 3 || got[0].Capacity[resources.CPU] != tc.towardsN*1000 {
				t.Fatalf("evictions %+v, want one of generation 3 towards %d CPUs", got, tc.towardsN)
			}
		})
	}
}

// A daemon that stopped while the pods of a planned shrink were being
// looked at (nothing of it published, its clamp due) looks at them again,
// evicting none, and publishes nothing before the answer; the answer
// publishes the shrink once, with its clamp.
func TestResumedCheckOfAPlannedShrink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	four, two := machine(4).Capacity(), machine(2).Capacity()
	st := decide.State{Version: decide.StateVersion, Generation: 3, Evicting: true, Checking: true, ClampDue: true,
		Applied: two, Physical: four.Clone(), Outcome: types.ReasonAccepted, Spec: `{"cpu":"2"}`,
		InProgress: "lowering capacity (cpu 4 → 2)",
		Condition:  types.Condition{Status: types.StatusTrue, Reason: types.ReasonAccepted, Message: "capacity cpu=4 applied"}}
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	ev := &recordingEvictor{}
	ol := &orderLog{}
	r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
	r.a = New(Config{StatePath: path, Evictor: ev, Enforcer: orderEnforcer{ol}}, r.relay)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.a.Run(ctx) }()
	t.Cleanup(r.stop)
	r.a.OnNode(conf("cpu", "2"))
	hw(r, 4, 0)
	waitUntil(t, func() bool { return r.a.Status().Decisions > 0 })
	time.Sleep(20 * time.Millisecond)
	got := ev.all()
	if len(got) != 1 || got[0].Generation != 3 || !got[0].Hold || got[0].Capacity[resources.CPU] != 2000 {
		t.Fatalf("evictions %+v, want generation 3's pods looked at, held", got)
	}
	if s, ok := r.relay.last(); ok {
		t.Fatalf("published %+v before the pods were looked at", s)
	}
	ol.mu.Lock()
	calls := append([]string(nil), ol.calls...)
	ol.mu.Unlock()
	if len(calls) != 0 {
		t.Fatalf("kubepods written %v before the status", calls)
	}
	r.a.ReportEviction(types.EvictionReport{Generation: 3, Done: true})
	s := r.settle(types.ReasonAccepted, 2)
	if s.Condition.Status != types.StatusTrue {
		t.Fatalf("status %+v", s)
	}
	waitUntil(t, func() bool {
		ol.mu.Lock()
		defer ol.mu.Unlock()
		return len(ol.calls) > 0
	})
	ol.mu.Lock()
	defer ol.mu.Unlock()
	if ol.calls[0] != string(cgroup.KindClamp) {
		t.Fatalf("kubepods writes %v, want the clamp", ol.calls)
	}
}

// A daemon that stopped while evicting for a planned release resumes the
// eviction towards the CPUs the release leaves online, as it began: a pod
// on a CPU the release takes still goes before the CPU does.
func TestResumedEvictionOfARelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	four, two := machine(4).Capacity(), machine(2).Capacity()
	v := conf("cpu", "2")
	v.Configured.Release = true
	st := decide.State{Version: decide.StateVersion, Generation: 3, Evicting: true,
		Applied: two, Physical: four.Clone(), Outcome: types.ReasonAccepted, Spec: v.Configured.Key(),
		InProgress: "lowering capacity (cpu 4 → 2)",
		Condition:  types.Condition{Status: types.StatusFalse, Reason: types.ReasonInProgress, Message: "lowering capacity (cpu 4 → 2)"}}
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	ev := &onlineEvictor{}
	r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
	fr := &cpuReleaser{stay: []int{0, 1}}
	fr.onChange = func(cpus int) { snap := machine(cpus); r.a.OnChange(monitorChange(snap), snap) }
	r.a = New(Config{StatePath: path, Evictor: ev, Release: true, Releaser: fr}, r.relay)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.a.Run(ctx) }()
	t.Cleanup(r.stop)
	r.a.OnNode(v)
	hw(r, 4, 0)
	waitUntil(t, func() bool { ev.mu.Lock(); defer ev.mu.Unlock(); return len(ev.online) > 0 })
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if !slices.Equal(ev.online[0], []int{0, 1}) || !ev.release[0] {
		t.Errorf("the resumed eviction took %v for online (release %v), want the CPUs the release leaves online, [0 1]", ev.online[0], ev.release[0])
	}
}
