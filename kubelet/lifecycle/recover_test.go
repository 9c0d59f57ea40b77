package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

// scriptedUnits is a UnitControl and RecoveryControl whose unit is in
// state and whose stop does what stop says. At each job it records the
// call, whether the stop record existed and what the CPU manager
// checkpoint held.
type scriptedUnits struct {
	t          *testing.T
	checkpoint string
	record     string
	state      systemd.UnitState
	system     string // SystemState ("running" when empty)
	// stop carries out StopUnit: nil stops the unit (job done).
	stop     func(ctx context.Context, u *scriptedUnits) (systemd.JobResult, error)
	startErr error
	// startHangs: the start is queued but its result never comes (a
	// job ordered after another).
	startHangs bool

	calls   []string
	records []bool
	seen    [][]byte
}

func (u *scriptedUnits) note(call string) {
	u.calls = append(u.calls, call)
	_, err := os.Stat(u.record)
	u.records = append(u.records, err == nil)
	b, _ := os.ReadFile(u.checkpoint)
	u.seen = append(u.seen, b)
}

func (u *scriptedUnits) set(active, sub string) {
	u.state.ActiveState, u.state.SubState = active, sub
	if active == "active" {
		u.state.ActiveEnter = time.Now()
	}
}

func (u *scriptedUnits) UnitState(context.Context, string) (systemd.UnitState, error) {
	return u.state, nil
}

func (u *scriptedUnits) Restart(context.Context, string) (systemd.JobResult, error) {
	u.note("restart")
	return systemd.JobDone, nil
}

func (u *scriptedUnits) Stop(ctx context.Context, _ string) (systemd.JobResult, error) {
	u.note("stop")
	if !u.state.Active() {
		return "", systemd.ErrUnitNotActive
	}
	if u.stop != nil {
		return u.stop(ctx, u)
	}
	u.set("inactive", "dead")
	return systemd.JobDone, nil
}

func (u *scriptedUnits) start(ctx context.Context, call string) (systemd.JobResult, error) {
	u.note(call)
	if u.startHangs {
		<-ctx.Done()
		return "", fmt.Errorf("start: waiting for the job's result: %w", ctx.Err())
	}
	if u.startErr != nil {
		return "", u.startErr
	}
	u.set("active", "running")
	return systemd.JobDone, nil
}

func (u *scriptedUnits) Start(ctx context.Context, _ string) (systemd.JobResult, error) {
	return u.start(ctx, "start")
}

func (u *scriptedUnits) StartWithoutReplacing(ctx context.Context, _ string) (systemd.JobResult, error) {
	return u.start(ctx, "start-fail-mode")
}

func (u *scriptedUnits) SystemState(context.Context) (string, error) {
	if u.system == "" {
		return "running", nil
	}
	return u.system, nil
}

// onlineSnap is a machine with the CPUs online.
func onlineSnap(t *testing.T, online string) *topology.Snapshot {
	t.Helper()
	cpus, err := topology.ParseCPUSet(online)
	if err != nil {
		t.Fatal(err)
	}
	return &topology.Snapshot{CPUs: topology.CPUs{Online: cpus}}
}

// stopPathRestarter is a restarter of a unit that runs, over the v4
// checkpoint, with its stop record and boot id in a temporary directory.
func stopPathRestarter(t *testing.T) (*Restarter, *scriptedUnits) {
	t.Helper()
	dir := t.TempDir()
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte("b0\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	u := &scriptedUnits{t: t, checkpoint: v4Checkpoint(t), record: filepath.Join(dir, StopRecordFile),
		state: systemd.UnitState{Unit: kubelet.DefaultUnit, LoadState: "loaded", TimeoutStop: 90 * time.Second}}
	u.set("active", "running")
	u.state.ActiveEnter = time.Now().Add(-time.Hour)
	r := &Restarter{Systemd: u, CPUManagerCheckpoint: u.checkpoint,
		MemoryManagerCheckpoint: filepath.Join(dir, "absent"), ReservedCPUs: topology.CPUSet{0},
		StopRecord: u.record, BootIDPath: boot}
	return r, u
}

