package decide

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The restart budget's defaults: at most 3 kubelet starts by node-resized
// in any 20 minutes: its restarts, and the starts of its rollbacks and
// recoveries (Input.Starts). node-problem-detector's stock FrequentKubeletRestart
// (config/systemd-monitor-counter.json) fires at 5 kubelet starts in 20
// minutes, whoever made them; 3 leaves room for the kubelet's own restart
// after a crash and for an operator's or NPD's repair.
const (
	DefaultRestartBudget       = 3
	DefaultRestartBudgetWindow = 20 * time.Minute
)

// MaxRestartHistory bounds State.Restarts, and so the restart budget: a
// state file with more is not one Decide wrote.
const MaxRestartHistory = 64

// What a restart the kubelet needs waits for (Decision.RestartWaiting).
const (
	RestartWaitSettle   = "settle"   // the change to hold for Policy.SettleDelay
	RestartWaitInterval = "interval" // Policy.RestartInterval since the last restart
	RestartWaitBudget   = "budget"   // the restart budget to free a restart
)

// recentRestarts returns the restarts of history within the budget's
// window at now (later than now minus the window), oldest first.
func recentRestarts(history []time.Time, now time.Time, window time.Duration) []time.Time {
	from := now.Add(-window)
	var out []time.Time
	for _, t := range history {
		if t.After(from) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// budgetFreeAt returns when the restart budget next allows a restart, or
// the zero time when it allows one at now: with budget restarts or more in
// the window, once enough of them have left it that fewer than budget
// remain.
func budgetFreeAt(history []time.Time, now time.Time, budget int, window time.Duration) time.Time {
	recent := recentRestarts(history, now, window)
	if len(recent) < budget {
		return time.Time{}
	}
	// The restart at index len-budget is the last that must leave the
	// window: then budget-1 remain.
	return recent[len(recent)-budget].Add(window)
}

// recordRestart returns history with a restart at now appended and what
// no longer counts dropped: restarts outside the window, and all but the
// last budget (the budget never looks further back).
func recordRestart(history []time.Time, now time.Time, budget int, window time.Duration) []time.Time {
	out := append(recentRestarts(history, now, window), now)
	if n := min(budget, MaxRestartHistory); len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// countStarts returns history with the kubelet starts starts added, as
// recordRestart keeps it: each time once (one already there, or passed
// twice, is not counted again), the zero time not at all, one later than
// now by more than MaxClockSkew at now (a state file could not hold it),
// then only what the budget looks at.
func countStarts(history, starts []time.Time, now time.Time, budget int, window time.Duration) []time.Time {
	all := slices.Clone(history)
	for _, at := range starts {
		switch {
		case at.IsZero():
			continue
		case at.After(now.Add(MaxClockSkew)):
			at = now
		}
		all = append(all, at)
	}
	out := slices.CompactFunc(recentRestarts(all, now, window), time.Time.Equal)
	if n := min(budget, MaxRestartHistory); len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// WithStarts returns s with the kubelet starts node-resized caused besides
// the restarts Decide asked for (Input.Starts) in its restart history, as
// Decide records them: for a caller that keeps its state with no pass to
// take (a daemon stopping).
func (s State) WithStarts(starts []time.Time, now time.Time, p Policy) State {
	if len(starts) == 0 {
		return s
	}
	n, window := p.Budget()
	s.Restarts = countStarts(s.Restarts, starts, now, n, window)
	return s
}

// budgetMessage is the condition's word on a restart that waits for the
// budget until until.
func budgetMessage(pol Policy, until time.Time) string {
	return fmt.Sprintf("waiting before restarting the kubelet: the restart budget (%d restarts in %s) is spent until %s; "+
		"that restart adopts every change made until then, and the kubepods limits keep the node within its hardware meanwhile",
		pol.RestartBudget, shortDuration(pol.RestartBudgetWindow), until.UTC().Format(time.RFC3339))
}

// shortDuration formats d without the zero units that time.Duration's
// String appends ("20m", not "20m0s").
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Budget returns the restart budget p sets, its defaults applied: at most
// n restarts in any window.
func (p Policy) Budget() (n int, window time.Duration) {
	p = p.withDefaults()
	return p.RestartBudget, p.RestartBudgetWindow
}

// RecentRestarts returns the kubelet starts of s that count against p's
// budget at now, oldest first: the restarts Decide asked for and the
// starts it was told of (Input.Starts).
func (p Policy) RecentRestarts(s State, now time.Time) []time.Time {
	_, window := p.Budget()
	return recentRestarts(s.Restarts, now, window)
}

// FormatBudget renders a restart budget as the daemon's flag takes it:
// "3/20m".
func FormatBudget(n int, window time.Duration) string {
	return fmt.Sprintf("%d/%s", n, shortDuration(window))
}

// ParseBudget parses a restart budget as FormatBudget renders it, "N/WINDOW"
// ("3/20m"): at most N restarts (1 to MaxRestartHistory) in any WINDOW (a
// positive duration).
func ParseBudget(s string) (n int, window time.Duration, err error) {
	count, dur, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("restart budget %q: want N/WINDOW, such as 3/20m", s)
	}
	if _, err := fmt.Sscanf(count, "%d", &n); err != nil || fmt.Sprint(n) != count || n < 1 || n > MaxRestartHistory {
		return 0, 0, fmt.Errorf("restart budget %q: want a count of restarts from 1 to %d before the /", s, MaxRestartHistory)
	}
	if window, err = time.ParseDuration(dur); err != nil || window <= 0 {
		return 0, 0, fmt.Errorf("restart budget %q: want a positive duration after the /, such as 20m", s)
	}
	return n, window, nil
}
