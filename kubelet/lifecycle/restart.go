package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/node-resized/node-resized/internal/fault"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

// UnitControl is what Restarter needs of systemd: its unit's state and
// jobs, each waited for. *systemd.Client satisfies it.
type UnitControl interface {
	UnitState(ctx context.Context, unit string) (systemd.UnitState, error)
	Restart(ctx context.Context, unit string) (systemd.JobResult, error)
	Stop(ctx context.Context, unit string) (systemd.JobResult, error)
	Start(ctx context.Context, unit string) (systemd.JobResult, error)
}

var _ UnitControl = (*systemd.Client)(nil)

// Restarter restarts the kubelet into a changed machine, with its CPU and
// memory manager checkpoints made safe first, so that the kubelet's static
// policies accept them when it starts. Its fields are set before first use
// and not changed afterwards; it is then safe for concurrent use.
type Restarter struct {
	// Unit is the kubelet's unit (kubelet.DefaultUnit when empty) and Systemd the
	// client that restarts it.
	Unit    string
	Systemd UnitControl
	// CPUManagerCheckpoint and MemoryManagerCheckpoint are the
	// checkpoints' paths (the defaults when empty); a missing one needs no
	// rewrite.
	CPUManagerCheckpoint, MemoryManagerCheckpoint string
	// ReservedCPUs and StrictReservation are the kubelet's
	// reservedSystemCPUs and its strict-cpu-reservation option;
	// ReservedMemory its reservedMemory (nil: as the checkpoint has it).
	ReservedCPUs      topology.CPUSet
	StrictReservation bool
	ReservedMemory    map[int]map[string]uint64

	// StopRecord is the stop record's path (StopRecordFile in the
	// daemon's state directory): written before the kubelet is stopped,
	// removed once it runs again (empty: none is kept, and Recover has
	// nothing to go on). BootIDPath is the kernel's boot id
	// (/proc/sys/kernel/random/boot_id when empty). Machine is the
	// machine as it is now, for Recover's rewrite (nil: Recover starts the
	// unit with the checkpoints as they are). Recovered, when set, is
	// told of each unit Recover started. Logger is where the stop path and
	// recovery log (slog's default when nil).
	StopRecord string
	BootIDPath string
	Machine    func() (*topology.Snapshot, error)
	Recovered  func(rec StopRecord, err error)
	Logger     *slog.Logger
	// Started, when set, is told of each start of the kubelet Recover
	// makes, and of each one a recovery with no one to tell noted in
	// StartNotes (Run takes those notes at each pass, and removes them):
	// the daemon counts them in its restart budget. When nil (`node-resized
	// kubelet-recover`, which runs while the daemon does not), Recover
	// notes each start it makes in StartNotes (StartNotesFile in the
	// state directory; empty: nowhere). The start comes first; the call
	// or the note follows and never holds it up.
	Started    func(at time.Time)
	StartNotes string
	// StartWait bounds Recover's wait for its start job's result
	// (a minute when 0); a start not done by then is queued all the same.
	StartWait time.Duration

	mu       sync.Mutex // serializes the stop/rewrite/start path and Recover
	downOnce sync.Once  // makes down
	down     chan struct{}
	// Rollback is how a start into rewritten checkpoints is watched and
	// rolled back (rollback.go).
	Rollback Rollback
}

// NewRestarter returns a restarter for the kubelet whose configuration is
// cfg and whose root directory is rootDir.
func NewRestarter(sd UnitControl, unit, rootDir string, cfg *kubelet.Config) (*Restarter, error) {
	c, err := NewCheckpoints(rootDir, cfg)
	if err != nil {
		return nil, err
	}
	return &Restarter{Unit: unit, Systemd: sd,
		CPUManagerCheckpoint: c.CPUManager, MemoryManagerCheckpoint: c.MemoryManager,
		ReservedCPUs: c.ReservedCPUs, StrictReservation: c.StrictReservation, ReservedMemory: c.ReservedMemory,
	}, nil
}

