package agent

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
