package systemd

import (
	"context"
	"time"
)

// UnitState is what systemd knows of a service unit. It is a plain value.
type UnitState struct {
	Unit        string `json:"unit"`
	LoadState   string `json:"loadState"`   // "loaded", "not-found", …
	ActiveState string `json:"activeState"` // "active", "activating", "failed", …
	SubState    string `json:"subState"`    // "running", "auto-restart", …
	// MainPID is the service's main process, 0 when none runs.
	MainPID uint32 `json:"mainPID"`
	// NRestarts counts systemd's automatic restarts of the service (its
	// Restart= setting), not the restarts asked for over D-Bus.
	NRestarts uint32 `json:"nRestarts"`
	// ActiveEnter is when the unit last became active, MainStart when its
	// main process last started; zero when systemd reports none.
	ActiveEnter time.Time `json:"activeEnter,omitzero"`
	MainStart   time.Time `json:"mainStart,omitzero"`
	// DropInPaths are the unit's drop-in files, as systemd loaded them.
	DropInPaths []string `json:"dropInPaths,omitempty"`
	// TimeoutStop is the service's TimeoutStopSec (0: none or unknown).
	TimeoutStop time.Duration `json:"timeoutStop,omitzero"`
}

// Active reports whether the unit is active (ActiveState "active").
func (u UnitState) Active() bool { return u.ActiveState == "active" }

// Started returns when the running service started: its main process's
// start, or when that is unknown the time the unit became active.
func (u UnitState) Started() time.Time {
	if !u.MainStart.IsZero() {
		return u.MainStart
	}
	return u.ActiveEnter
}

// UnitState reads the unit's state: the Unit interface's ActiveState,
// SubState, LoadState, ActiveEnterTimestamp and DropInPaths, and the Service interface's
// MainPID, ExecMainStartTimestamp and NRestarts.
func (c *Client) UnitState(ctx context.Context, unit string) (UnitState, error) {
	conn, err := c.connect()
	if err != nil {
		return UnitState{}, err
	}
	up, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return UnitState{}, c.callError(conn, "read the state of "+unit, err)
	}
	sp, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return UnitState{}, c.callError(conn, "read the service properties of "+unit, err)
	}
	st := UnitState{Unit: unit}
	st.LoadState, _ = up["LoadState"].(string)
	st.ActiveState, _ = up["ActiveState"].(string)
	st.SubState, _ = up["SubState"].(string)
	st.ActiveEnter = usecTime(up["ActiveEnterTimestamp"])
	st.DropInPaths, _ = up["DropInPaths"].([]string)
	st.MainPID, _ = sp["MainPID"].(uint32)
	st.NRestarts, _ = sp["NRestarts"].(uint32)
	st.MainStart = usecTime(sp["ExecMainStartTimestamp"])
	st.TimeoutStop = usecDuration(sp["TimeoutStopUSec"])
	return st, nil
}

// usecTime converts systemd's timestamps, µs since the epoch with 0 for
// never.
func usecTime(v any) time.Time {
	us, ok := v.(uint64)
	if !ok || us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us))
}
