package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/types"
)

// Rollback configures how a kubelet started into rewritten checkpoints is
// watched, and the rollback when it refuses them. The zero value takes
// the defaults and writes no pre-start hold.
type Rollback struct {
	// HoldPath is the pre-start hold written after a rollback
	// (<state dir>/kubelet-prestart-hold.json): while the checkpoints are
	// as the rollback left them, the kubelet's pre-start rewrites nothing.
	HoldPath string
	// Window is how long a start is watched (default 2m; it ends as soon
	// as the kubelet is seen up): the kubelet refuses a checkpoint within
	// seconds of its start (11 s on a loaded test VM, but 80 s once on a
	// CPU-starved one, past the former 1m window). Poll is how often
	// (default 500ms).
	Window, Poll time.Duration
	// Journal reads the unit's journal from since (default
	// systemd.ReadJournal).
	Journal func(ctx context.Context, unit string, since time.Time) ([]systemd.JournalEntry, error)
}

// HoldFile is the pre-start hold's file name in node-resized's state
// directory: written after a rollback restored the checkpoints' backups,
// it keeps the pre-start from rewriting them again while they are those
// files.
const HoldFile = "kubelet-prestart-hold.json"

// Defaults of Rollback.
const (
	defaultRollbackWindow = 2 * time.Minute
	defaultRollbackPoll   = 500 * time.Millisecond
	// journalEntries caps the kubelet's journal read per look.
	journalEntries = 2000
	// backupSlack is how far before a restart began a backup may be dated
	// and still count as written by it (file times come from a coarser
	// clock).
	backupSlack = time.Second
)

// beginRestart returns when a restart begins, and removes the pre-start
// hold of an earlier rollback: it holds the files back from the rewrite
// the kubelet refused, and a restart asked for now is for another change
// (a refused one is not retried), whose rewrite the pre-start must make.
func (r *Restarter) beginRestart() time.Time {
	if r.Rollback.HoldPath != "" {
		_ = os.Remove(r.Rollback.HoldPath)
	}
	return time.Now()
}

// afterStart ends a restart that began at began (this host's clock) and
// whose start job gave res, err: when the restart rewrote a checkpoint (a
// backup dated since began: by node-resized, or by the kubelet's
// pre-start), it watches the kubelet for Rollback.Window. If the kubelet
// comes up, or nothing was rewritten, the restart ends as it was. If the
// kubelet refuses a rewritten checkpoint (judgeStart, on its unit and its
// journal) the rewrite is rolled back: that file is restored from its
// backup (only a usable backup is used), the pre-start hold written, and
// the kubelet started again in one job (startAgain: never a stop, so no
// window where node-resized leaves it stopped); the restart then ends with a *types.CheckpointRollback, which
// says when each start again was asked for (the restart budget counts them). A file
// not rewritten by this restart is never restored, and each at most once.
func (r *Restarter) afterStart(ctx context.Context, began time.Time, res systemd.JobResult, err error) (systemd.JobResult, error) {
	if err != nil {
		return res, err
	}
	rewritten := r.rewrittenSince(began)
	if len(rewritten) == 0 {
		return res, nil
	}
	rb := r.Rollback
	window, poll := rb.Window, rb.Poll
	if window <= 0 {
		window = defaultRollbackWindow
	}
	if poll <= 0 {
		poll = defaultRollbackPoll
	}
	journal := rb.Journal
	if journal == nil {
		journal = func(ctx context.Context, unit string, since time.Time) ([]systemd.JournalEntry, error) {
			return systemd.ReadJournal(ctx, unit, since, journalEntries)
		}
	}
	unit := r.unit()
	var report *types.CheckpointRollback
	end := func() (systemd.JobResult, error) {
		if report != nil {
			return res, report
		}
		return res, nil
	}
	// The watch ends when node-resized itself is being stopped: its stop
	// must not wait for it (a start queued by a rollback is queued all
	// the same).
	ctx, cancelDown := r.untilDown(ctx)
	defer cancelDown()
	deadline := time.Now().Add(window)
	for {
		select {
		case <-ctx.Done():
			return end()
		case <-time.After(poll):
		}
		st, uerr := r.Systemd.UnitState(ctx, unit)
		entries, jerr := journal(ctx, unit, began)
		if uerr == nil && jerr == nil {
			v := judgeStart(st, entries)
			if v.up {
				return end()
			}
			var todo []manager
			for _, m := range v.blamed {
				if _, ok := rewritten[m]; ok {
					todo = append(todo, m)
				}
			}
			if len(todo) > 0 {
				if report == nil {
					report = &types.CheckpointRollback{Journal: v.line}
				}
				if !r.restoreBlamed(report, todo, rewritten) {
					if len(report.Files) == 0 {
						return res, fmt.Errorf("the kubelet refused the checkpoint node-resized rewrote (its journal: %q); not rolled back: %s",
							report.Journal, strings.Join(report.Problems, "; "))
					}
					return end()
				}
				report.Starts = append(report.Starts, time.Now())
				res, err = r.startAgain(ctx, unit)
				report.Result = string(res)
				if err != nil {
					report.Problems = append(report.Problems, "start the kubelet again: "+err.Error())
					return end()
				}
				if len(rewritten) == 0 {
					return end()
				}
				deadline = time.Now().Add(window)
			}
		}
		if time.Now().After(deadline) {
			return end()
		}
	}
}

