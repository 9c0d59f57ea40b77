package cgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/topology"
)

// Options configure an Enforcer.
type Options struct {
	// Root is the cgroup mount point (default DefaultRoot).
	Root string
	// Driver is the kubelet's cgroupDriver: "cgroupfs" (the default) or
	// "systemd".
	Driver string
	// CgroupRoot is the kubelet's cgroupRoot (default "/").
	CgroupRoot string
	Logger     *slog.Logger
	// Metrics, when set, counts every Apply or Reapply that fails as
	// resize_errors_total{subsystem="cgroup_update"}.
	Metrics *metrics.Metrics
	// ObserveClamp, when set, is called with the duration of every
	// ClampCgroups that changed something (first read to last read-back),
	// e.g. to feed a histogram.
	ObserveClamp func(time.Duration)
	// SkipMagicCheck judges Root by its layout rather than its filesystem
	// type (see SkipMagicCheck), for synthetic trees in tests.
	SkipMagicCheck bool

	// writer replaces the opencontainers/cgroups managers (tests).
	writer writer
	// now replaces time.Now (tests).
	now func() time.Time
}

// writer writes one limit of one cgroup. The Linux implementation goes
// through opencontainers/cgroups (fs2, or systemd over D-Bus).
type writer interface {
	set(o *op) error
}

// fallbackError says that the systemd manager failed and the file was
// written directly instead: the limit holds, but systemd may restore the
// old value on its next daemon-reload.
type fallbackError struct{ err error }

func (e *fallbackError) Error() string {
	return "systemd did not take the change (" + e.err.Error() +
		"); the file was written directly and systemd may restore the old value on its next daemon-reload"
}

func (e *fallbackError) Unwrap() error { return e.err }

// WriteError is a cgroup file that could not be set to a value, or that
// does not read back as that value.
type WriteError struct {
	Path  string
	Value string
	Err   error
}

func (e *WriteError) Error() string {
	return "set " + e.Path + " to " + strconv.Quote(e.Value) + ": " + e.Err.Error()
}

func (e *WriteError) Unwrap() error { return e.Err }

// Enforcer writes the kubepods limits that decide's ClampCgroups and
// GrowCgroups carry; it implements the agent's Enforcer. It is safe for
// concurrent use: applies are serialised, and Status never waits for one.
type Enforcer struct {
	paths        Paths
	mode         Mode
	unsupported  string
	log          *slog.Logger
	m            *metrics.Metrics
	observeClamp func(time.Duration)
	w            writer
	now          func() time.Time
	pageSize     int64

	applyMu sync.Mutex // serialises Apply and Reapply, and guards the fields below
	last    decide.Action
	lastSn  *topology.Snapshot
	found   bool // kubepods existed at the previous apply (to log changes only)

	mu      sync.Mutex // guards status and history
	status  *Change
	history []Change
}

