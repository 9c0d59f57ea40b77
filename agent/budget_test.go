package agent

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// shippedPolicy is the daemon's restart policy under its flags' defaults
// (cmd/node-resized's TestShippedRestartPolicy holds the flags to it).
var shippedPolicy = decide.Policy{SettleDelay: 10 * time.Second, RestartInterval: 2 * time.Minute, RestartTimeout: 2 * time.Minute,
	RestartBudget: 3, RestartBudgetWindow: 20 * time.Minute, TaintWhileStale: true}

// recordingRestarter restarts at once: it records when, on the agent's
// clock, and the online CPUs of the machine it restarted the kubelet into.
type recordingRestarter struct {
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	at    []time.Time
	into  []int
	// ends, when set, says how the restart with that index (from 0) ends.
	ends func(i int) error
}

func (r *recordingRestarter) Check(*topology.Snapshot) error { return nil }

func (r *recordingRestarter) Restart(_ context.Context, snap *topology.Snapshot) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, r.clock.Now())
	r.into = append(r.into, len(snap.CPUs.Online))
	if r.ends != nil {
		return "done", r.ends(len(r.at) - 1)
	}
	return "done", nil
}

func (r *recordingRestarter) restarts() ([]time.Time, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...), append([]int(nil), r.into...)
}

// clampRecorder records the kubepods writes.
type clampRecorder struct {
	mu   sync.Mutex
	reqs []cgroup.Request
}

func (c *clampRecorder) Apply(_ context.Context, r cgroup.Request, _ topology.CPUSet) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
	return nil
}

func (c *clampRecorder) requests() []cgroup.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cgroup.Request(nil), c.reqs...)
}

// flapNode runs an agent the way Run does (a pass on each input, on each
// poke and at each requeue), on a fake clock, over a CPU that goes offline
// and online; its kubelet, when restarted, reads the machine and is Ready
// readyAfter later.
type flapNode struct {
	t          *testing.T
	ctx        context.Context
	clock      *clocktesting.FakeClock
	relay      *fakeRelay
	enf        *clampRecorder
	rec        *recordingRestarter
	cfg        Config
	a          *Agent
	cpus       int
	kubelet    types.KubeletView
	readyAfter time.Duration
	readyAt    time.Time // a restarted kubelet's first status write (zero: none due)
	due        time.Time // the agent's requeue (zero: none)
	// changes are the times the CPU count changed; budgetWaits the
	// NextRestart the status gave while a restart waited for the budget,
	// with the number of restarts made by then.
	changes     []time.Time
	budgetWaits []budgetWait
	// messages counts the passes whose condition said the budget is spent.
	messages int
}

// budgetWait is what a status said of a restart that waits for the budget.
type budgetWait struct {
	seen, until time.Time
	made        int // restarts made before the status
}

func newFlapNode(t *testing.T, cpus int, pol decide.Policy) *flapNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := clocktesting.NewFakeClock(k0)
	f := &flapNode{t: t, ctx: ctx, clock: clk, relay: &fakeRelay{}, enf: &clampRecorder{}, rec: &recordingRestarter{clock: clk},
		cpus: cpus, readyAfter: 15 * time.Second}
	f.cfg = Config{Clock: clk, Policy: pol, Enforcer: f.enf, Restarter: f.rec, StatePath: filepath.Join(t.TempDir(), "state.json")}
	f.kubelet = types.KubeletView{Unit: "kubelet.service", LoadState: "loaded", ActiveState: "active", SubState: "running",
		MainPID: 100, Ready: true, Capacity: resources.List{resources.CPU: int64(cpus) * 1000, resources.Memory: 16 << 30}}
	f.start()
	return f
}

// start starts the daemon: a new agent from the state file.
func (f *flapNode) start() {
	f.a = New(f.cfg, f.relay)
	f.t.Cleanup(f.a.restarts.Wait)
	f.a.OnNode(types.NodeView{})
	f.due = time.Time{}
	f.hardware(f.cpus)
}

