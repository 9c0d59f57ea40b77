package decide

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// shipped is the daemon's default restart policy (its flags' defaults).
var shipped = Policy{SettleDelay: 10 * time.Second, RestartInterval: 2 * time.Minute, RestartTimeout: 2 * time.Minute}

// TestBudgetFreeAt: when the budget next allows a restart, from histories
// as a state file may hold them.
func TestBudgetFreeAt(t *testing.T) {
	m := func(i int) time.Time { return t0.Add(minutes(i)) }
	now := m(30)
	for _, tc := range []struct {
		name    string
		history []time.Time
		budget  int
		want    time.Time // zero: allowed now
	}{
		{"none", nil, 3, time.Time{}},
		{"two in the window", []time.Time{m(20), m(25)}, 3, time.Time{}},
		{"three in the window", []time.Time{m(15), m(20), m(25)}, 3, m(35)},
		{"old ones do not count", []time.Time{m(1), m(5), m(9), m(20), m(25)}, 3, time.Time{}},
		{"one just left the window", []time.Time{m(10), m(20), m(25)}, 3, time.Time{}},
		{"out of order", []time.Time{m(25), m(15), m(20)}, 3, m(35)},
		{"more than the budget (a lower budget than before)", []time.Time{m(12), m(15), m(20), m(25)}, 3, m(35)},
		{"budget of one", []time.Time{m(25)}, 1, m(45)},
		{"within the clock skew ahead", []time.Time{m(15), m(20), m(33)}, 3, m(35)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := budgetFreeAt(tc.history, now, tc.budget, 20*time.Minute); !got.Equal(tc.want) {
				t.Fatalf("budgetFreeAt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRecordRestart: the history keeps what the budget looks at, oldest
// first, and nothing else.
func TestRecordRestart(t *testing.T) {
	m := func(i int) time.Time { return t0.Add(minutes(i)) }
	for _, tc := range []struct {
		name    string
		history []time.Time
		budget  int
		want    []time.Time
	}{
		{"first", nil, 3, []time.Time{m(30)}},
		{"old ones dropped", []time.Time{m(1), m(9), m(20)}, 3, []time.Time{m(20), m(30)}},
		{"at most the budget", []time.Time{m(15), m(20), m(25)}, 3, []time.Time{m(20), m(25), m(30)}},
		{"sorted", []time.Time{m(25), m(20)}, 3, []time.Time{m(20), m(25), m(30)}},
		{"bounded by MaxRestartHistory", nil, MaxRestartHistory + 5, []time.Time{m(30)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := recordRestart(tc.history, m(30), tc.budget, 20*time.Minute); !slices.Equal(got, tc.want) {
				t.Fatalf("recordRestart = %v, want %v", got, tc.want)
			}
		})
	}
	var long []time.Time
	for i := range 2 * MaxRestartHistory {
		long = append(long, t0.Add(time.Duration(i)*time.Second))
	}
	if got := recordRestart(long, t0.Add(time.Hour), 1000, 2*time.Hour); len(got) != MaxRestartHistory {
		t.Fatalf("%d restarts kept, want MaxRestartHistory %d", len(got), MaxRestartHistory)
	}
}

// TestCountStarts: the starts node-resized caused besides its restarts
// (a rollback's, a recovery's) enter the history as restarts do, each
// once.
func TestCountStarts(t *testing.T) {
	m := func(i int) time.Time { return t0.Add(minutes(i)) }
	now := m(30)
	for _, tc := range []struct {
		name            string
		history, starts []time.Time
		want            []time.Time
	}{
		{"none", []time.Time{m(20)}, nil, []time.Time{m(20)}},
		{"a rollback's start after its restart", []time.Time{m(20)}, []time.Time{m(21)}, []time.Time{m(20), m(21)}},
		{"a recovery's start, earlier than the last restart", []time.Time{m(25)}, []time.Time{m(15)}, []time.Time{m(15), m(25)}},
		{"passed twice, counted once", []time.Time{m(20), m(21)}, []time.Time{m(21), m(21)}, []time.Time{m(20), m(21)}},
		{"out of the window", []time.Time{m(20)}, []time.Time{m(5)}, []time.Time{m(20)}},
		{"at most the budget, the latest", []time.Time{m(15), m(20), m(25)}, []time.Time{m(26)}, []time.Time{m(20), m(25), m(26)}},
		{"the zero time is no start", nil, []time.Time{{}}, nil},
		{"within the clock skew ahead, kept", []time.Time{m(20)}, []time.Time{m(33)}, []time.Time{m(20), m(33)}},
		{"beyond the clock skew, at now", []time.Time{m(20)}, []time.Time{m(90)}, []time.Time{m(20), now}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := countStarts(tc.history, tc.starts, now, 3, 20*time.Minute)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("countStarts = %v, want %v", got, tc.want)
			}
			if err := (State{Version: StateVersion, Restarts: got}).Validate(now); err != nil {
				t.Fatalf("the history counted is not one a state file may hold: %v", err)
			}
		})
	}
}

// TestStartsCountAgainstTheBudget: a start node-resized caused besides its
// restarts (a rollback's start again, a recovery's start) counts as a
// restart: with the restarts before it, it spends the budget, and the next
// restart waits until the oldest of them leaves the window, which the
// decision and the condition say. A start is never refused, and it is
// counted once however often the caller passes it.
func TestStartsCountAgainstTheBudget(t *testing.T) {
	settle := shipped.SettleDelay
	window := DefaultRestartBudgetWindow
	for _, tc := range []struct {
		name string
		// restarts: changes whose restarts Decide asks for, at these
		// minutes; starts: the starts it is told of, at these times.
		restarts []int
		starts   []time.Duration
		// free: when the next restart is allowed (0: at once).
		free time.Duration
	}{
		{"two restarts and a rollback's start", []int{0, 3}, []time.Duration{minutes(3) + settle + 20*time.Second}, settle + window},
		{"two restarts and a recovery's start", []int{0, 3}, []time.Duration{minutes(4)}, settle + window},
		{"a restart, a rollback's start and a recovery's start", []int{0}, []time.Duration{minutes(1), minutes(2)}, settle + window},
		{"a recovery's start first", []int{2, 5}, []time.Duration{minutes(1)}, minutes(1) + window},
		{"a start outside the window counts no longer", []int{21, 24}, []time.Duration{minutes(1)}, 0},
		{"two restarts and nothing else", []int{0, 3}, nil, 0},
		{"the same start told three times", []int{0, 3}, []time.Duration{minutes(4), minutes(4), minutes(4)}, settle + window},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestarting(t, 4, shipped)
			var starts []time.Time
			tell := func(until time.Duration) func(in *Input) {
				return func(in *Input) {
					in.Starts = nil
					for _, s := range tc.starts {
						if s <= until {
							in.Starts = append(in.Starts, t0.Add(s))
						}
					}
					starts = in.Starts
				}
			}
			cpu := int64(4)
			last := time.Duration(0)
			for _, at := range tc.restarts {
				cpu++
				r.at(minutes(at), func(in *Input) { cpus(cpu)(in); tell(minutes(at))(in) })
				d := r.at(minutes(at)+settle, tell(minutes(at)+settle))
				if !hasKind(d.Actions, KindRestartKubelet) {
					t.Fatalf("the change at %dm: no restart (%s)", at, d.Condition.Message)
				}
				r.at(minutes(at)+settle+time.Second, tell(minutes(at)+settle+time.Second))
				last = minutes(at) + settle + time.Second
			}
			now := max(last, slices.Max(append(tc.starts, 0))) + shipped.RestartInterval
			r.at(now, func(in *Input) { cpus(cpu + 1)(in); tell(now)(in) })
			now += settle
			d := r.at(now, tell(now))
			if len(starts) != len(tc.starts) {
				t.Fatalf("%d starts told, want %d", len(starts), len(tc.starts))
			}
			if tc.free == 0 {
				if !hasKind(d.Actions, KindRestartKubelet) {
					t.Fatalf("%v waiting %q until %v; want a restart now", kinds(d.Actions), d.RestartWaiting, d.RestartNotBefore)
				}
				return
			}
			free := t0.Add(tc.free)
			if hasKind(d.Actions, KindRestartKubelet) || d.RestartWaiting != RestartWaitBudget || !d.RestartNotBefore.Equal(free) {
				t.Fatalf("%v waiting %q until %v; want the budget until %v (history %v)", kinds(d.Actions), d.RestartWaiting, d.RestartNotBefore, free, d.Next.Restarts)
			}
			if want := "is spent until " + free.Format(time.RFC3339); !strings.Contains(d.Condition.Message, want) {
				t.Fatalf("message %q, want it to say %q", d.Condition.Message, want)
			}
			d = r.at(free.Sub(t0), tell(free.Sub(t0)))
			if !hasKind(d.Actions, KindRestartKubelet) {
				t.Fatalf("at %v, when the budget frees: %v waiting %q until %v", free, kinds(d.Actions), d.RestartWaiting, d.RestartNotBefore)
			}
		})
	}
}

// restarting is a node whose kubelet, when Decide restarts it, is back at
// once, Ready with the machine it read at the restart: the machine at the
// pass that asked for it. Its evictions are done at once too.
type restarting struct {
	*node
	restarts []time.Time
	into     []int64 // the cpu each restart adopted
}

func newRestarting(t *testing.T, cpus int64, pol Policy) *restarting {
	t.Helper()
	n := newNode(t, machine(cpus, 16*Gi), types.Configured{})
	n.in.Policy = pol
	n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": cpus * 1000, "memory": 16 * Gi}}
	n.step(nil)
	return &restarting{node: n}
}

// at takes a decision at t0+d, with mut applied to the input first, and
// then lets a restart it asked for happen.
func (r *restarting) at(d time.Duration, mut func(in *Input)) Decision {
	r.t.Helper()
	dec := r.step(func(in *Input) {
		in.Now = t0.Add(d)
		if mut != nil {
			mut(in)
		}
	})
	if a, ok := find[RestartKubelet](dec.Actions); ok {
		r.restarts = append(r.restarts, dec.Next.RestartAt)
		r.into = append(r.into, a.Capacity[resources.CPU])
		r.in.Kubelet.Capacity = resources.List{"cpu": r.in.Physical.Capacity[resources.CPU], "memory": r.in.Physical.Capacity[resources.Memory]}
		r.in.Kubelet.Report = types.RestartReport{At: dec.Next.RestartAt}
	}
	if a, ok := find[Evict](dec.Actions); ok {
		r.in.Eviction = types.EvictionReport{Generation: a.Generation, Done: true}
	}
	return dec
}

func cpus(n int64) func(in *Input) {
	return func(in *Input) { in.Physical = in.Physical.with(resources.CPU, n*1000) }
}

// TestRestartBudget: under the shipped defaults a CPU that changes every 3
// minutes gets 3 restarts, then waits for the budget, which the condition
// and the decision say until when; the restart the budget then allows
// adopts the latest change; the window slides.
func TestRestartBudget(t *testing.T) {
	r := newRestarting(t, 4, shipped)
	settle := shipped.SettleDelay
	// Three changes, three restarts, each once the change has settled.
	for i, c := range []int64{5, 6, 7} {
		change := minutes(3 * i)
		r.at(change, cpus(c))
		d := r.at(change+settle, nil)
		r.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
		d = r.at(change+settle+time.Second, nil)
		r.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	}
	// The fourth change waits for the first restart to leave the window.
	free := t0.Add(settle + DefaultRestartBudgetWindow)
	r.at(minutes(9), cpus(8))
	d := r.at(minutes(9)+settle, nil)
	r.expect(d, types.ReasonInProgress)
	wantMsg := "the restart budget (3 restarts in 20m) is spent until " + free.Format(time.RFC3339)
	if !strings.Contains(d.Condition.Message, wantMsg) {
		t.Fatalf("message %q, want it to say %q", d.Condition.Message, wantMsg)
	}
	if d.RestartWaiting != RestartWaitBudget || !d.RestartNotBefore.Equal(free) || d.RequeueAfter != free.Sub(t0.Add(minutes(9)+settle)) {
		t.Fatalf("waiting %q until %v, requeue %v; want %q until %v", d.RestartWaiting, d.RestartNotBefore, d.RequeueAfter, RestartWaitBudget, free)
	}
	// More changes meanwhile batch into that restart: none restarts.
	for i, c := range []int64{3, 6, 2} {
		d := r.at(minutes(12+3*i), cpus(c))
		d2 := r.at(minutes(12+3*i)+settle, nil)
		if hasKind(d.Actions, KindRestartKubelet) || hasKind(d2.Actions, KindRestartKubelet) || d2.RestartWaiting != RestartWaitBudget {
			t.Fatalf("change %d while the budget is spent: %v %v (%s)", i, kinds(d.Actions), kinds(d2.Actions), d2.Condition.Message)
		}
	}
	d = r.at(free.Sub(t0)-time.Second, nil)
	r.expect(d, types.ReasonInProgress)
	d = r.at(free.Sub(t0), nil)
	r.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	if got := r.into[len(r.into)-1]; got != 2000 {
		t.Fatalf("the batched restart is into cpu %d, want the latest target 2000", got)
	}
	d = r.at(free.Sub(t0)+time.Second, nil)
	r.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
	// The window slides: the next change waits for the second restart to
	// leave it.
	r.at(minutes(21), cpus(4))
	d = r.at(minutes(21)+settle, nil)
	if want := r.restarts[1].Add(DefaultRestartBudgetWindow); d.RestartWaiting != RestartWaitBudget || !d.RestartNotBefore.Equal(want) {
		t.Fatalf("waiting %q until %v, want the budget until %v", d.RestartWaiting, d.RestartNotBefore, want)
	}
	checkWindows(t, r.restarts, 3, DefaultRestartBudgetWindow)
}

// checkWindows fails when any window of the given length holds more than
// budget of the restarts.
func checkWindows(t *testing.T, restarts []time.Time, budget int, window time.Duration) {
	t.Helper()
	for i, from := range restarts {
		var in []time.Time
		for _, at := range restarts[i:] {
			if at.Sub(from) < window {
				in = append(in, at)
			}
		}
		if len(in) > budget {
			t.Fatalf("%d restarts within %s of %s: %v", len(in), window, from.Format(time.TimeOnly), in)
		}
	}
}

// TestRestartWaits: the decision says what a restart waits for and until
// when; only the budget's wait has its own message.
func TestRestartWaits(t *testing.T) {
	r := newRestarting(t, 4, shipped)
	d := r.at(0, cpus(6))
	if d.RestartWaiting != RestartWaitSettle || !d.RestartNotBefore.Equal(t0.Add(shipped.SettleDelay)) ||
		!strings.Contains(d.Condition.Message, "waiting before restarting the kubelet (settle delay") {
		t.Fatalf("waiting %q until %v (%s), want the settle delay", d.RestartWaiting, d.RestartNotBefore, d.Condition.Message)
	}
	r.at(shipped.SettleDelay, nil)
	r.at(shipped.SettleDelay+time.Second, nil)
	d = r.at(20*time.Second, cpus(8))
	d = r.at(40*time.Second, nil)
	if want := t0.Add(shipped.SettleDelay + shipped.RestartInterval); d.RestartWaiting != RestartWaitInterval || !d.RestartNotBefore.Equal(want) {
		t.Fatalf("waiting %q until %v, want the interval until %v", d.RestartWaiting, d.RestartNotBefore, want)
	}
	d = r.at(shipped.SettleDelay+shipped.RestartInterval, nil)
	if !hasKind(d.Actions, KindRestartKubelet) || d.RestartWaiting != "" || !d.RestartNotBefore.IsZero() {
		t.Fatalf("%v waiting %q until %v, want a restart and no wait", kinds(d.Actions), d.RestartWaiting, d.RestartNotBefore)
	}
}

// TestRestartBudgetNeverDelaysProtection: with the budget spent, a loss is
// clamped and evicted in its own pass, first the clamp, and the Node
// tainted; nothing of it waits for a restart.
func TestRestartBudgetNeverDelaysProtection(t *testing.T) {
	for _, tc := range []struct {
		name string
		// waiting: a gain already waits for the budget when the loss comes.
		waiting bool
		loss    func(in *Input)
	}{
		{"a CPU goes", false, cpus(3)},
		{"memory goes", false, func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 12*Gi) }},
		{"a CPU goes while a gain waits for the budget", true, cpus(3)},
		{"memory goes while a gain waits for the budget", true, func(in *Input) { in.Physical = in.Physical.with(resources.Memory, 12*Gi) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := shipped
			pol.TaintWhileStale = true
			r := newRestarting(t, 4, pol)
			now := minutes(10)
			// Spent: three restarts in the last 20 minutes.
			r.in.Previous.Restarts = []time.Time{t0.Add(minutes(1)), t0.Add(minutes(4)), t0.Add(minutes(7))}
			r.in.Previous.RestartAt = t0.Add(minutes(7))
			if tc.waiting {
				r.at(now-time.Minute, cpus(6))
				d := r.at(now-time.Second, nil)
				if d.RestartWaiting != RestartWaitBudget {
					t.Fatalf("the gain waits for %q (%s), want the budget", d.RestartWaiting, d.Condition.Message)
				}
			}
			d := r.at(now, tc.loss)
			ks := kinds(d.Actions)
			if len(ks) == 0 || ks[0] != KindClampCgroups || !hasKind(d.Actions, KindEvict) {
				t.Fatalf("the loss's pass: %v, want the clamp first and an eviction", ks)
			}
			if p, ok := find[PatchNodeStatus](d.Actions); !ok || !p.Taint || !d.Next.Tainted {
				t.Fatalf("the loss's pass: patch %+v, tainted %v; want the Node tainted", p, d.Next.Tainted)
			}
			if hasKind(d.Actions, KindRestartKubelet) {
				t.Fatal("a restart with the budget spent")
			}
			// Evicted: the restart waits for the budget, the taint stays.
			d = r.at(now+time.Minute, func(in *Input) {
				in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Done: true}
			})
			if d.RestartWaiting != RestartWaitBudget || !d.Next.Tainted {
				t.Fatalf("after the eviction: waiting %q, tainted %v (%s); want the budget and the taint", d.RestartWaiting, d.Next.Tainted, d.Condition.Message)
			}
			d = r.at(minutes(21), nil)
			if !hasKind(d.Actions, KindRestartKubelet) {
				t.Fatalf("at 21m: %v (%s), want the restart the budget allows", kinds(d.Actions), d.Condition.Message)
			}
			d = r.at(minutes(21)+time.Second, nil)
			if d.Next.Tainted || d.Condition.Reason != types.ReasonAccepted {
				t.Fatalf("after the restart: %s, tainted %v; want Accepted and no taint", d.Condition.Reason, d.Next.Tainted)
			}
		})
	}
}

