package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/node-resized/node-resized/internal/fault"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

const (
	// defaultStopTimeout is systemd's DefaultTimeoutStopSec, for a unit
	// whose own is unknown or infinite.
	defaultStopTimeout = 90 * time.Second
	// stopMargin is added to the unit's stop timeout to bound the wait
	// for the stop job's result: systemd ends the stop by then (SIGKILL
	// at the timeout), so a result not seen by then was lost.
	stopMargin = 15 * time.Second
	// startWait bounds the wait for the start job's result. The start is
	// queued at once; a result not seen leaves the stop record, which
	// Recover removes once the unit runs.
	startWait = time.Minute
	// stateWait bounds each read of the unit's state on the way to the
	// start.
	stateWait = 10 * time.Second
	// DefaultRecoverInterval is how often Run looks for a kubelet left
	// stopped.
	DefaultRecoverInterval = 10 * time.Second
)

// RecoveryControl is what Recover asks of systemd beyond UnitControl:
// a start that never replaces another job (a stop someone queued, a
// system shutdown), and the system's state. *systemd.Client satisfies
// it; with a UnitControl that does not, Recover starts with Start.
type RecoveryControl interface {
	StartWithoutReplacing(ctx context.Context, unit string) (systemd.JobResult, error)
	SystemState(ctx context.Context) (string, error)
}

var _ RecoveryControl = (*systemd.Client)(nil)

// Recovery is what one Recover pass found and did.
type Recovery string

const (
	// RecoveryNone: no stop record, nothing to do.
	RecoveryNone Recovery = ""
	// RecoveryCleared: a record from another boot, for another unit,
	// unreadable, or for a unit that runs again; removed, nothing
	// started.
	RecoveryCleared Recovery = "cleared"
	// RecoveryWaiting: the unit is between states (its stop or start
	// still running), a restart of this process is under way, or the
	// state could not be read; the record is kept for the next pass.
	RecoveryWaiting Recovery = "waiting"
	// RecoveryShutdown: the system is shutting down; nothing started.
	RecoveryShutdown Recovery = "shutdown"
	// RecoveryStarted: the unit was stopped; its checkpoints were made
	// safe for the machine as it is and it was started.
	RecoveryStarted Recovery = "started"
)

func (r *Restarter) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func (r *Restarter) bootID() (string, error) {
	p := r.BootIDPath
	if p == "" {
		p = "/proc/sys/kernel/random/boot_id"
	}
	return readBootID(p)
}

// stopped reports whether the unit runs no process and no job is taking
// it anywhere: inactive, failed, or waiting for systemd's automatic
// restart (Restart=, SubState auto-restart).
func stopped(st systemd.UnitState) bool {
	return st.ActiveState == "inactive" || st.ActiveState == "failed" || strings.HasPrefix(st.SubState, "auto-restart")
}

// stopWait bounds the wait for the result of a stop of the unit st.
func stopWait(st systemd.UnitState) time.Duration {
	t := st.TimeoutStop
	if t <= 0 {
		t = defaultStopTimeout
	}
	return t + stopMargin
}

// stopRewriteStart is Restart's path when a checkpoint must change: it
// records the stop durably, stops the unit, rewrites both checkpoints for
// snap and starts the unit. Once the stop is queued it never returns
// without having queued a start: a stop error, a stop job result other
// than done, a lost reply (the wait is bounded by the unit's stop timeout
// plus a margin, not by ctx) and a rewrite error all end in a start; ctx
// ending does not cut these steps short. The checkpoints are rewritten
// only when the unit is seen stopped. The record is removed once the
// start job is done and the unit active.
func (r *Restarter) stopRewriteStart(ctx context.Context, unit string, snap *topology.Snapshot) (systemd.JobResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.Systemd.UnitState(ctx, unit)
	if err != nil {
		return "", fmt.Errorf("restart %s: %w", unit, err)
	}
	if !st.Active() {
		return "", fmt.Errorf("restart %s: %w (ActiveState %q, SubState %q)", unit, systemd.ErrUnitNotActive, st.ActiveState, st.SubState)
	}
	if err := r.recordStop(unit); err != nil {
		return "", fmt.Errorf("restart %s: nothing stopped: %w", unit, err)
	}
	bg := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(bg, stopWait(st))
	res, err := r.Systemd.Stop(sctx, unit)
	cancel()
	if errors.Is(err, systemd.ErrUnitNotActive) {
		// Refused before any job was queued: nothing to start.
		return "", errors.Join(fmt.Errorf("restart %s: %w", unit, err), r.dropRecord())
	}
	var stopErr error
	switch {
	case err != nil:
		stopErr = fmt.Errorf("stop %s before rewriting its checkpoints: %w", unit, err)
	case res != systemd.JobDone:
		stopErr = fmt.Errorf("stop %s before rewriting its checkpoints: job %s", unit, res)
	default:
		fault.Point("kubelet-stopped")
	}
	return r.rewriteStart(bg, unit, snap, stopErr)
}

