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

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/resources"
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
	// ReassertInterval is how often Run puts back the last limits
	// (default 30s).
	ReassertInterval time.Duration
	// Clock drives Run's ticker (default the real clock).
	Clock clock.WithTicker
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

// Enforcer writes the kubepods limits of a Request; it implements the
// agent's Enforcer. It is safe for concurrent use: applies are
// serialised, and Status never waits for one.
type Enforcer struct {
	paths       Paths
	mode        Mode
	unsupported string
	log         *slog.Logger
	m           *metrics.Metrics
	w           writer
	clock       clock.WithTicker
	interval    time.Duration
	now         func() time.Time
	pageSize    int64

	applyMu    sync.Mutex // serialises Apply, Reapply and Restore, and guards the fields below
	last       *Request   // the last Apply's, for Reapply; nil before the first
	lastOnline topology.CPUSet
	found      bool // kubepods existed at the previous apply (to log changes only)

	mu      sync.Mutex // guards status, history and applied
	status  *Change
	history []Change
	applied time.Time // the last Apply's WrittenAt
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
	if opts.SkipMagicCheck || syntheticTrees {
		dopts = append(dopts, SkipMagicCheck())
	}
	e := &Enforcer{
		paths:    paths,
		log:      opts.Logger,
		m:        opts.Metrics,
		w:        opts.writer,
		clock:    opts.Clock,
		interval: opts.ReassertInterval,
		now:      opts.now,
		pageSize: int64(os.Getpagesize()),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.now == nil {
		e.now = e.clock.Now
	}
	if e.interval <= 0 {
		e.interval = DefaultReassertInterval
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

// syntheticTrees is set in test builds (the tag syntheticcgroups) that
// take synthetic cgroup trees for real ones.
var syntheticTrees bool

// DefaultReassertInterval is how often Run puts back the last limits.
const DefaultReassertInterval = 30 * time.Second

// Models gives the current machine model; *monitor.Monitor is one.
type Models interface {
	Snapshot() (*topology.Snapshot, resources.List)
}

// Run re-asserts the last applied limits every ReassertInterval until ctx
// is done: a kubelet that (re)starts writes kubepods from its own view of
// the machine, and a kubelet that starts late creates kubepods after the
// last Apply. Each pass reads a few files and writes nothing while they
// hold; a failure is logged and counted, and the next pass tries again.
func (e *Enforcer) Run(ctx context.Context, models Models) error {
	t := e.clock.NewTicker(e.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			var online topology.CPUSet
			if snap, _ := models.Snapshot(); snap != nil {
				online = snap.CPUs.Online
			}
			if err := e.Reapply(ctx, online); err != nil && ctx.Err() == nil {
				e.log.Warn("re-assert the kubepods limits", "err", err)
			}
		}
	}
}

// Apply writes r's limits on kubepods, with online for a cpuset that
// carries a list of its own (see the package documentation), and
// remembers both for Reapply. r is a KindClamp, a KindGrow or a
// KindReassert. It returns an error only when r is none of them or a read
// or a write failed; a request
// that finds nothing to do (cgroup v1, no kubepods yet) is recorded as
// skipped in Status and returns nil.
func (e *Enforcer) Apply(ctx context.Context, r Request, online topology.CPUSet) error {
	if r.Kind != KindClamp && r.Kind != KindGrow && r.Kind != KindReassert {
		return fmt.Errorf("cgroup enforcer: a request of kind %q is not a clamp, a grow or a reassert", r.Kind)
	}
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	e.last, e.lastOnline = &r, online
	err := e.apply(ctx, r, online, false)
	e.mu.Lock()
	e.applied = time.Time{}
	if e.status != nil {
		e.applied = e.status.WrittenAt
	}
	e.mu.Unlock()
	return err
}

// Reapply writes the last Apply's request again, with online (the last
// online CPUs when nil). Call it when kubepods may have been rewritten
// behind the Enforcer's back (the kubelet writes its own boot-time limits
// whenever it starts) or when the kubelet may have created it since; it
// writes nothing when everything holds. Before the first Apply it does
// nothing.
func (e *Enforcer) Reapply(ctx context.Context, online topology.CPUSet) error {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	if e.last == nil {
		return nil
	}
	if online == nil {
		online = e.lastOnline
	}
	e.lastOnline = online
	return e.apply(ctx, *e.last, online, true)
}

// apply does the work of Apply, Reapply and Restore; the caller holds
// applyMu.
func (e *Enforcer) apply(ctx context.Context, r Request, online topology.CPUSet, reapply bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := e.now()
	ch := Change{Time: start, Action: r.Kind, Generation: r.Generation, Reapply: reapply}
	if reason := e.skipReason(); reason != "" {
		ch.Result, ch.Reason = ResultSkipped, reason
		e.record(ch)
		e.log.Debug("kubepods limits not applied", "action", string(r.Kind), "reason", reason)
		return nil
	}

	ch.OOMKillsBefore = e.oomKills()
	// The limits first, each read just before its write: memory.max,
	// what protects the node on a loss, is written before anything else
	// is read. The cpusets are planned together, from all three lists.
	w := writes{files: make([]FileChange, 0, 8)}
	e.write(ctx, &w, e.limitOps(r.Limits))
	cpuOps, cpuErrs := e.cpusetOps(online)
	w.errs = append(w.errs, cpuErrs...)
	e.write(ctx, &w, cpuOps)
	ch.Files, ch.WrittenAt = w.files, w.last
	written, errs := w.n, w.errs
	ch.OOMKillsAfter = e.oomKills()
	elapsed := e.now().Sub(start)
	ch.DurationSeconds = elapsed.Seconds()

	err := errors.Join(errs...)
	e.conclude(&ch, written, err, elapsed)
	e.record(ch)
	if err != nil {
		return fmt.Errorf("apply %s (generation %d) to %s: %w", r.Kind, r.Generation, e.paths.Kubepods.Dir, err)
	}
	return nil
}

// skipReason says why nothing can be applied now (cgroup v1, no kubepods
// yet), or "".
func (e *Enforcer) skipReason() string {
	if e.unsupported != "" {
		return e.unsupported
	}
	kp := e.paths.Kubepods
	found := isDir(kp.Dir)
	if found != e.found {
		e.log.Info("kubepods cgroup appeared or went away", "kubepods", kp.Dir, "found", found)
		e.found = found
	}
	if !found {
		return "kubepods cgroup " + kp.Dir + " does not exist (the kubelet has not started yet?)"
	}
	return ""
}

// writes collects what the writes of one apply went through.
type writes struct {
	files []FileChange
	n     int       // files written
	last  time.Time // when the last write was read back
	errs  []error
}

// write carries out the ops that need a write (reading an unread one's
// file first), reads every write back, and adds what each file went
// through to w.
func (e *Enforcer) write(ctx context.Context, w *writes, ops []*op) {
	for _, o := range ops {
		if o.unread {
			if err := readBefore(o); err != nil {
				w.errs = append(w.errs, err)
			}
		}
		fc := FileChange{Path: o.path(), Before: o.before, Want: o.want, After: o.before, Note: o.note}
		if o.write {
			var err error
			if fc, err = e.writeOne(ctx, o, fc); err != nil {
				w.errs = append(w.errs, err)
			}
			if fc.Written {
				w.n++
				w.last = e.now()
			}
		}
		w.files = append(w.files, fc)
	}
}

// writeOne writes one op and reads it back.
func (e *Enforcer) writeOne(ctx context.Context, o *op, fc FileChange) (FileChange, error) {
	if err := ctx.Err(); err != nil {
		fc.Note = "not written: " + err.Error()
		return fc, &WriteError{Path: fc.Path, Value: o.want, Err: err}
	}
	var errs []error
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
	return fc, errors.Join(errs...)
}

// conclude sets the change's result and logs it.
func (e *Enforcer) conclude(ch *Change, written int, err error, elapsed time.Duration) {
	switch {
	case err != nil:
		ch.Result, ch.Error = ResultFailed, err.Error()
		if e.m != nil {
			e.m.ResizeErrors.WithLabelValues("cgroup_update").Inc()
		}
		e.log.Warn("kubepods limits not fully applied", "action", string(ch.Action), "generation", ch.Generation,
			"reapply", ch.Reapply, "written", written, "changes", summarize(ch.Files), "err", err)
	case written > 0:
		ch.Result = ResultChanged
		e.log.Info("kubepods limits applied", "action", string(ch.Action), "generation", ch.Generation, "reapply", ch.Reapply,
			"changes", summarize(ch.Files), "oomKills", oomDelta(*ch), "duration", elapsed)
	default:
		ch.Result = ResultUnchanged
	}
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

// LastWrite returns when the last Apply wrote its last file (zero when it
// wrote none): the moment a clamp took hold. A Reapply or Restore since
// does not change it.
func (e *Enforcer) LastWrite() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied
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