// TestStopPathEndsInAStart: once the stop is queued, every way it can go
// wrong still ends in a start, the stop record exists from before the
// stop until the start is done, and the checkpoints are rewritten only
// when the unit is seen stopped.
func TestStopPathEndsInAStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(ctx context.Context, u *scriptedUnits) (systemd.JobResult, error)
		// corrupt makes the checkpoint unusable once the stop ran.
		corrupt  bool
		startErr error
		calls    []string
		rewrite  bool
		errHas   string // "" for no error
		recordAt bool   // the record is left after the call
	}{
		{name: "stopped", calls: []string{"stop", "start"}, rewrite: true},
		{name: "reply lost after the stop", calls: []string{"stop", "start"}, rewrite: true,
			stop: func(_ context.Context, u *scriptedUnits) (systemd.JobResult, error) {
				u.set("inactive", "dead")
				return "", systemd.ErrBusGone
			}},
		{name: "no reply within the bound", calls: []string{"stop", "start"}, rewrite: true,
			stop: func(ctx context.Context, u *scriptedUnits) (systemd.JobResult, error) {
				dl, ok := ctx.Deadline()
				if ctx.Err() != nil || !ok || time.Until(dl) > 90*time.Second+stopMargin || time.Until(dl) < 90*time.Second {
					u.t.Errorf("the stop waits with ctx err %v, deadline in %v (set %v), want the unit's 90s stop timeout plus %v, not the caller's canceled ctx",
						ctx.Err(), time.Until(dl), ok, stopMargin)
				}
				u.set("inactive", "dead")
				return "", context.DeadlineExceeded
			}},
		{name: "stop canceled by another job", calls: []string{"stop", "start"}, errHas: "not stopped",
			stop: func(context.Context, *scriptedUnits) (systemd.JobResult, error) { return systemd.JobCanceled, nil }},
		{name: "stop failed, unit failed", calls: []string{"stop", "start"}, rewrite: true,
			stop: func(_ context.Context, u *scriptedUnits) (systemd.JobResult, error) {
				u.set("failed", "failed")
				return systemd.JobFailed, nil
			}},
		{name: "still stopping", calls: []string{"stop", "start"}, errHas: "not stopped",
			stop: func(_ context.Context, u *scriptedUnits) (systemd.JobResult, error) {
				u.set("deactivating", "stop-sigterm")
				return "", context.DeadlineExceeded
			}},
		{name: "refused: not active", calls: []string{"stop"}, errHas: "unit is not active",
			stop: func(context.Context, *scriptedUnits) (systemd.JobResult, error) { return "", systemd.ErrUnitNotActive }},
		{name: "rewrite fails", calls: []string{"stop", "start"}, corrupt: true, errHas: "as they were"},
		{name: "start fails", calls: []string{"stop", "start"}, rewrite: true, startErr: errors.New("bus gone"), errHas: "bus gone", recordAt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, u := stopPathRestarter(t)
			old, _ := os.ReadFile(u.checkpoint)
			u.startErr = tc.startErr
			stop := tc.stop
			u.stop = func(ctx context.Context, u *scriptedUnits) (systemd.JobResult, error) {
				if tc.corrupt {
					os.WriteFile(u.checkpoint, []byte("{"), 0o644)
				}
				if stop == nil {
					u.set("inactive", "dead")
					return systemd.JobDone, nil
				}
				return stop(ctx, u)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the daemon is stopping: the steps run to their end all the same
			res, err := r.Restart(ctx, onlineSnap(t, "0-15"))
			if !slices.Equal(u.calls, tc.calls) {
				t.Fatalf("calls %v, want %v (Restart %q, %v)", u.calls, tc.calls, res, err)
			}
			if tc.errHas == "" && err != nil || tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("Restart: %q, %v; want an error with %q", res, err, tc.errHas)
			}
			for i, c := range u.calls {
				if !u.records[i] {
					t.Errorf("no stop record at the %s", c)
				}
			}
			if _, err := os.Stat(u.record); (err == nil) != tc.recordAt {
				t.Errorf("stop record left after Restart: %v, want %v", err == nil, tc.recordAt)
			}
			if len(u.calls) == 2 {
				rewritten := !bytes.Equal(u.seen[1], old) && !bytes.Equal(u.seen[1], []byte("{"))
				if rewritten != tc.rewrite {
					t.Errorf("checkpoint rewritten before the start: %v, want %v", rewritten, tc.rewrite)
				}
			}
		})
	}
}

