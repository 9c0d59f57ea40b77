package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/types"
)

// TestStartsCountAgainstTheBudget: a start of the kubelet node-resized
// causes besides its restarts counts in the restart budget as a restart
// does, and the state file keeps it: a rollback's start again (in the
// restart's report) and a recovery's start (KubeletStarted). Two restarts
// and such a start spend the budget of 3 in 20 minutes, so that the
// restart the next change needs, the fourth start in the window, waits
// until the first restart leaves it, and the status says until when.
func TestStartsCountAgainstTheBudget(t *testing.T) {
	settle := shippedPolicy.SettleDelay
	first := k0.Add(time.Minute + settle) // the first restart
	for _, tc := range []struct {
		name string
		// rollback: the second restart ends in a rollback, which starts
		// the kubelet again 20 s later; else a recovery starts it at
		// 5m (told while the daemon runs) and the daemon restarts.
		rollback bool
		// uncounted: the start is not told at all (the budget then
		// allows the restart): the test's own control.
		uncounted bool
	}{
		{name: "a rollback's start", rollback: true},
		{name: "a recovery's start"},
		{name: "no start besides the restarts", uncounted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFlapNode(t, 4, shippedPolicy)
			var start time.Time
			if tc.rollback && !tc.uncounted {
				f.rec.ends = func(i int) error {
					if i != 1 {
						return nil
					}
					start = f.clock.Now().Add(20 * time.Second)
					return &types.CheckpointRollback{Files: []string{"/var/lib/kubelet/memory_manager_state"},
						Journal: "start memory manager error: ...", Result: "done", Starts: []time.Time{start}}
				}
			}
			f.runUntil(k0.Add(time.Minute))
			f.hardware(5)
			f.runUntil(k0.Add(4 * time.Minute))
			f.hardware(6)
			f.runUntil(k0.Add(5 * time.Minute))
			if !tc.rollback && !tc.uncounted {
				start = f.clock.Now()
				f.a.KubeletStarted(start)
				f.pass()
				// The daemon restarts: the start is in the state file.
				f.start()
			}
			if at, _ := f.rec.restarts(); len(at) != 2 {
				t.Fatalf("restarts at %v, want two", offsets(at))
			}
			recent := f.a.Status().Kubelet.RecentRestarts
			if want := 3; tc.uncounted {
				want = 2
				if len(recent) != want {
					t.Fatalf("recent restarts %v, want %d", offsets(recent), want)
				}
			} else if len(recent) != want || !recent[2].Equal(start) {
				t.Fatalf("recent restarts %v, want the two restarts and the start at +%v", offsets(recent), start.Sub(k0))
			}
			st, err := LoadState(f.cfg.StatePath, f.clock.Now())
			if err != nil || st == nil || len(st.Restarts) != len(recent) {
				t.Fatalf("state file: %+v, %v; want the restart history %v", st, err, offsets(recent))
			}

			// The next change needs a restart: the fourth start.
			f.runUntil(k0.Add(8 * time.Minute))
			f.hardware(7)
			f.runUntil(k0.Add(8*time.Minute + settle))
			at, _ := f.rec.restarts()
			k := f.a.Status().Kubelet
			if tc.uncounted {
				if len(at) != 3 {
					t.Fatalf("restarts at %v; want the third at once", offsets(at))
				}
				return
			}
			free := first.Add(shippedPolicy.RestartBudgetWindow)
			if len(at) != 2 || k.RestartWaiting != decide.RestartWaitBudget || !k.NextRestart.Equal(free) {
				t.Fatalf("restarts at %v, waiting %q until +%v; want none, the budget until +%v", offsets(at), k.RestartWaiting, k.NextRestart.Sub(k0), free.Sub(k0))
			}
			cond := f.a.Status().Condition.Message
			if want := "is spent until " + free.Format(time.RFC3339); !strings.Contains(cond, want) {
				t.Fatalf("condition %q, want it to say %q", cond, want)
			}
			f.runUntil(free)
			if at, _ := f.rec.restarts(); len(at) != 3 || !at[2].Equal(free) {
				t.Fatalf("restarts at %v; want the third at +%v, when the budget frees it", offsets(at), free.Sub(k0))
			}
		})
	}
}

// TestStartsKeptWhenTheDaemonStops: a start told when no pass takes it any
// more (the daemon stopping) is written to the state file all the same.
func TestStartsKeptWhenTheDaemonStops(t *testing.T) {
	clk := clocktesting.NewFakeClock(k0)
	cfg := Config{Clock: clk, Policy: shippedPolicy, StatePath: t.TempDir() + "/state.json"}
	if err := SaveState(cfg.StatePath, decide.State{Version: decide.StateVersion, Restarts: []time.Time{k0.Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	a := New(cfg, &fakeRelay{})
	a.KubeletStarted(k0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := LoadState(cfg.StatePath, k0)
	if err != nil || st == nil || !slices.EqualFunc(st.Restarts, []time.Time{k0.Add(-time.Minute), k0}, time.Time.Equal) {
		t.Fatalf("state file: %+v, %v; want the restart history with the start", st, err)
	}
}