// rewriteStart rewrites the checkpoints for snap when the unit is seen
// stopped, then starts it whatever came before. stopErr is how the stop
// went wrong, if it did: moot when the unit is stopped all the same.
func (r *Restarter) rewriteStart(ctx context.Context, unit string, snap *topology.Snapshot, stopErr error) (systemd.JobResult, error) {
	sctx, cancel := context.WithTimeout(ctx, stateWait)
	st, err := r.Systemd.UnitState(sctx, unit)
	cancel()
	var rwErr error
	switch {
	case err != nil:
		rwErr = errors.Join(stopErr, fmt.Errorf("checkpoints not rewritten: %w", err))
	case !stopped(st):
		rwErr = errors.Join(stopErr, fmt.Errorf("checkpoints not rewritten: %s is %s (%s), not stopped", unit, st.ActiveState, st.SubState))
	default:
		if stopErr != nil {
			r.log().Warn("the kubelet's stop went wrong, but it is stopped: rewriting its checkpoints", "unit", unit, "err", stopErr)
		}
		if err := r.rewrite(snap); err != nil {
			rwErr = fmt.Errorf("rewrite the checkpoints: %w", err)
		}
	}
	fault.Point("kubelet-before-start")
	// The start is queued whatever happens; its result is not awaited
	// once this process stops: node-resized.service is ordered before
	// kubelet.service, so systemd runs the start only after the daemon's
	// own stop job, which waits for this.
	sctx, cancel = context.WithTimeout(ctx, startWait)
	sctx, cancelDown := r.untilDown(sctx)
	res, err := r.Systemd.Start(sctx, unit)
	cancelDown()
	cancel()
	if err == nil && res == systemd.JobDone {
		r.clearIfActive(ctx, unit)
	}
	if err != nil && r.stopping() {
		err = fmt.Errorf("start %s queued; node-resized is stopping, so its result is not awaited (%w)", unit, err)
	}
	if rwErr != nil {
		rwErr = fmt.Errorf("restart %s: %w; started it with its checkpoints as they were", unit, rwErr)
	}
	return res, errors.Join(rwErr, err)
}

func (r *Restarter) downChan() chan struct{} {
	r.downOnce.Do(func() { r.down = make(chan struct{}) })
	return r.down
}

// stopping reports whether Run has returned: the daemon is stopping.
func (r *Restarter) stopping() bool {
	select {
	case <-r.downChan():
		return true
	default:
		return false
	}
}