// TestStopRecordDurable: the record says which unit, when, in which boot
// and by whom; it is read back as written; anything but a regular file
// of a few bytes naming a unit and a time is refused, and a FIFO does
// not block the read.
func TestStopRecordDurable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StopRecordFile)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	want := StopRecord{Unit: kubelet.DefaultUnit, At: at, BootID: "b0", PID: 42}
	if err := writeStopRecord(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStopRecord(path)
	if err != nil || got != want {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	for name, write := range map[string]func(string) error{
		"too large": func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte(" "), maxStopRecord+1), 0o600) },
		"no unit":   func(p string) error { return os.WriteFile(p, []byte(`{"at":"2026-03-04T05:06:07Z"}`), 0o600) },
		"not JSON":  func(p string) error { return os.WriteFile(p, []byte(`kubelet`), 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
		"FIFO":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"symlink":   func(p string) error { return os.Symlink(path, p) },
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := write(p); err != nil {
			t.Fatal(err)
		}
		if rec, err := ReadStopRecord(p); err == nil {
			t.Errorf("%s: read %+v", name, rec)
		}
	}
	if err := removeRecord(path); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStopRecord(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after remove: %v", err)
	}
}

// TestRecover: a record from this boot for a unit still stopped gets the
// unit started, its checkpoints made safe first, with a start that
// replaces no job; nothing is started during a shutdown, for a unit
// between states, or while a restart of ours runs; a record that is void
// is removed.
func TestRecover(t *testing.T) {
	type tc struct {
		name   string
		record string // "" writes a record of this boot from a minute ago
		active string // ActiveState, SubState
		// enteredAfter: the unit became active after the record.
		enteredAfter bool
		system       string
		startErr     error
		startHangs   bool
		locked       bool
		want         Recovery
		calls        []string
		kept         bool // the record is kept
		rewrite      bool
	}
	for _, c := range []tc{
		{name: "no record", record: "none", active: "inactive dead", want: RecoveryNone},
		{name: "stopped", active: "inactive dead", want: RecoveryStarted, calls: []string{"start-fail-mode"}, rewrite: true},
		{name: "failed", active: "failed failed", want: RecoveryStarted, calls: []string{"start-fail-mode"}, rewrite: true},
		{name: "auto-restart", active: "activating auto-restart", want: RecoveryStarted, calls: []string{"start-fail-mode"}, rewrite: true},
		{name: "another boot", record: `{"unit":"kubelet.service","at":"2026-01-01T00:00:00Z","bootID":"b-1","pid":7}`,
			active: "inactive dead", want: RecoveryCleared},
		{name: "another unit", record: `{"unit":"other.service","at":"2026-01-01T00:00:00Z","bootID":"b0","pid":7}`,
			active: "inactive dead", want: RecoveryCleared},
		{name: "unreadable", record: `{`, active: "inactive dead", want: RecoveryCleared},
		{name: "started since", active: "active running", enteredAfter: true, want: RecoveryCleared},
		{name: "started since, stopped again by someone", active: "inactive dead", enteredAfter: true, want: RecoveryCleared},
		{name: "start queued, its result not awaited", active: "inactive dead", startHangs: true,
			want: RecoveryStarted, calls: []string{"start-fail-mode"}, kept: true, rewrite: true},
		{name: "stop still queued", active: "active running", want: RecoveryWaiting, kept: true},
		{name: "deactivating", active: "deactivating stop-sigterm", want: RecoveryWaiting, kept: true},
		{name: "activating", active: "activating start", want: RecoveryWaiting, kept: true},
		{name: "shutdown", active: "inactive dead", system: "stopping", want: RecoveryShutdown, kept: true},
		{name: "start refused", active: "inactive dead", startErr: errors.New("transaction is destructive"),
			want: RecoveryWaiting, calls: []string{"start-fail-mode"}, kept: true, rewrite: true},
		{name: "restart running", active: "inactive dead", locked: true, want: RecoveryWaiting, kept: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, u := stopPathRestarter(t)
			old, _ := os.ReadFile(u.checkpoint)
			r.Machine = func() (*topology.Snapshot, error) { return onlineSnap(t, "0-15"), nil }
			at := time.Now().Add(-time.Second)
			switch c.record {
			case "":
				if err := writeStopRecord(u.record, StopRecord{Unit: kubelet.DefaultUnit, At: at, BootID: "b0", PID: 7}); err != nil {
					t.Fatal(err)
				}
			case "none":
			default:
				if err := os.WriteFile(u.record, []byte(c.record), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			a, s, _ := strings.Cut(c.active, " ")
			u.set(a, s)
			u.state.ActiveEnter = at.Add(-time.Hour)
			if c.enteredAfter {
				u.state.ActiveEnter = at.Add(time.Millisecond)
			}
			u.system, u.startErr, u.startHangs = c.system, c.startErr, c.startHangs
			r.StartWait = 50 * time.Millisecond
			if c.locked {
				r.mu.Lock()
				defer r.mu.Unlock()
			}
			var told []time.Time
			r.Started = func(at time.Time) { told = append(told, at) }
			before := time.Now()
			got, err := r.Recover(context.Background())
			if got != c.want || !slices.Equal(u.calls, c.calls) {
				t.Fatalf("Recover: %q, %v, calls %v; want %q, calls %v", got, err, u.calls, c.want, c.calls)
			}
			// Each start it makes is told, for the restart budget.
			if started := c.want == RecoveryStarted; started != (len(told) == 1) || len(told) > 1 ||
				(started && (told[0].Before(before) || told[0].After(time.Now()))) {
				t.Errorf("starts told %v; want one, since %v, only when it started the unit", told, before)
			}
			if _, err := os.Stat(u.record); (err == nil) != c.kept {
				t.Errorf("record kept: %v, want %v", err == nil, c.kept)
			}
			now, _ := os.ReadFile(u.checkpoint)
			if rewritten := !bytes.Equal(now, old); rewritten != c.rewrite {
				t.Errorf("checkpoint rewritten: %v, want %v", rewritten, c.rewrite)
			}
			if c.rewrite {
				if bak, _ := os.ReadFile(u.checkpoint + checkpoint.BackupSuffix); !bytes.Equal(bak, old) {
					t.Error("the previous checkpoint was not kept beside it")
				}
			}
		})
	}
}

// TestStopPathDaemonStopping: a daemon that stops while its restart waits
// for the start's result (which systemd holds back until the daemon's own
// stop is done) returns at once, the start queued and the record kept.
func TestStopPathDaemonStopping(t *testing.T) {
	r, u := stopPathRestarter(t)
	u.startHangs = true
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- r.Run(ctx) }()
	done := make(chan error)
	go func() {
		_, err := r.Restart(context.Background(), onlineSnap(t, "0-15"))
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(u.record); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no stop record")
		}
	}
	time.Sleep(100 * time.Millisecond) // into the wait for the start
	cancel()
	<-ran
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopping") {
			t.Fatalf("Restart: %v, want the start queued while stopping", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Restart still waits for the start's result after the daemon began to stop")
	}
	if _, err := os.Stat(u.record); err != nil {
		t.Errorf("stop record gone with the start's result unknown: %v", err)
	}
}