// startAgain starts the kubelet after a rollback, in one job: a start
// when the unit is not active (it failed, or waits to auto-restart: the
// restart job refuses those), a restart when it is (systemd restarted it
// meanwhile, maybe before the files were back).
func (r *Restarter) startAgain(ctx context.Context, unit string) (systemd.JobResult, error) {
	st, err := r.Systemd.UnitState(ctx, unit)
	if err == nil && st.Active() {
		res, err := r.Systemd.Restart(ctx, unit)
		if !errors.Is(err, systemd.ErrUnitNotActive) {
			return res, err
		}
	}
	return r.Systemd.Start(ctx, unit)
}

// rewrittenSince returns the checkpoints whose backup was written since
// began, by manager: the files this restart rewrote.
func (r *Restarter) rewrittenSince(began time.Time) map[manager]string {
	out := map[manager]string{}
	for m, path := range r.checkpointPaths() {
		fi, err := os.Lstat(path + checkpoint.BackupSuffix)
		if err == nil && fi.Mode().IsRegular() && !fi.ModTime().Before(began.Add(-backupSlack)) {
			out[m] = path
		}
	}
	return out
}

func (r *Restarter) checkpointPaths() map[manager]string {
	cpu, mem := r.CPUManagerCheckpoint, r.MemoryManagerCheckpoint
	if cpu == "" {
		cpu = checkpoint.DefaultCPUManagerPath
	}
	if mem == "" {
		mem = checkpoint.DefaultMemoryManagerPath
	}
	return map[manager]string{cpuManager: cpu, memoryManager: mem}
}

// restoreBlamed restores the checkpoints of the managers todo from their
// backups, removes them from rewritten (each is restored once at most),
// and writes the pre-start hold; it reports what it did in report, and
// false when it restored nothing (then the kubelet is left as it is).
func (r *Restarter) restoreBlamed(report *types.CheckpointRollback, todo []manager, rewritten map[manager]string) bool {
	restored := false
	for _, m := range todo {
		path := rewritten[m]
		delete(rewritten, m)
		restore := checkpoint.RestoreCPUManager
		if m == memoryManager {
			restore = checkpoint.RestoreMemoryManager
		}
		if _, err := restore(path); err != nil {
			report.Problems = append(report.Problems, err.Error())
			continue
		}
		report.Files = append(report.Files, path)
		restored = true
	}
	if !restored {
		return false
	}
	if err := r.writeHold(report); err != nil {
		report.Problems = append(report.Problems, err.Error())
	}
	return true
}

// writeHold writes the pre-start hold (when Rollback.HoldPath is set):
// each checkpoint as it is now, by its sha256, so that the pre-start
// leaves them while nothing changed them.
func (r *Restarter) writeHold(report *types.CheckpointRollback) error {
	if r.Rollback.HoldPath == "" {
		return nil
	}
	h := prestartHold{At: time.Now().UTC().Truncate(time.Second), Files: map[string]string{},
		Reason: fmt.Sprintf("the kubelet refused the rewritten %s (%s); restored from the backups", joinPaths(report.Files), report.Journal)}
	paths := r.checkpointPaths()
	for _, m := range []manager{cpuManager, memoryManager} {
		b, err := capped.ReadFile(paths[m], 16<<20)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write the pre-start hold: %w", err)
		}
		sum := sha256.Sum256(b)
		h.Files[paths[m]] = hex.EncodeToString(sum[:])
	}
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("write the pre-start hold: %w", err)
	}
	return checkpoint.WriteFileAtomic(r.Rollback.HoldPath, append(b, '\n'), 0o644)
}

func joinPaths(ps []string) string {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}