// hardware sets the online CPU count and takes the pass that follows.
func (f *flapNode) hardware(cpus int) {
	if cpus != f.cpus {
		f.changes = append(f.changes, f.clock.Now())
	}
	f.cpus = cpus
	snap := machine(cpus)
	f.a.OnChange(monitor.Change{Time: f.clock.Now(), Capacity: snap.Capacity()}, snap)
	f.kubelet.Stale = f.kubelet.Capacity[resources.CPU] != int64(cpus)*1000
	f.a.OnKubelet(f.kubelet)
	f.pass()
}

// pass takes a pass, the passes its pokes ask for, and carries a restart
// it started to its end: the kubelet reads the machine and is Ready
// readyAfter later.
func (f *flapNode) pass() {
	f.t.Helper()
	for {
		asked := f.a.State().RestartAt
		if after := f.a.pass(f.ctx); after > 0 {
			f.due = f.clock.Now().Add(after)
		}
		f.observe()
		if !f.a.State().RestartAt.Equal(asked) {
			// A restart was asked for: it runs off the pass.
			var into []int
			waitUntil(f.t, func() bool {
				var at []time.Time
				at, into = f.rec.restarts()
				f.a.mu.Lock()
				defer f.a.mu.Unlock()
				return len(at) > 0 && at[len(at)-1].Equal(f.clock.Now()) && !f.a.restarting
			})
			f.kubelet.MainPID++
			f.kubelet.Ready = false
			f.kubelet.Capacity = resources.List{resources.CPU: int64(into[len(into)-1]) * 1000, resources.Memory: 16 << 30}
			f.kubelet.Stale = f.kubelet.Capacity[resources.CPU] != int64(f.cpus)*1000
			f.a.OnKubelet(f.kubelet)
			f.readyAt = f.clock.Now().Add(f.readyAfter)
		}
		select {
		case <-f.a.wake:
		default:
			return
		}
	}
}

// observe notes what the status says of a restart waiting for the budget.
func (f *flapNode) observe() {
	st := f.a.Status()
	if k := st.Kubelet; k != nil && k.RestartWaiting == decide.RestartWaitBudget {
		at, _ := f.rec.restarts()
		f.budgetWaits = append(f.budgetWaits, budgetWait{seen: f.clock.Now(), made: len(at), until: k.NextRestart})
		if !strings.Contains(st.Condition.Message, "restart budget (3 restarts in 20m) is spent until "+k.NextRestart.UTC().Format(time.RFC3339)) {
			f.t.Fatalf("status waits for the budget until %v; condition %q", k.NextRestart, st.Condition.Message)
		}
		f.messages++
	}
}

// runUntil advances the clock from event to event (the kubelet's first
// status write, the agent's requeue) until end, before which no other
// input comes.
func (f *flapNode) runUntil(end time.Time) {
	f.t.Helper()
	for {
		next := end
		for _, at := range []time.Time{f.readyAt, f.due} {
			if !at.IsZero() && at.Before(next) {
				next = at
			}
		}
		if next.Before(f.clock.Now()) {
			next = f.clock.Now()
		}
		f.clock.SetTime(next)
		switch {
		case !f.readyAt.IsZero() && !next.Before(f.readyAt):
			f.readyAt = time.Time{}
			f.kubelet.Ready = true
			f.a.OnKubelet(f.kubelet)
			f.pass()
		case !f.due.IsZero() && !next.Before(f.due):
			f.due = time.Time{}
			f.pass()
		default:
			return // at end
		}
	}
}