// hasPrestart reports whether the unit has the pre-start drop-in; when its
// state cannot be read, it says so and reports false.
func (r *Restarter) hasPrestart(ctx context.Context, unit string) bool {
	st, err := r.Systemd.UnitState(ctx, unit)
	if err != nil {
		r.log().Warn("cannot tell whether the kubelet has node-resized's pre-start; restarting it with a stop and a start", "unit", unit, "err", err)
		return false
	}
	return HasPrestart(st)
}

func (r *Restarter) unit() string {
	if r.Unit == "" {
		return kubelet.DefaultUnit
	}
	return r.Unit
}

// plan plans both checkpoints for snap.
func (r *Restarter) plan(snap *topology.Snapshot) (checkpointPlans, error) {
	return Checkpoints{CPUManager: r.CPUManagerCheckpoint, MemoryManager: r.MemoryManagerCheckpoint,
		ReservedCPUs: r.ReservedCPUs, StrictReservation: r.StrictReservation, ReservedMemory: r.ReservedMemory}.plan(snap)
}

// Check reports whether the kubelet may be restarted into the machine
// snap: nil when both checkpoints can be made safe (or need nothing), an
// error otherwise; one that wraps checkpoint.ErrInfeasible says what an
// operator must do first. It only reads.
func (r *Restarter) Check(snap *topology.Snapshot) error {
	_, err := r.plan(snap)
	if errors.Is(err, checkpoint.ErrUnknownLayout) {
		return fmt.Errorf("%w (a kubelet newer than %s may write it): node-resized never rewrites such a file, so it leaves the kubelet as it is", err, kubelet.KnownVersions)
	}
	return err
}

// Restart restarts the kubelet into the machine snap and waits for the
// result. When its unit has the pre-start drop-in (PrestartDropIn), that
// is one restart job: the pre-start rewrites the checkpoints while the
// kubelet is stopped, inside systemd's job, which systemd completes even
// if node-resized dies meanwhile. Otherwise, when a checkpoint must be
// rewritten the order is stop, rewrite (planned again on the files the
// stopped kubelet left), start, so that no running kubelet writes the old
// state over the new one (stopRewriteStart: once the stop is queued, it
// always ends in a start); with nothing to rewrite, one restart job. In
// both ways a checkpoint no plan can make safe is an error and no job. The
// unit must be active.
func (r *Restarter) Restart(ctx context.Context, snap *topology.Snapshot) (systemd.JobResult, error) {
	unit := r.unit()
	began := r.beginRestart()
	p, err := r.plan(snap)
	if err != nil {
		return "", fmt.Errorf("restart %s: %w", unit, err)
	}
	if r.hasPrestart(ctx, unit) {
		r.log().Info("restarting the kubelet in one job: its pre-start makes the checkpoints fit while it is stopped",
			"unit", unit, "path", "one-job", "dropin", PrestartDropIn, "rewrite", p.changed())
		res, err := r.Systemd.Restart(ctx, unit)
		return r.afterStart(ctx, began, res, err)
	}
	r.log().Info("restarting the kubelet without node-resized's pre-start (its drop-in "+PrestartDropIn+" is absent or masked)",
		"unit", unit, "path", map[bool]string{true: "stop-rewrite-start", false: "one-job"}[p.changed()])
	if !p.changed() {
		res, err := r.Systemd.Restart(ctx, unit)
		return r.afterStart(ctx, began, res, err)
	}
	res, err := r.stopRewriteStart(ctx, unit, snap)
	return r.afterStart(ctx, began, res, err)
}

// rewrite plans both checkpoints again and applies the plans.
func (r *Restarter) rewrite(snap *topology.Snapshot) error {
	p, err := r.plan(snap)
	if err != nil {
		return err
	}
	if p.cpu != nil {
		if err := p.cpu.Apply(); err != nil {
			return err
		}
	}
	fault.Point("checkpoint-between")
	if p.mem != nil {
		if err := p.mem.Apply(); err != nil {
			return err
		}
	}
	return nil
}