// untilDown returns ctx, also canceled once Run returns.
func (r *Restarter) untilDown(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	down := r.downChan()
	go func() {
		select {
		case <-down:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// recordStop writes the stop record for unit.
func (r *Restarter) recordStop(unit string) error {
	if r.StopRecord == "" {
		return nil
	}
	boot, err := r.bootID()
	if err != nil {
		return err
	}
	return writeStopRecord(r.StopRecord, StopRecord{Unit: unit, At: time.Now(), BootID: boot, PID: os.Getpid()})
}

func (r *Restarter) dropRecord() error {
	if r.StopRecord == "" {
		return nil
	}
	return removeRecord(r.StopRecord)
}

// clearIfActive removes the stop record when the unit is active.
func (r *Restarter) clearIfActive(ctx context.Context, unit string) {
	sctx, cancel := context.WithTimeout(ctx, stateWait)
	defer cancel()
	if st, err := r.Systemd.UnitState(sctx, unit); err != nil || !st.Active() {
		return // kept: Recover removes it once the unit runs
	}
	if err := r.dropRecord(); err != nil {
		r.log().Warn("remove the kubelet's stop record", "err", err)
	}
}

// Recover starts the unit when a stop record says node-resized stopped it
// in this boot and it is still stopped: the checkpoints are first made
// safe for the machine as it is now (Machine; the same planner as a
// restart, so a rewrite already done changes nothing), then the unit is
// started without replacing any job, and never while the system shuts
// down. A record from another boot, for another unit, unreadable, or for
// a unit started since, is removed. It returns what it did; an error says
// what went wrong on the way (a unit started with its checkpoints as they
// were is RecoveryStarted with an error). A start it made is told to
// Started, or noted in StartNotes.
func (r *Restarter) Recover(ctx context.Context) (Recovery, error) {
	if r.StopRecord == "" {
		return RecoveryNone, nil
	}
	if !r.mu.TryLock() {
		return RecoveryWaiting, nil // a restart of ours runs: it starts the unit
	}
	defer r.mu.Unlock()
	unit := r.unit()
	rec, err := ReadStopRecord(r.StopRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return RecoveryNone, nil
	}
	if err == nil && rec.Unit != unit {
		err = fmt.Errorf("%s: a stop of %s, not of %s", r.StopRecord, rec.Unit, unit)
	}
	if err != nil {
		return RecoveryCleared, errors.Join(fmt.Errorf("unusable stop record, removed: %w", err), r.dropRecord())
	}
	boot, err := r.bootID()
	if err != nil {
		return RecoveryWaiting, err
	}
	if rec.BootID != boot {
		return RecoveryCleared, r.dropRecord()
	}
	st, err := r.Systemd.UnitState(ctx, unit)
	if err != nil {
		return RecoveryWaiting, err
	}
	switch {
	case st.ActiveEnter.After(rec.At):
		// Started since the stop (and perhaps stopped again by
		// someone else): the record is void.
		return RecoveryCleared, r.dropRecord()
	case st.Active():
		// A stop that never happened, or one still queued: that ends
		// within its bound.
		if time.Since(rec.At) > stopWait(st) {
			return RecoveryCleared, r.dropRecord()
		}
		return RecoveryWaiting, nil
	case !stopped(st):
		return RecoveryWaiting, nil // activating or deactivating: a job runs
	}
	rc, _ := r.Systemd.(RecoveryControl)
	if rc != nil {
		if s, err := rc.SystemState(ctx); err == nil && s == "stopping" {
			return RecoveryShutdown, nil
		}
	}
	var rwErr error
	if r.Machine != nil {
		snap, err := r.Machine()
		if err == nil {
			err = r.rewrite(snap)
		}
		if err != nil {
			rwErr = fmt.Errorf("checkpoints not made safe, started as they were: %w", err)
		}
	}
	var res systemd.JobResult
	at := time.Now()
	wait := r.StartWait
	if wait <= 0 {
		wait = startWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	if rc != nil {
		res, err = rc.StartWithoutReplacing(wctx, unit)
	} else {
		res, err = r.Systemd.Start(wctx, unit)
	}
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// Queued, its result not awaited (a job ordered after one
		// still running): the record goes once the unit is active.
		return RecoveryStarted, errors.Join(rwErr, r.started(at))
	}
	if err == nil && res != systemd.JobDone {
		err = fmt.Errorf("start %s: job %s", unit, res)
	}
	if err != nil {
		return RecoveryWaiting, errors.Join(rwErr, err)
	}
	r.clearIfActive(ctx, unit)
	return RecoveryStarted, errors.Join(rwErr, r.started(at))
}

// Run looks for a kubelet left stopped (Recover) at once and then every
// DefaultRecoverInterval until ctx is done. It logs what it does and
// tells Recovered of each unit it started; before each look it tells
// Started of the starts a recovery noted in StartNotes.
//
// Its return tells a restart under way that the daemon is stopping: the
// restart then queues its start and does not wait for the result.
func (r *Restarter) Run(ctx context.Context) error {
	defer close(r.downChan())
	t := time.NewTicker(DefaultRecoverInterval)
	defer t.Stop()
	var last, lastNotes string // the last errors logged, logged again only when they change
	for {
		if err := r.takeStartNotes(); err != nil && err.Error() != lastNotes {
			r.log().Warn("the kubelet starts a recovery noted could not all be read; removed them", "err", err)
			lastNotes = err.Error()
		}
		rec, _ := ReadStopRecord(r.StopRecord) // for the log
		got, err := r.Recover(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case got == RecoveryStarted:
			r.log().Warn("started the kubelet that node-resized had stopped and not started again",
				"unit", r.unit(), "stopped_at", rec.At, "stopped_by_pid", rec.PID, "err", err)
			if r.Recovered != nil {
				r.Recovered(rec, err)
			}
		case got == RecoveryCleared:
			r.log().Info("removed the kubelet's stop record: nothing to start", "unit", r.unit(), "stopped_at", rec.At, "err", err)
		case err != nil && err.Error() != last:
			r.log().Warn("recover the kubelet", "unit", r.unit(), "state", string(got), "err", err)
		}
		last = ""
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