// TestRecoveryNotesItsStart: a recovery with no daemon to tell
// (`node-resized kubelet-recover`, the daemon's ExecStopPost) notes each
// start it makes, durably, beside the stop record; the daemon's Run tells
// Started of each noted start at its first look and removes the notes.
// Notes that cannot be read are removed, and tell nothing.
func TestRecoveryNotesItsStart(t *testing.T) {
	r, u := stopPathRestarter(t)
	notes := filepath.Join(filepath.Dir(u.record), StartNotesFile)
	r.StartNotes = notes
	var starts []time.Time
	for range 2 {
		if err := writeStopRecord(u.record, StopRecord{Unit: kubelet.DefaultUnit, At: time.Now(), BootID: "b0", PID: 7}); err != nil {
			t.Fatal(err)
		}
		u.set("inactive", "dead")
		before := time.Now()
		if got, err := r.Recover(context.Background()); got != RecoveryStarted || err != nil {
			t.Fatalf("Recover: %q, %v; want it started", got, err)
		}
		noted, err := readStartNotes(notes)
		if err != nil || len(noted) != len(starts)+1 || noted[len(noted)-1].Before(before) {
			t.Fatalf("notes %v, %v; want %d, the last since %v", noted, err, len(starts)+1, before)
		}
		starts = noted
		if fi, err := os.Stat(notes); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("notes: %v, %v", fi, err)
		}
	}

	// The daemon starts: its Run counts them, once, and removes them.
	var told []time.Time
	r.Started = func(at time.Time) { told = append(told, at) }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(told, starts, time.Time.Equal) {
		t.Fatalf("told %v; want the noted starts %v", told, starts)
	}
	if _, err := os.Stat(notes); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("notes kept after they were counted: %v", err)
	}

	for _, bad := range []string{`{`, `{"starts":["0001-01-01T00:00:00Z"]}`, strings.Repeat(" ", maxStartNotesSize+1)} {
		if err := os.WriteFile(notes, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		told = nil
		if err := r.takeStartNotes(); err == nil || len(told) > 0 {
			t.Errorf("notes %.20q: told %v, err %v; want an error and nothing told", bad, told, err)
		}
		if _, err := os.Stat(notes); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("notes %.20q kept: %v", bad, err)
		}
	}
}