// TestRestartBudgetUnderFlappingCPU: under the shipped defaults, a CPU
// that goes offline and online every 30 to 90 seconds for an hour, with a
// daemon restart halfway, gets at most 3 kubelet restarts in any 20
// minutes; every loss is clamped and tainted in its own pass; the last
// change is adopted by a restart into the machine as it ends; and while a
// restart waits for the budget, the status and the condition say until
// when, and the restart comes then.
func TestRestartBudgetUnderFlappingCPU(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			f := newFlapNode(t, 4, shippedPolicy)
			var changes, losses int
			restartedDaemon := false
			for now := time.Duration(0); ; {
				now += time.Duration(30+rng.Intn(61)) * time.Second
				if now > time.Hour {
					break
				}
				f.runUntil(k0.Add(now))
				if !restartedDaemon && now > 30*time.Minute {
					// The daemon restarts: the restart history comes
					// back from the state file.
					restartedDaemon = true
					f.start()
				}
				cpus := 3
				if f.cpus == 3 {
					cpus = 4
				}
				changes++
				clamps, statuses := len(f.enf.requests()), len(f.relay.statusesCopy())
				f.hardware(cpus)
				if cpus == 3 {
					losses++
					reqs := f.enf.requests()
					if len(reqs) == clamps || reqs[clamps].Kind != cgroup.KindClamp {
						t.Fatalf("the loss at %v: kubepods writes %v in its pass, want a clamp first", now, reqs[clamps:])
					}
					if sts := f.relay.statusesCopy()[statuses:]; len(sts) == 0 || !sts[0].Taint {
						t.Fatalf("the loss at %v: published %+v in its pass, want a tainted status", now, sts)
					}
				}
			}
			final := f.cpus
			f.runUntil(k0.Add(2 * time.Hour))

			at, into := f.rec.restarts()
			t.Logf("%d changes (%d losses), %d restarts at %v; %d passes said the budget was spent", changes, losses, len(at), offsets(at), f.messages)
			for i, from := range at {
				var n int
				for _, t2 := range at[i:] {
					if t2.Sub(from) < 20*time.Minute {
						n++
					}
				}
				if n > 3 {
					t.Fatalf("%d restarts within 20m of +%v: %v", n, from.Sub(k0), offsets(at))
				}
			}
			if len(at) < 6 {
				t.Fatalf("%d restarts in an hour and more of changes: the budget allows 3 per 20m", len(at))
			}
			if into[len(into)-1] != final {
				t.Fatalf("the last restart is into %d CPUs, want the last change's %d", into[len(into)-1], final)
			}
			// Every restart succeeded: a change while one ran is the
			// next one's, not its failure.
			for _, r := range f.relay.eventReasons() {
				if r == types.EventKubeletRestartFailed {
					t.Fatalf("events %v: a restart was reported failed", f.relay.eventReasons())
				}
			}
			st := f.a.Status()
			if st.Condition.Reason != types.ReasonAccepted || st.Taint != "" || st.Kubelet.Stale || st.Kubelet.Capacity[resources.CPU] != int64(final)*1000 {
				t.Fatalf("at the end: %s (%s), taint %q, kubelet %v stale %v", st.Condition.Reason, st.Condition.Message, st.Taint, st.Kubelet.Capacity, st.Kubelet.Stale)
			}
			// While the status said a restart waits for the budget, none
			// came.
			if len(f.budgetWaits) == 0 {
				t.Fatal("no restart ever waited for the budget")
			}
			for _, w := range f.budgetWaits {
				if w.made < len(at) && at[w.made].Before(w.until) {
					t.Fatalf("at +%v the status said the budget frees a restart at +%v; one came at +%v", w.seen.Sub(k0), w.until.Sub(k0), at[w.made].Sub(k0))
				}
			}
			// And no restart came later than the policy allows: each at
			// the first moment that the last change had settled, the
			// interval since the restart before had passed, and the
			// window held fewer than 3.
			for i, r := range at {
				earliest := k0
				for _, c := range f.changes {
					if c.Before(r) {
						earliest = maxTime(earliest, c.Add(shippedPolicy.SettleDelay))
					}
				}
				if i > 0 {
					earliest = maxTime(earliest, at[i-1].Add(shippedPolicy.RestartInterval))
				}
				if i >= 3 {
					earliest = maxTime(earliest, at[i-3].Add(shippedPolicy.RestartBudgetWindow))
				}
				if !r.Equal(earliest) {
					t.Fatalf("restart %d at +%v, want it at the first moment allowed, +%v (restarts %v)", i, r.Sub(k0), earliest.Sub(k0), offsets(at))
				}
			}
		})
	}
}

// statusesCopy returns what was published so far.
func (f *fakeRelay) statusesCopy() []types.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.NodeStatus(nil), f.statuses...)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// offsets renders times as offsets from k0, for messages.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(k0)
	}
	return out
}
