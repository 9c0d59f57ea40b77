package systemd

import (
	"context"
	"fmt"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// StartWithoutReplacing starts the unit with job mode "fail" and waits for
// the job's result, as Start does. systemd refuses the job (an error)
// when it would replace a job pending for the unit or for a unit it
// conflicts with: a stop queued for it, or a system shutdown (every unit
// with default dependencies conflicts with shutdown.target). It is the
// start of a recovery, which must never undo someone else's stop.
func (c *Client) StartWithoutReplacing(ctx context.Context, unit string) (JobResult, error) {
	return c.job(ctx, unit, "start", func(conn *sddbus.Conn, ctx context.Context, unit, _ string, ch chan<- string) (int, error) {
		return conn.StartUnitContext(ctx, unit, "fail", ch)
	})
}

// SystemState is the manager's SystemState: "initializing", "starting",
// "running", "degraded", "maintenance", "stopping" (a shutdown is under
// way) or "offline".
func (c *Client) SystemState(ctx context.Context) (string, error) {
	conn, err := c.connect()
	if err != nil {
		return "", err
	}
	p, err := conn.SystemStateContext(ctx)
	if err != nil {
		return "", c.callError(conn, "read the system state", err)
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("read the system state: got %v", p.Value)
	}
	return s, nil
}

// usecDuration converts systemd's durations in µs; infinity
// (UINT64_MAX) and anything unreadable are 0.
func usecDuration(v any) time.Duration {
	us, ok := v.(uint64)
	if !ok || us == 0 || us >= uint64(1<<63-1)/1000 {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}
