package systemd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/node-resized/node-resized/internal/fault"
)

// JobResult is the result systemd reports for a job in its JobRemoved
// signal.
type JobResult string

// The results systemd reports (systemd's job_result_to_string).
const (
	JobDone       JobResult = "done"       // the job did what it was asked
	JobCanceled   JobResult = "canceled"   // another job replaced this one
	JobTimeout    JobResult = "timeout"    // the unit's start timed out
	JobFailed     JobResult = "failed"     // the unit failed to start
	JobDependency JobResult = "dependency" // a required unit failed
	JobSkipped    JobResult = "skipped"    // a condition was not met
)

// callTimeout bounds a job's method call, D-Bus's default reply timeout.
const callTimeout = 25 * time.Second

// ErrUnitNotActive is wrapped by the error Restart and Stop return when
// the unit is not active: a unit that is stopped, failed or still starting
// is left alone.
var ErrUnitNotActive = errors.New("unit is not active")

// Restart restarts the unit (RestartUnit, mode "replace") and waits for
// the job's result, which it returns: JobDone when systemd started the
// unit again, another JobResult when the job ended otherwise. It refuses,
// with an error that wraps ErrUnitNotActive, when the unit is not active.
// An error is returned when the bus cannot be reached, when the connection
// is lost before the result arrives (wrapping ErrBusGone), or when ctx ends
// first; the restart may then still happen.
func (c *Client) Restart(ctx context.Context, unit string) (JobResult, error) {
	if err := c.requireActive(ctx, unit, "restart"); err != nil {
		return "", err
	}
	return c.job(ctx, unit, "restart", (*sddbus.Conn).RestartUnitContext)
}

// Stop stops the unit (StopUnit, mode "replace") and waits for the job's
// result, as Restart does; it too refuses a unit that is not active.
func (c *Client) Stop(ctx context.Context, unit string) (JobResult, error) {
	if err := c.requireActive(ctx, unit, "stop"); err != nil {
		return "", err
	}
	return c.job(ctx, unit, "stop", (*sddbus.Conn).StopUnitContext)
}

// Start starts the unit (StartUnit, mode "replace") and waits for the
// job's result, as Restart does. It starts a unit in any state.
func (c *Client) Start(ctx context.Context, unit string) (JobResult, error) {
	return c.job(ctx, unit, "start", (*sddbus.Conn).StartUnitContext)
}

// requireActive returns an error wrapping ErrUnitNotActive when the unit
// is not active.
func (c *Client) requireActive(ctx context.Context, unit, what string) error {
	st, err := c.UnitState(ctx, unit)
	if err != nil {
		return err
	}
	if !st.Active() {
		return fmt.Errorf("%s %s: %w (ActiveState %q, SubState %q)", what, unit, ErrUnitNotActive, st.ActiveState, st.SubState)
	}
	return nil
}

// job queues a job with call and waits for its result. The call itself
// is not cut short by ctx (it has its own bound, callTimeout), so that a
// caller whose ctx ends at that moment knows the job was queued when no
// call error is returned; ctx ends the wait for the result.
func (c *Client) job(ctx context.Context, unit, what string,
	call func(*sddbus.Conn, context.Context, string, string, chan<- string) (int, error)) (JobResult, error) {
	conn, err := c.connect()
	if err != nil {
		return "", err
	}
	done := make(chan string, 1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	_, err = call(conn, cctx, unit, "replace", done)
	cancel()
	if err != nil {
		return "", c.callError(conn, what+" "+unit, err)
	}
	fault.Point(strings.TrimSuffix(unit, ".service") + "-" + what + "-queued") // kubelet-stop-queued
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return JobResult(r), nil
		case <-ctx.Done():
			return "", fmt.Errorf("%s %s: waiting for the job's result: %w", what, unit, ctx.Err())
		case <-tick.C:
			if !conn.Connected() {
				return "", fmt.Errorf("%s %s: waiting for the job's result: %w", what, unit, ErrBusGone)
			}
		}
	}
}
