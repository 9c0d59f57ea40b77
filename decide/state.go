package decide

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// StateVersion is the version of the State layout that Decide writes.
const StateVersion = 1

// State is what Decide remembers between passes. The caller persists
// Decision.Next (it is JSON-serialisable) once the decision's actions have
// been handed to the actuators, and passes it back as Input.Previous; a daemon
// restart therefore resumes where it stopped, an emergency clamp included.
//
// The zero State means "first pass". A State is a plain value: safe for
// concurrent reads, not for concurrent writes.
type State struct {
	Version int `json:"version"`
	// Condition is the condition last published.
	Condition types.Condition `json:"condition"`
	// Outcome is where the current spec value settles once any change in
	// flight is done: Accepted, Infeasible or EmergencyReduced.
	Outcome types.Reason `json:"outcome,omitempty"`
	// Spec is Configured.Key() of the spec value the condition refers to.
	Spec string `json:"spec"`
	// Applied is the target currently enforced on the kubepods cgroup and
	// published in Node status; while LimitsFailed is set, its kubepods
	// limits are not known to hold.
	Applied resources.List `json:"applied,omitempty"`
	// LimitsFailed says why the last write of Applied's kubepods limits
	// failed, LimitsFailures how many writes in a row did, LimitsFailedAt
	// when the last one did; all empty once a write lands. While it is
	// set, the limits are written again (ReassertCgroups) every
	// LimitsRetryAfter(LimitsFailures). See LimitsWritten.
	LimitsFailed   string    `json:"limitsFailed,omitempty"`
	LimitsFailures int       `json:"limitsFailures,omitempty"`
	LimitsFailedAt time.Time `json:"limitsFailedAt,omitzero"`
	// Physical is the physical capacity the last pass used, memory held
	// steady within the jitter tolerance.
	Physical resources.List `json:"physical,omitempty"`
	// EmergencyTarget is the clamped target of the configured resources
	// while EmergencyReduced, and EmergencySpec the spec value it overrides;
	// both empty otherwise.
	EmergencyTarget resources.List `json:"emergencyTarget,omitempty"`
	EmergencySpec   string         `json:"emergencySpec,omitempty"`
	// Generation counts changes of Applied. Actions carry it; evictions are
	// reported against it.
	Generation int64 `json:"generation"`
	// Evicting is true while the eviction for Generation is not reported done.
	Evicting bool `json:"evicting,omitempty"`
	// InProgress describes the shrink in flight while Evicting.
	InProgress string `json:"inProgress,omitempty"`
	// Checking is true while the shrink of Generation waits for the
	// evictor's first report on it: until then nothing of the shrink is
	// published (Condition is still the one before it), so that a shrink
	// no pod has to leave for is published once, with the condition it
	// settles on, and one that evicts is published InProgress. ClampDue
	// says that its kubepods clamp comes with its status (Path A2: the
	// status is lowered first); a loss's (Path B) is written already.
	Checking bool `json:"checking,omitempty"`
	ClampDue bool `json:"clampDue,omitempty"`
	// ChangedAt is when Applied last changed.
	ChangedAt time.Time `json:"changedAt,omitempty"`
	// RestartAt is when Decide last asked for a kubelet restart, and
	// RestartPending is true until the kubelet is seen with the target (or
	// Policy.RestartTimeout passes).
	RestartAt      time.Time `json:"restartAt,omitempty"`
	RestartPending bool      `json:"restartPending,omitempty"`
	// Restarts are the times of the kubelet starts node-resized caused
	// within the restart budget's window, oldest first (at most
	// Policy.RestartBudget of them): the restarts Decide asked for and
	// the starts it was told of (Input.Starts: a rollback's, a
	// recovery's). The budget's history, kept across a daemon restart.
	Restarts []time.Time `json:"restarts,omitempty"`
	// RestartFailed says why the restart asked for at RestartAt failed,
	// and RestartFailedAt when that was found; no restart is asked for
	// again until Applied changes after it.
	RestartFailed   string    `json:"restartFailed,omitempty"`
	RestartFailedAt time.Time `json:"restartFailedAt,omitzero"`
	// Tainted is true while the Node is to carry the NoSchedule taint
	// TaintKey (Policy.TaintWhileStale): from a loss of hardware below
	// what was applied until the kubelet has adopted the target.
	Tainted bool `json:"tainted,omitempty"`
	// TaintFor names the resources whose loss the taint is for: the
	// kubelet's own view of each must be seen at the target before the
	// taint is lifted.
	TaintFor []string `json:"taintFor,omitempty"`
	// The planned release (see Release). ReleaseGeneration counts the
	// releases and give backs asked for; the releaser's reports name it.
	// Releasing is true from a Release action until its report is done,
	// GivingBack from a GiveBack action until its report is done.
	// ReleaseSpec is the request (its Key) the last release was for,
	// ReleaseShort what that release could not take offline, and
	// ReleasedPhysical the physical capacity when it ended: a release that
	// fell short is not tried again until the request or the hardware
	// changes. GaveBack says that a give back was asked for GiveBackSpec
	// (once per request).
	ReleaseGeneration int64          `json:"releaseGeneration,omitempty"`
	Releasing         bool           `json:"releasing,omitempty"`
	GivingBack        bool           `json:"givingBack,omitempty"`
	ReleaseSpec       string         `json:"releaseSpec,omitempty"`
	ReleaseShort      string         `json:"releaseShort,omitempty"`
	ReleasedPhysical  resources.List `json:"releasedPhysical,omitempty"`
	GaveBack          bool           `json:"gaveBack,omitempty"`
	GiveBackSpec      string         `json:"giveBackSpec,omitempty"`
}

