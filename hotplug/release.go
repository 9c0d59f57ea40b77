package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/internal/fault"
	"github.com/node-resized/node-resized/internal/statefile"
	"github.com/node-resized/node-resized/release"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// How long a release waits for the kubelet to free the exclusive CPUs of
// a pod evicted before it, and how often it looks.
const (
	exclusiveWait = time.Minute
	exclusivePoll = 2 * time.Second
)

// RecordFile is the Releaser's record of what it took offline, beside the
// daemon's state file (/var/lib/node-resized/released.json).
const RecordFile = "released.json"

// maxRecordSize caps the record read at start: a record names at most a
// few thousand CPUs and blocks.
const maxRecordSize = 1 << 20

// maxID bounds a CPU or block id in the record: no kernel has more (a
// forged or corrupt record is refused, not acted on).
const maxID = 1 << 22

// HotplugWriter is what a Releaser writes through (*Writer is one).
type HotplugWriter interface {
	OfflineCPU(ctx context.Context, id int) error
	OnlineCPU(ctx context.Context, id int) error
	OfflineBlock(ctx context.Context, id int) error
	OnlineBlock(ctx context.Context, id int, movable bool) error
	Holds() *Holds
}

var _ HotplugWriter = (*Writer)(nil)

// ReleaserConfig configures a Releaser.
type ReleaserConfig struct {
	// FS reads the machine: a fresh Snapshot before each step, and the
	// hotplug details (online files, SMT siblings, memory devices).
	FS topology.FS
	// Writer writes the hotplug files; the Releaser holds what it
	// releases in its Holds.
	Writer HotplugWriter
	// RecordPath is the record of what was released; "" keeps it in
	// memory only (tests).
	RecordPath string
	// ReservedCPUs are the kubelet's reservedSystemCPUs: never released.
	ReservedCPUs topology.CPUSet
	// Exclusive reads the exclusive CPU assignments (CPU id to pod UID)
	// from the kubelet's CPU manager checkpoint; nil: none.
	Exclusive func() (map[int]string, error)
	Logger    *slog.Logger
}

// Releaser carries out planned releases and their give backs: it chooses
// with package release what to take offline (and bring back), records
// each CPU and memory block durably before it writes it, and writes
// through its Writer, one at a time, each write bounded in time. A block
// that does not go is skipped for another. It is safe for concurrent use;
// one release or give back runs at a time, and a new one stops the one
// running first.
type Releaser struct {
	cfg ReleaserConfig
	log *slog.Logger

	mu     sync.Mutex // guards rec, cancel, done and the cache
	rec    record
	cancel context.CancelFunc
	done   chan struct{}
	// cached is Released's answer for cachedSnap.
	cachedSnap *topology.Snapshot
	cached     types.Released
}

// record is what the Releaser took offline and has not given back: each
// CPU and block is added before it is written offline, and removed once it
// is online again, its offline failed, or the hypervisor removed it.
type record struct {
	Version int    `json:"version"`
	Spec    string `json:"spec,omitempty"`
	CPUs    []int  `json:"cpus,omitempty"`
	Blocks  []int  `json:"blocks,omitempty"`
}

const recordVersion = 1