// New finds the kubelet's cgroups. It fails only when the options are
// wrong or Root is not a cgroup hierarchy at all: on a cgroup v1 or hybrid
// host it returns an Enforcer that enforces nothing and says why in Status,
// and a kubepods cgroup that does not exist yet (the kubelet has not
// started) is looked for again on every Apply.
func New(opts Options) (*Enforcer, error) {
	paths, err := ResolvePaths(opts.Root, opts.Driver, opts.CgroupRoot)
	if err != nil {
		return nil, err
	}
	var dopts []DetectOption
	if opts.SkipMagicCheck {
		dopts = append(dopts, SkipMagicCheck())
	}
	e := &Enforcer{
		paths:        paths,
		log:          opts.Logger,
		m:            opts.Metrics,
		observeClamp: opts.ObserveClamp,
		w:            opts.writer,
		now:          opts.now,
		pageSize:     int64(os.Getpagesize()),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.mode, err = Detect(paths.Root, dopts...)
	switch {
	case errors.Is(err, ErrUnsupported):
		e.unsupported = err.Error()
		e.log.Warn("kubepods limits will not be enforced", "reason", e.unsupported)
	case err != nil:
		return nil, err
	}
	if e.w == nil {
		e.w = newWriter(paths.Driver)
	}
	e.found = isDir(paths.Kubepods.Dir)
	e.log.Info("kubepods cgroups", "mode", string(e.mode), "driver", paths.Driver,
		"kubepods", paths.Kubepods.Dir, "found", e.found)
	return e, nil
}

// Paths returns the kubelet cgroups the Enforcer works on.
func (e *Enforcer) Paths() Paths { return e.paths }

// Mode returns the layout of the cgroup hierarchy.
func (e *Enforcer) Mode() Mode { return e.mode }

// Apply carries out a decide.ClampCgroups or decide.GrowCgroups with the
// online CPUs of snap (see the package documentation), and remembers it
// for Reapply. It returns an error only when a read or a write failed; an
// action that finds nothing to do (cgroup v1, no kubepods yet) is recorded
// as skipped in Status and returns nil.
func (e *Enforcer) Apply(ctx context.Context, a decide.Action, snap *topology.Snapshot) error {
	var (
		gen int64
		lim decide.CgroupLimits
	)
	switch x := a.(type) {
	case decide.ClampCgroups:
		gen, lim = x.Generation, x.Limits
	case decide.GrowCgroups:
		gen, lim = x.Generation, x.Limits
	default:
		return fmt.Errorf("cgroup enforcer: %T is not a cgroup action", a)
	}
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	e.last, e.lastSn = a, snap
	return e.apply(ctx, a.Kind(), gen, lim, snap, false)
}

// Reapply carries out the last action again, with snap's online CPUs (the
// last snapshot when snap is nil). Call it when kubepods may have been
// rewritten behind the Enforcer's back (the kubelet writes its own boot-time
// limits whenever it starts) or when the kubelet may have created it since;
// it writes nothing when everything holds. Before the first Apply it does
// nothing.
func (e *Enforcer) Reapply(ctx context.Context, snap *topology.Snapshot) error {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	if e.last == nil {
		return nil
	}
	if snap == nil {
		snap = e.lastSn
	}
	e.lastSn = snap
	var (
		gen int64
		lim decide.CgroupLimits
	)
	switch x := e.last.(type) {
	case decide.ClampCgroups:
		gen, lim = x.Generation, x.Limits
	case decide.GrowCgroups:
		gen, lim = x.Generation, x.Limits
	}
	return e.apply(ctx, e.last.Kind(), gen, lim, snap, true)
}

// apply does the work of Apply and Reapply; the caller holds applyMu.
func (e *Enforcer) apply(ctx context.Context, kind decide.ActionKind, gen int64, lim decide.CgroupLimits,
	snap *topology.Snapshot, reapply bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := e.now()
	ch := Change{Time: start, Action: kind, Generation: gen, Reapply: reapply}
	kp := e.paths.Kubepods
	if e.unsupported != "" {
		ch.Result, ch.Reason = ResultSkipped, e.unsupported
		e.record(ch)
		return nil
	}
	found := isDir(kp.Dir)
	if found != e.found {
		e.log.Info("kubepods cgroup appeared or went away", "kubepods", kp.Dir, "found", found)
		e.found = found
	}
	if !found {
		ch.Result = ResultSkipped
		ch.Reason = "kubepods cgroup " + kp.Dir + " does not exist (the kubelet has not started yet?)"
		e.record(ch)
		e.log.Debug("kubepods limits not applied", "action", string(kind), "reason", ch.Reason)
		return nil
	}

	ch.OOMKillsBefore = e.oomKills()
	ops, errs := e.limitOps(lim)
	cpuOps, cpuErrs := e.cpusetOps(snap)
	ops, errs = append(ops, cpuOps...), append(errs, cpuErrs...)
	written := 0
	for _, o := range ops {
		fc := FileChange{Path: o.path(), Before: o.before, Want: o.want, After: o.before, Note: o.note}
		if o.write {
			if err := ctx.Err(); err != nil {
				errs = append(errs, &WriteError{Path: fc.Path, Value: o.want, Err: err})
				fc.Note = "not written: " + err.Error()
				ch.Files = append(ch.Files, fc)
				continue
			}
			err := e.w.set(o)
			var fb *fallbackError
			switch {
			case err == nil:
				fc.Written = true
			case errors.As(err, &fb):
				fc.Written, fc.Note = true, "written to the file only: "+fb.Error()
				errs = append(errs, &WriteError{Path: fc.Path, Value: o.want, Err: err})
			default:
				errs = append(errs, &WriteError{Path: fc.Path, Value: o.want, Err: err})
			}
			after, rerr := readValue(fc.Path)
			switch {
			case rerr != nil:
				errs = append(errs, fmt.Errorf("read back: %w", rerr))
				fc.After = ""
			case fc.Written && !o.holds(after):
				errs = append(errs, &WriteError{Path: fc.Path, Value: o.want, Err: fmt.Errorf("reads back %q", after)})
				fc.After = after
			default:
				fc.After = after
			}
			if fc.Written {
				written++
			}
		}
		ch.Files = append(ch.Files, fc)
	}
	ch.OOMKillsAfter = e.oomKills()
	elapsed := e.now().Sub(start)
	ch.DurationSeconds = elapsed.Seconds()

	err := errors.Join(errs...)
	switch {
	case err != nil:
		ch.Result, ch.Error = ResultFailed, err.Error()
		if e.m != nil {
			e.m.ResizeErrors.WithLabelValues("cgroup_update").Inc()
		}
		e.log.Warn("kubepods limits not fully applied", "action", string(kind), "generation", gen,
			"reapply", reapply, "written", written, "changes", summarize(ch.Files), "err", err)
	case written > 0:
		ch.Result = ResultChanged
		e.log.Info("kubepods limits applied", "action", string(kind), "generation", gen, "reapply", reapply,
			"changes", summarize(ch.Files), "oomKills", oomDelta(ch), "duration", elapsed)
	default:
		ch.Result = ResultUnchanged
	}
	if kind == decide.KindClampCgroups && ch.Result == ResultChanged && e.observeClamp != nil {
		e.observeClamp(elapsed)
	}
	e.record(ch)
	if err != nil {
		return fmt.Errorf("apply %s (generation %d) to %s: %w", kind, gen, kp.Dir, err)
	}
	return nil
}

// kubepodsDir is the kubepods directory to look for: on cgroup v1 the one
// of the memory controller.
func (e *Enforcer) kubepodsDir() string {
	if e.mode == ModeUnified {
		return e.paths.Kubepods.Dir
	}
	return filepath.Join(e.paths.Root, "memory", e.paths.Kubepods.Path)
}

// oomKills reads oom_kill from kubepods' memory.events; nil when it cannot.
func (e *Enforcer) oomKills() *uint64 {
	v, ok, err := readKey(filepath.Join(e.paths.Kubepods.Dir, "memory.events"), "oom_kill")
	if err != nil || !ok {
		return nil
	}
	return &v
}

func oomDelta(ch Change) string {
	if ch.OOMKillsBefore == nil || ch.OOMKillsAfter == nil {
		return "unknown"
	}
	return strconv.FormatUint(*ch.OOMKillsAfter-*ch.OOMKillsBefore, 10)
}

// summarize renders the written files for a log line:
// "memory.max 8589934592→7516192768; cpuset.cpus 0-3→0-2".
func summarize(files []FileChange) string {
	var parts []string
	for _, f := range files {
		if f.Written {
			parts = append(parts, filepath.Base(filepath.Dir(f.Path))+"/"+filepath.Base(f.Path)+" "+
				quoteEmpty(f.Before)+"→"+quoteEmpty(f.After))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// record keeps ch as the last change, and in the history when it wrote
// something or failed.
func (e *Enforcer) record(ch Change) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := ch
	e.status = &c
	if ch.Result == ResultChanged || ch.Result == ResultFailed {
		e.history = append(e.history, ch)
		if n := len(e.history) - HistoryLen; n > 0 {
			e.history = append(e.history[:0:0], e.history[n:]...)
		}
	}
}

// Status returns what the Enforcer works on and what it last did. Found is
// looked up afresh.
func (e *Enforcer) Status() Status {
	st := Status{
		Mode:        e.mode,
		Driver:      e.paths.Driver,
		Kubepods:    e.paths.Kubepods.Dir,
		Found:       isDir(e.kubepodsDir()),
		Paths:       e.paths,
		Unsupported: e.unsupported,
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.status != nil {
		c := e.status.clone()
		st.Last = &c
	}
	if len(e.history) > 0 {
		st.History = make([]Change, len(e.history))
		for i, c := range e.history {
			st.History[i] = c.clone()
		}
	}
	return st
}
