package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// TestStateValidate: a State as Decide writes it passes; each value out of
// range is named in the error.
func TestStateValidate(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	good := func() State {
		return State{
			Version:    StateVersion,
			Generation: 4,
			Applied:    resources.List{"cpu": 2000, "memory": 4 << 30},
			Physical:   resources.List{"cpu": 4000, "memory": 8 << 30},
			Evicting:   true,
			ChangedAt:  now.Add(-time.Hour),
			RestartAt:  now.Add(-time.Minute),
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*State)
		want   string // in the error; "" for no error
	}{
		{name: "as written", change: func(*State) {}},
		{name: "zero times", change: func(s *State) { s.ChangedAt, s.RestartAt = time.Time{}, time.Time{} }},
		{name: "within the clock skew", change: func(s *State) { s.RestartAt = now.Add(MaxClockSkew) }},
		{name: "not evicting, nothing applied", change: func(s *State) { s.Evicting, s.Applied, s.Generation = false, nil, 0 }},
		{name: "evicting, no physical recorded", change: func(s *State) { s.Physical = nil }},
		{name: "version 0", change: func(s *State) { s.Version = 0 }, want: "version 0"},
		{name: "newer version", change: func(s *State) { s.Version = StateVersion + 1 }, want: "version 2"},
		{name: "negative generation", change: func(s *State) { s.Generation = -5 }, want: "generation -5"},
		{name: "negative applied", change: func(s *State) { s.Evicting = false; s.Applied["memory"] = -1 }, want: "applied memory is negative"},
		{name: "negative physical", change: func(s *State) { s.Physical["cpu"] = -1000 }, want: "physical cpu is negative"},
		{name: "negative emergency target", change: func(s *State) { s.EmergencyTarget = resources.List{"cpu": -1} }, want: "emergencyTarget cpu"},
		{name: "restart in 2099", change: func(s *State) { s.RestartAt = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) }, want: "restartAt 2099-01-01T00:00:00Z is in the future"},
		{name: "changed beyond the skew", change: func(s *State) { s.ChangedAt = now.Add(MaxClockSkew + time.Second) }, want: "changedAt"},
		{name: "restart failed in the future", change: func(s *State) { s.RestartFailedAt = now.Add(24 * time.Hour) }, want: "restartFailedAt"},
		{name: "a restart history", change: func(s *State) {
			s.Restarts = []time.Time{now.Add(-10 * time.Minute), now.Add(-time.Minute), now.Add(MaxClockSkew)}
		}},
		{name: "a restart in the future", change: func(s *State) { s.Restarts = []time.Time{now.Add(-time.Minute), now.Add(MaxClockSkew + time.Second)} },
			want: "restarts[1] 2026-03-01T12:05:01Z is in the future"},
		{name: "a restart at the zero time", change: func(s *State) { s.Restarts = []time.Time{{}} }, want: "restarts[0] is the zero time"},
		{name: "restarts out of order", change: func(s *State) { s.Restarts = []time.Time{now.Add(-time.Minute), now.Add(-time.Hour)} },
			want: "restarts[1] 2026-03-01T11:00:00Z is before restarts[0]"},
		{name: "too many restarts", change: func(s *State) {
			for i := range MaxRestartHistory + 1 {
				s.Restarts = append(s.Restarts, now.Add(time.Duration(i-MaxRestartHistory)*time.Second))
			}
		}, want: "restarts: 65 of them"},
		{name: "evicting at generation 0", change: func(s *State) { s.Generation = 0 }, want: "generation 0"},
		{name: "evicting, nothing applied", change: func(s *State) { s.Applied = nil }, want: "no applied capacity"},
		{name: "evicting on a machine without huge pages", change: func(s *State) {
			s.Applied["hugepages-1Gi"], s.Applied["hugepages-2Mi"], s.Physical["hugepages-1Gi"], s.Physical["hugepages-2Mi"] = 0, 0, 0, 0
		}},
		{name: "evicting towards zero cpu", change: func(s *State) { s.Applied["cpu"] = 0 }, want: "applied cpu 0"},
		{name: "evicting towards an unknown resource", change: func(s *State) { s.Applied["bogus"] = 1 }, want: `unknown resource "bogus"`},
		{name: "a planned shrink's pods looked at", change: func(s *State) { s.Checking, s.ClampDue = true, true }},
		{name: "checking, not evicting", change: func(s *State) { s.Evicting, s.Checking = false, true }, want: "checking the pods of a shrink that is not in flight"},
		{name: "a clamp due, not checking", change: func(s *State) { s.ClampDue = true }, want: "a clamp due with no check"},
		{name: "evicting beyond the machine", change: func(s *State) { s.Applied["memory"] = 16 << 30 }, want: "more than the recorded physical 8Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.change(&s)
			err := s.Validate(now)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