// NewReleaser returns a Releaser that resumes from its record: what it
// names is held offline at once (the auto-onliner will not bring it back).
// A record that cannot be used is moved aside and said why; the Releaser
// then starts with nothing released.
func NewReleaser(c ReleaserConfig) (*Releaser, error) {
	r := &Releaser{cfg: c, log: c.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.rec.Version = recordVersion
	if c.RecordPath == "" {
		return r, nil
	}
	rec, err := loadRecord(c.RecordPath, time.Now())
	if err != nil {
		return r, err
	}
	if rec != nil {
		r.rec = *rec
		if snap, err := c.FS.Snapshot(); err == nil {
			// What was removed while the daemon was not running is
			// gone from the record before anything is held.
			gone := release.GiveBack(release.Input{Machine: snap, Released: r.rec.set()}).Gone
			r.rec.CPUs = slices.DeleteFunc(r.rec.CPUs, func(id int) bool { return slices.Contains([]int(gone.CPUs), id) })
			r.rec.Blocks = slices.DeleteFunc(r.rec.Blocks, func(id int) bool { return slices.Contains(gone.Blocks, id) })
			if !gone.IsEmpty() {
				if err := r.save(); err != nil {
					r.log.Warn("update the release record", "err", err)
				}
			}
		}
		c.Writer.Holds().Hold(r.rec.CPUs, r.rec.Blocks)
		r.log.Info("resumed the record of the planned release", "path", c.RecordPath, "spec", r.rec.Spec,
			"cpus", r.rec.CPUs, "blocks", r.rec.Blocks)
	}
	return r, nil
}

// loadRecord reads the record; a missing one is nil, nil.
func loadRecord(path string, now time.Time) (*record, error) {
	b, err := statefile.Read(path, maxRecordSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var refused statefile.RefusedError
	if errors.As(err, &refused) {
		return nil, statefile.MoveAside(path, now, refused)
	}
	if err != nil {
		return nil, fmt.Errorf("read the release record %s: %w", path, err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, statefile.MoveAside(path, now, fmt.Errorf("does not decode: %w", err))
	}
	if err := rec.validate(); err != nil {
		return nil, statefile.MoveAside(path, now, fmt.Errorf("holds a value out of range: %w", err))
	}
	return &rec, nil
}

// validate reports why rec is not a record the Releaser could have written.
func (rec record) validate() error {
	if rec.Version != recordVersion {
		return fmt.Errorf("version %d, want %d", rec.Version, recordVersion)
	}
	for _, l := range []struct {
		what string
		ids  []int
	}{{"cpus", rec.CPUs}, {"blocks", rec.Blocks}} {
		for i, id := range l.ids {
			switch {
			case id < 0 || id >= maxID:
				return fmt.Errorf("%s[%d] = %d is not an id", l.what, i, id)
			case i > 0 && id <= l.ids[i-1]:
				return fmt.Errorf("%s are not sorted and unique at %d", l.what, i)
			}
		}
	}
	return nil
}

// save writes the record; r.mu is held.
func (r *Releaser) save() error {
	if r.cfg.RecordPath == "" {
		return nil
	}
	b, err := json.Marshal(r.rec)
	if err != nil {
		return fmt.Errorf("encode the release record: %w", err)
	}
	if err := statefile.Write(r.cfg.RecordPath, append(b, '\n')); err != nil {
		return fmt.Errorf("save the release record: %w", err)
	}
	return nil
}

// change applies f to the record and saves it: r.mu is taken. On a failed
// save the record in memory is left as it was.
func (r *Releaser) change(f func(rec *record)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.rec
	old.CPUs, old.Blocks = slices.Clone(old.CPUs), slices.Clone(old.Blocks)
	f(&r.rec)
	slices.Sort(r.rec.CPUs)
	r.rec.CPUs = slices.Compact(r.rec.CPUs)
	slices.Sort(r.rec.Blocks)
	r.rec.Blocks = slices.Compact(r.rec.Blocks)
	r.cachedSnap = nil
	if err := r.save(); err != nil {
		r.rec = old
		return err
	}
	return nil
}

// set is the record as a release.Set.
func (rec record) set() release.Set {
	return release.Set{CPUs: topology.NewCPUSet(rec.CPUs...), Blocks: slices.Clone(rec.Blocks)}
}

// Release takes the CPUs and memory blocks above x.Capacity offline. It
// returns at once; report is called once, Done, when it has gone as far
// as it can (or with the ctx's end, not at all).
func (r *Releaser) Release(ctx context.Context, x decide.Release, _ *topology.Snapshot, report func(types.ReleaseReport)) {
	r.start(ctx, func(ctx context.Context) {
		short := r.release(ctx, x)
		if ctx.Err() == nil {
			report(types.ReleaseReport{Generation: x.Generation, Done: true, Short: short})
		}
	})
}

// GiveBack brings back online what the record names and is still present
// and offline. It returns at once and reports as Release does.
func (r *Releaser) GiveBack(ctx context.Context, x decide.GiveBack, report func(types.ReleaseReport)) {
	r.start(ctx, func(ctx context.Context) {
		short := r.giveBack(ctx)
		if ctx.Err() == nil {
			report(types.ReleaseReport{Generation: x.Generation, GiveBack: true, Done: true, Short: short})
		}
	})
}

// start stops the release or give back that runs and runs f in its place.
func (r *Releaser) start(ctx context.Context, f func(context.Context)) {
	r.Stop()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		defer cancel()
		f(ctx)
	}()
}

// Stop stops the release or give back that runs, if any, and waits for it
// (a write in flight ends within its bound).
func (r *Releaser) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// read reads the machine for one step.
func (r *Releaser) read() (*topology.Snapshot, *topology.Hotplug, error) {
	snap, err := r.cfg.FS.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("read the machine: %w", err)
	}
	hp, err := r.cfg.FS.Hotplug()
	if err != nil {
		return nil, nil, fmt.Errorf("read the hotplug details: %w", err)
	}
	return snap, hp, nil
}

// release runs one release to its end and returns what it could not take
// offline ("" when it reached the target).
func (r *Releaser) release(ctx context.Context, x decide.Release) string {
	var targetCPUs int
	if v, ok := x.Capacity[resources.CPU]; ok {
		targetCPUs = int(v / 1000)
	}
	var targetMem uint64
	if v, ok := x.Capacity[resources.Memory]; ok && v > 0 {
		targetMem = uint64(v)
	}
	if err := r.change(func(rec *record) { rec.Spec = x.Spec }); err != nil {
		return err.Error() + ": nothing released"
	}
	var skip release.Set
	var failed []string
	var waitFor time.Time // until when a CPU a pod held is waited for
	for ctx.Err() == nil {
		snap, hp, err := r.read()
		if err != nil {
			return joinShort(append(failed, err.Error()+": the release stopped"))
		}
		var excl map[int]string
		if r.cfg.Exclusive != nil {
			if excl, err = r.cfg.Exclusive(); err != nil {
				// Without the assignments no CPU is known free of one:
				// none is released.
				r.log.Warn("read the kubelet's exclusive CPU assignments; no CPU is released", "err", err)
				targetCPUs = 0
				failed = append(failed, "cpu: the kubelet's CPU manager checkpoint could not be read ("+err.Error()+"): no CPU released")
			}
		}
		r.mu.Lock()
		rel := r.rec.set()
		r.mu.Unlock()
		plan := release.Choose(release.Input{Machine: snap, Hotplug: hp, TargetCPUs: targetCPUs, TargetMemory: targetMem,
			ReservedCPUs: r.cfg.ReservedCPUs, Exclusive: excl, Skip: skip, Released: rel})
		cpu, block, held := nextStep(plan)
		if held != "" && cpu < 0 && block < 0 {
			// The pod that holds it was evicted before the release;
			// the kubelet frees its CPUs as its container goes.
			if waitFor.IsZero() {
				waitFor = time.Now().Add(exclusiveWait)
			}
			if time.Now().Before(waitFor) {
				select {
				case <-ctx.Done():
				case <-time.After(exclusivePoll):
				}
				continue
			}
		}
		switch {
		case cpu >= 0:
			if err := r.offline(ctx, cpu, -1); err != nil {
				skip.CPUs = append(skip.CPUs, cpu)
				failed = append(failed, err.Error())
			}
		case block >= 0:
			if err := r.offline(ctx, -1, block); err != nil {
				skip.Blocks = append(skip.Blocks, block)
				failed = append(failed, err.Error())
			}
		default:
			// Done: what failed on the way matters only where the
			// target was not reached (a block skipped for another that
			// went is no shortfall).
			var parts []string
			if held != "" {
				parts = append(parts, held)
			}
			var short []string
			for _, sf := range plan.Shortfalls {
				short = append(short, sf.String())
			}
			if len(short) > 0 {
				parts = append(append(parts, short...), failed...)
			}
			for _, note := range plan.Notes {
				r.log.Info("planned release", "note", note)
			}
			return joinShort(parts)
		}
	}
	return ""
}

// nextStep is the plan's next CPU (or -1) and, with no CPU left, its next
// block (or -1). A CPU held exclusively by a pod is not released: held
// says so, and the plan is taken as having no CPU step left.
func nextStep(p release.Plan) (cpu, block int, held string) {
	cpu, block = -1, -1
	if len(p.CPUs) > 0 {
		// Choose orders the CPUs held exclusively last.
		s := p.CPUs[0]
		if s.AfterEvicting == "" {
			return s.ID, -1, ""
		}
		held = fmt.Sprintf("cpu %d: held exclusively by pod %s, which would silently lose it: not released (evict the pod, or configure more cpu)", s.ID, s.AfterEvicting)
	}
	if len(p.Blocks) > 0 {
		block = p.Blocks[0].ID
	}
	return cpu, block, held
}

// offline records one CPU (or block) and writes it offline; a failed
// write takes it off the record again.
func (r *Releaser) offline(ctx context.Context, cpu, block int) error {
	w := r.cfg.Writer
	var cpus, blocks []int
	if cpu >= 0 {
		cpus = []int{cpu}
	} else {
		blocks = []int{block}
	}
	if err := r.change(func(rec *record) {
		rec.CPUs = append(rec.CPUs, cpus...)
		rec.Blocks = append(rec.Blocks, blocks...)
	}); err != nil {
		return err
	}
	w.Holds().Hold(cpus, blocks)
	start := time.Now()
	var err error
	if cpu >= 0 {
		err = w.OfflineCPU(ctx, cpu)
	} else {
		err = w.OfflineBlock(ctx, block)
	}
	if err == nil {
		r.log.Info("released", "cpu_id", cpu, "block", block, "took", time.Since(start).Round(time.Millisecond))
		if block >= 0 {
			// A kill here is one between two block offlines: the record
			// names this block, the next is not written yet.
			fault.Point("release-block-offlined")
		}
		return nil
	}
	w.Holds().Release(cpus, blocks)
	undo := r.change(func(rec *record) {
		rec.CPUs = slices.DeleteFunc(rec.CPUs, func(id int) bool { return slices.Contains(cpus, id) })
		rec.Blocks = slices.DeleteFunc(rec.Blocks, func(id int) bool { return slices.Contains(blocks, id) })
	})
	r.log.Warn("not released; another is tried", "cpu_id", cpu, "block", block, "err", err, "record", undo)
	return err
}

// giveBack brings back online what the record names and is still present,
// and returns what could not be ("" when all of it came back).
func (r *Releaser) giveBack(ctx context.Context) string {
	snap, hp, err := r.read()
	if err != nil {
		return err.Error() + ": nothing given back"
	}
	r.mu.Lock()
	rel := r.rec.set()
	r.mu.Unlock()
	ret := release.GiveBack(release.Input{Machine: snap, Hotplug: hp, Released: rel})
	// What the hypervisor removed, or someone else onlined, leaves the
	// record.
	drop := func(s release.Set) {
		if s.IsEmpty() {
			return
		}
		cpus := []int(s.CPUs)
		if err := r.change(func(rec *record) {
			rec.CPUs = slices.DeleteFunc(rec.CPUs, func(id int) bool { return slices.Contains(cpus, id) })
			rec.Blocks = slices.DeleteFunc(rec.Blocks, func(id int) bool { return slices.Contains(s.Blocks, id) })
		}); err != nil {
			r.log.Warn("update the release record", "err", err)
		}
		r.cfg.Writer.Holds().Release(cpus, s.Blocks)
	}
	drop(ret.Gone)
	drop(ret.Online)
	var failed []string
	online := func(cpu, block int) {
		var err error
		if cpu >= 0 {
			r.cfg.Writer.Holds().Release([]int{cpu}, nil)
			err = r.cfg.Writer.OnlineCPU(ctx, cpu)
		} else {
			r.cfg.Writer.Holds().Release(nil, []int{block})
			err = r.cfg.Writer.OnlineBlock(ctx, block, true)
		}
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		if err := r.change(func(rec *record) {
			rec.CPUs = slices.DeleteFunc(rec.CPUs, func(id int) bool { return id == cpu })
			rec.Blocks = slices.DeleteFunc(rec.Blocks, func(id int) bool { return id == block })
		}); err != nil {
			r.log.Warn("update the release record", "err", err)
		}
	}
	for _, c := range ret.CPUs {
		if ctx.Err() != nil {
			break
		}
		online(c, -1)
	}
	for _, b := range ret.Blocks {
		if ctx.Err() != nil {
			break
		}
		online(-1, b.ID)
	}
	return joinShort(failed)
}

// GiveBackAll brings back online, in the caller's goroutine, what the
// record names and the machine still has, then removes the record once it
// names nothing: node-resized --uninstall, run with no daemon, leaves no
// hardware offline that node-resized took. It returns what the record
// named and, when something could not be brought back, what and why (it
// stays in the record).
func (r *Releaser) GiveBackAll(ctx context.Context) (named release.Set, short string, err error) {
	r.Stop()
	r.mu.Lock()
	named = r.rec.set()
	r.mu.Unlock()
	if !named.IsEmpty() {
		short = r.giveBack(ctx)
	}
	r.mu.Lock()
	left := r.rec.set()
	r.mu.Unlock()
	if left.IsEmpty() && r.cfg.RecordPath != "" {
		if err := os.Remove(r.cfg.RecordPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return named, short, fmt.Errorf("remove the release record: %w", err)
		}
	}
	return named, short, nil
}

// StaysOnline says which of snap's online CPUs a release to target's cpu
// would leave online, with the exclusive assignments as the kubelet's
// checkpoint has them now: a CPU a pod holds is chosen only where the
// target leaves no other, and the evictions before the release then evict
// that pod (its exclusive CPU is not among those that stay). nil when the
// machine or the assignments cannot be read, or the target names no cpu.
func (r *Releaser) StaysOnline(snap *topology.Snapshot, target resources.List) []int {
	v, ok := target[resources.CPU]
	if !ok || snap == nil {
		return nil
	}
	hp, err := r.cfg.FS.Hotplug()
	if err != nil {
		return nil
	}
	var excl map[int]string
	if r.cfg.Exclusive != nil {
		if excl, err = r.cfg.Exclusive(); err != nil {
			return nil
		}
	}
	plan := release.Choose(release.Input{Machine: snap, Hotplug: hp, TargetCPUs: int(v / 1000), ReservedCPUs: r.cfg.ReservedCPUs, Exclusive: excl})
	gone := map[int]bool{}
	for _, c := range plan.CPUs {
		gone[c.ID] = true
	}
	stay := []int{}
	for _, c := range snap.CPUs.Online {
		if !gone[c] {
			stay = append(stay, c)
		}
	}
	return stay
}

// Released says what the record holds released on the machine snap: the
// CPUs and blocks present and offline, each memory device with how much of
// it is offline (safe to unplug when all is), and how many released ones
// the hypervisor removed. Nothing released reads nothing; otherwise the
// hotplug details are read once per snap.
func (r *Releaser) Released(snap *topology.Snapshot) types.Released {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rec.CPUs)+len(r.rec.Blocks) == 0 || snap == nil {
		return types.Released{}
	}
	if snap == r.cachedSnap {
		return r.cached
	}
	hp, err := r.cfg.FS.Hotplug()
	if err != nil {
		r.log.Warn("read the hotplug details", "err", err)
	}
	// What the hypervisor removed leaves the record, and its hold: the
	// release's expected end. Held, a CPU or block that came back under
	// the same id (a DIMM plugged into the freed range) would never be
	// onlined.
	if gone := release.GiveBack(release.Input{Machine: snap, Hotplug: hp, Released: r.rec.set()}).Gone; !gone.IsEmpty() {
		r.pruneLocked([]int(gone.CPUs), gone.Blocks)
	}
	u := release.Unpluggable(release.Input{Machine: snap, Hotplug: hp, Released: r.rec.set()})
	out := types.Released{Spec: r.rec.Spec, CPUs: []int(u.CPUs)}
	present := map[int]bool{}
	for _, b := range snap.MemoryBlocks {
		present[b.ID] = b.State == "offline"
	}
	for _, id := range r.rec.Blocks {
		if present[id] {
			out.Blocks = append(out.Blocks, id)
		}
	}
	ours := map[string]bool{} // the devices with a block the record names
	if hp != nil {
		for _, d := range hp.MemoryDevices {
			for _, b := range d.Blocks {
				if slices.Contains(r.rec.Blocks, b) {
					ours[d.ID] = true
					break
				}
			}
		}
	}
	for _, d := range u.MemoryDevices {
		if d.BlocksOffline == 0 || !ours[d.ID] {
			continue
		}
		out.Devices = append(out.Devices, types.ReleasedDevice{ID: d.ID, Start: d.Start, End: d.End, Size: int64(d.Size),
			Offline: d.BlocksOffline, Blocks: d.Blocks, SafeToUnplug: d.SafeToUnplug})
	}
	for _, v := range u.VirtioMem {
		out.Devices = append(out.Devices, types.ReleasedDevice{ID: "virtio_mem:" + v.Name, Size: int64(v.ReleasedBytes),
			Offline: len(v.Blocks), Blocks: len(v.Blocks), SafeToUnplug: true})
	}
	r.cachedSnap, r.cached = snap, out
	return out
}

// pruneLocked drops CPUs and blocks from the record and lifts their
// holds; r.mu is held. A failed save leaves the record on disk as it was
// (the next start prunes it again) and is logged.
func (r *Releaser) pruneLocked(cpus, blocks []int) {
	r.rec.CPUs = slices.DeleteFunc(r.rec.CPUs, func(id int) bool { return slices.Contains(cpus, id) })
	r.rec.Blocks = slices.DeleteFunc(r.rec.Blocks, func(id int) bool { return slices.Contains(blocks, id) })
	r.cfg.Writer.Holds().Release(cpus, blocks)
	r.cachedSnap = nil
	if err := r.save(); err != nil {
		r.log.Warn("update the release record", "err", err)
	}
	r.log.Info("released CPUs and memory blocks the hypervisor removed leave the record", "cpus", cpus, "blocks", blocks)
}

// joinShort joins what fell short into one sentence list.
func joinShort(parts []string) string {
	var out []string
	for _, p := range parts {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