func (s State) clone() State {
	s.Applied = s.Applied.Clone()
	s.Physical = s.Physical.Clone()
	s.EmergencyTarget = s.EmergencyTarget.Clone()
	s.Restarts = slices.Clone(s.Restarts)
	s.ReleasedPhysical = s.ReleasedPhysical.Clone()
	return s
}

// MaxClockSkew is how far in the future a time in a State may be and still
// be taken for the clock's error rather than a forged or corrupt file.
const MaxClockSkew = 5 * time.Minute

// Validate reports why s, read back from disk, is not a State that Decide
// could have written, or nil: a version other than StateVersion, a negative
// generation or resource amount, a time later than now plus MaxClockSkew,
// a restart history longer than MaxRestartHistory, out of order or with a
// zero time, or an eviction in flight towards a target that is not a list of known
// resources within the recorded physical capacity, with positive cpu and
// memory.
// It is a pure function of s and now.
func (s State) Validate(now time.Time) error {
	if s.Version != StateVersion {
		return fmt.Errorf("version %d, want %d", s.Version, StateVersion)
	}
	if s.Generation < 0 {
		return fmt.Errorf("generation %d is negative", s.Generation)
	}
	if s.ReleaseGeneration < 0 {
		return fmt.Errorf("releaseGeneration %d is negative", s.ReleaseGeneration)
	}
	if s.Releasing && s.GivingBack {
		return errors.New("releasing and giving back at once")
	}
	if (s.Releasing || s.GivingBack) && s.ReleaseGeneration == 0 {
		return errors.New("a release or give back in flight at release generation 0")
	}
	if s.LimitsFailures < 0 {
		return fmt.Errorf("limitsFailures %d is negative", s.LimitsFailures)
	}
	for _, l := range []struct {
		field string
		list  resources.List
	}{{"applied", s.Applied}, {"physical", s.Physical}, {"emergencyTarget", s.EmergencyTarget}, {"releasedPhysical", s.ReleasedPhysical}} {
		for _, name := range l.list.Names() {
			if v := l.list[name]; v < 0 {
				return fmt.Errorf("%s %s is negative (%d)", l.field, name, v)
			}
		}
	}
	latest := now.Add(MaxClockSkew)
	for _, t := range []struct {
		field string
		at    time.Time
	}{{"changedAt", s.ChangedAt}, {"restartAt", s.RestartAt}, {"restartFailedAt", s.RestartFailedAt}, {"limitsFailedAt", s.LimitsFailedAt}} {
		if t.at.After(latest) {
			return fmt.Errorf("%s %s is in the future (now %s)", t.field, t.at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
	}
	if n := len(s.Restarts); n > MaxRestartHistory {
		return fmt.Errorf("restarts: %d of them, more than the %d kept", n, MaxRestartHistory)
	}
	for i, at := range s.Restarts {
		switch {
		case at.IsZero():
			return fmt.Errorf("restarts[%d] is the zero time", i)
		case at.After(latest):
			return fmt.Errorf("restarts[%d] %s is in the future (now %s)", i, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		case i > 0 && at.Before(s.Restarts[i-1]):
			return fmt.Errorf("restarts[%d] %s is before restarts[%d]: not oldest first", i, at.UTC().Format(time.RFC3339), i-1)
		}
	}
	if (s.Checking || s.ClampDue) && !s.Evicting {
		return errors.New("checking the pods of a shrink that is not in flight")
	}
	if s.ClampDue && !s.Checking {
		return errors.New("a clamp due with no check of the pods in flight")
	}
	if s.Evicting {
		if s.Generation == 0 {
			return errors.New("evicting at generation 0, before any change was applied")
		}
		if len(s.Applied) == 0 {
			return errors.New("evicting with no applied capacity")
		}
		for _, name := range s.Applied.Names() {
			v := s.Applied[name]
			switch {
			case !resources.Known(name):
				return fmt.Errorf("evicting towards unknown resource %q", name)
			case v <= 0 && resources.QoSCompute(name):
				// What an eviction brings the pods within is their cpu
				// and memory; a machine without huge pages of a size
				// applies 0 of them, which is no sign of a bad file.
				return fmt.Errorf("evicting towards applied %s %d, want a positive amount", name, v)
			}
			if p, ok := s.Physical[name]; ok && v > p {
				return fmt.Errorf("evicting towards applied %s %s, more than the recorded physical %s",
					name, resources.Format(name, v), resources.Format(name, p))
			}
		}
	}
	return nil
}

// Retrying a failed write of the kubepods limits: the first retry after
// LimitsRetryMin, each next one after twice as long, at most LimitsRetryMax.
const (
	LimitsRetryMin = time.Second
	LimitsRetryMax = time.Minute
)

// LimitsRetryAfter is how long after the failures-th failed write in a row
// of the kubepods limits the next one is made. A pure function.
func LimitsRetryAfter(failures int) time.Duration {
	d := LimitsRetryMin
	for i := 1; i < failures && d < LimitsRetryMax; i++ {
		d *= 2
	}
	return min(d, LimitsRetryMax)
}

// LimitsWritten returns s after a write of Applied's kubepods limits made
// at now: with err nil the limits hold and LimitsFailed is cleared; with an
// error they are not recorded as holding: LimitsFailed says why, and the
// failure is counted. The caller that carried out a ClampCgroups,
// GrowCgroups or ReassertCgroups feeds its outcome into the decision's
// Next with it before persisting it. A pure function.
func (s State) LimitsWritten(err error, now time.Time) State {
	if err == nil {
		s.LimitsFailed, s.LimitsFailures, s.LimitsFailedAt = "", 0, time.Time{}
		return s
	}
	s.LimitsFailed, s.LimitsFailedAt = err.Error(), now
	s.LimitsFailures++
	return s
}