// TestChangeDuringRestart: a change while a restart runs is not that
// restart's failure: once it is done and the kubelet back, the change gets
// the next restart the policy allows.
func TestChangeDuringRestart(t *testing.T) {
	r := newRestarting(t, 4, shipped)
	r.at(0, cpus(6))
	d := r.at(shipped.SettleDelay, nil)
	r.expect(d, types.ReasonInProgress, KindPatchNodeStatus, KindRestartKubelet)
	restart := d.Next.RestartAt
	// The kubelet is still starting when the CPU count changes again.
	r.in.Kubelet.Ready, r.in.Kubelet.Report = false, types.RestartReport{}
	r.at(15*time.Second, cpus(8))
	// Back, Ready, with the machine it read (6 CPUs); the job is done.
	d = r.at(30*time.Second, func(in *Input) {
		in.Kubelet.Ready, in.Kubelet.Report = true, types.RestartReport{At: restart}
	})
	if hasKind(d.Actions, KindEmitEvent) || d.Next.RestartFailed != "" || d.Next.RestartPending {
		t.Fatalf("after the restart: %v (%s), failed %q, pending %v; want no failure and no restart outstanding",
			kinds(d.Actions), d.Condition.Message, d.Next.RestartFailed, d.Next.RestartPending)
	}
	if d.RestartWaiting != RestartWaitInterval {
		t.Fatalf("waiting %q (%s), want the restart interval", d.RestartWaiting, d.Condition.Message)
	}
	d = r.at(shipped.SettleDelay+shipped.RestartInterval, nil)
	if a, ok := find[RestartKubelet](d.Actions); !ok || a.Capacity[resources.CPU] != 8000 {
		t.Fatalf("%v (%s), want a restart into 8 CPUs", kinds(d.Actions), d.Condition.Message)
	}
	d = r.at(shipped.SettleDelay+shipped.RestartInterval+time.Second, nil)
	r.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)
}

// TestParseBudget: the flag's syntax, and that FormatBudget is its inverse.
func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in     string
		n      int
		window time.Duration
		err    string
	}{
		{in: "3/20m", n: 3, window: 20 * time.Minute},
		{in: "1/1h30m", n: 1, window: 90 * time.Minute},
		{in: "64/10s", n: 64, window: 10 * time.Second},
		{in: "3", err: "want N/WINDOW"},
		{in: "0/20m", err: "from 1 to 64"},
		{in: "65/20m", err: "from 1 to 64"},
		{in: "-1/20m", err: "from 1 to 64"},
		{in: "3x/20m", err: "from 1 to 64"},
		{in: "/20m", err: "from 1 to 64"},
		{in: "3/", err: "positive duration"},
		{in: "3/0s", err: "positive duration"},
		{in: "3/-5m", err: "positive duration"},
		{in: "3/20", err: "positive duration"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, w, err := ParseBudget(tc.in)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseBudget(%q) = %d, %v, %v; want an error with %q", tc.in, n, w, err, tc.err)
				}
				return
			case err != nil || n != tc.n || w != tc.window:
				t.Fatalf("ParseBudget(%q) = %d, %v, %v; want %d, %v", tc.in, n, w, err, tc.n, tc.window)
			}
			if n2, w2, err := ParseBudget(FormatBudget(n, w)); err != nil || n2 != n || w2 != w {
				t.Fatalf("FormatBudget(%d, %v) = %q does not parse back: %d, %v, %v", n, w, FormatBudget(n, w), n2, w2, err)
			}
		})
	}
}
