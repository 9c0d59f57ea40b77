package hotplug

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/topology"
)

// AutoOnliner onlines what was hot-added, through a Writer: what the
// Writer's Holds hold stays offline. It is safe for concurrent use.
// OnChange only queues the work; Run does it, so that a slow online (a CPU
// coming up, a block being onlined) never holds up the detection loop.
type AutoOnliner struct {
	w       *Writer
	log     *slog.Logger
	m       *metrics.Metrics
	work    chan job
	pending atomic.Int64 // jobs queued or being carried out

	mu   sync.Mutex // guards prev and unseen
	prev *topology.Snapshot
	// unseen are the devices brought online that no model has shown
	// online yet, each with the time after which it is not waited for.
	unseen map[job]time.Time
	now    func() time.Time
}

// UnseenMax bounds how long Settling waits for a model to show a device
// the onliner brought online (the relay's own bound, kube's
// GainsPendingMax, is the same).
const UnseenMax = 10 * time.Second

// job is one device to bring online.
type job struct {
	kind string // kindCPU or kindBlock
	id   int
}

func (j job) name() string {
	if j.kind == kindCPU {
		return cpuNamePrefix + strconv.Itoa(j.id)
	}
	return blockPrefix + strconv.Itoa(j.id)
}

// NewAutoOnliner returns an onliner that writes through w.
func NewAutoOnliner(w *Writer, log *slog.Logger, m *metrics.Metrics) *AutoOnliner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.New()
	}
	return &AutoOnliner{w: w, log: log, m: m, work: make(chan job, 8192), unseen: make(map[job]time.Time), now: time.Now}
}

// OnChange queues the CPUs and memory blocks that appeared, offline, since
// the previous model. It is meant for monitor.Config.OnChange and never
// blocks.
func (o *AutoOnliner) OnChange(_ monitor.Change, snap *topology.Snapshot) {
	o.mu.Lock()
	prev := o.prev
	o.prev = snap
	if len(o.unseen) > 0 {
		blocks := blockStates(snap)
		for j := range o.unseen {
			if shown(snap, blocks, j) {
				delete(o.unseen, j)
			}
		}
	}
	o.mu.Unlock()
	if prev == nil {
		return // the first model: nothing was hot-added yet
	}
	for _, id := range AddedCPUs(prev, snap) {
		o.queue(job{kindCPU, id})
	}
	for _, b := range AddedBlocks(prev, snap) {
		o.queue(job{kindBlock, b.ID})
	}
}

func (o *AutoOnliner) queue(j job) {
	o.pending.Add(1)
	select {
	case o.work <- j:
	default:
		o.pending.Add(-1)
		o.m.AutoOnline.WithLabelValues(j.kind, "error").Inc()
		o.log.Error("too many hot-added devices queued; not bringing this one online", "device", j.name())
	}
}

// Busy reports whether devices are queued or being brought online: their
// online events are still to come. It is meant for monitor.Config.Busy.
func (o *AutoOnliner) Busy() bool { return o.pending.Load() > 0 }

// Settling reports whether Busy does, or a device the onliner brought
// online is not online yet in the models it was given (OnChange), for at
// most UnseenMax after its write: the hot-add's last change is still to
// come. It is meant for the relay's hold of a gain (kube's
// HoldGainsWhile), so that a DIMM onlined block by block on a loaded
// machine is one patch even when its last blocks' model change comes
// after the last write: Busy alone ends at the write, and the relay would
// patch the blocks seen so far, then the rest. (The detection loop takes
// Busy: a batch held until the model shows it would hold itself.)
func (o *AutoOnliner) Settling() bool {
	if o.Busy() {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	for j, until := range o.unseen {
		if now.Before(until) {
			return true
		}
		delete(o.unseen, j) // no model showed it: not waited for any longer
	}
	return false
}

// blockStates indexes snap's memory blocks' states by id, for shown.
func blockStates(snap *topology.Snapshot) map[int]string {
	m := make(map[int]string, len(snap.MemoryBlocks))
	for _, b := range snap.MemoryBlocks {
		m[b.ID] = b.State
	}
	return m
}

// shown reports whether snap shows j's device online, or gone; blocks is
// snap's blocks' states by blockStates, or nil for a scan of one lookup.
func shown(snap *topology.Snapshot, blocks map[int]string, j job) bool {
	if j.kind == kindCPU {
		return snap.CPUs.Online.Contains(j.id) || !snap.CPUs.Present.Contains(j.id)
	}
	if blocks == nil {
		for _, b := range snap.MemoryBlocks {
			if b.ID == j.id {
				return b.State != topology.BlockOffline
			}
		}
		return true
	}
	state, ok := blocks[j.id]
	return !ok || state != topology.BlockOffline
}

// await records j, just brought online, as unseen unless the newest model
// already shows it. It runs before the job leaves pending, so that
// Settling never says false in between.
func (o *AutoOnliner) await(j job) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.prev != nil && shown(o.prev, nil, j) {
		return
	}
	o.unseen[j] = o.now().Add(UnseenMax)
}

// Run brings the queued devices online until ctx is done. A write under
// way when ctx is done is interrupted.
func (o *AutoOnliner) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-o.work:
			if o.online(ctx, j) {
				o.await(j)
			}
			o.pending.Add(-1)
		}
	}
}

// online brings j's device online and reports whether it is online now
// (brought online, or found online).
func (o *AutoOnliner) online(ctx context.Context, j job) bool {
	var value string
	var err error
	if j.kind == kindCPU {
		value, err = cpuOnline, o.w.OnlineCPU(ctx, j.id)
	} else {
		// Movable first, so the block can be unplugged again; the
		// kernel refuses it where the block cannot be movable, then
		// "online" takes its default zone.
		value, err = blockMovable, o.w.OnlineBlock(ctx, j.id, true)
		var werr *WriteError
		if errors.As(err, &werr) && werr.Cut == nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrHeld) {
			value, err = blockOnline, o.w.OnlineBlock(ctx, j.id, false)
		}
	}
	switch {
	case err == nil:
		o.m.AutoOnline.WithLabelValues(j.kind, "onlined").Inc()
		o.log.Info("brought a hot-added device online", "device", j.name(), "value", value)
		return true
	case errors.Is(err, fs.ErrNotExist):
		// gone again before we came to it
	case errors.Is(err, ErrHeld):
		o.m.AutoOnline.WithLabelValues(j.kind, "held").Inc()
		o.log.Info("not bringing a hot-added device online: it is held offline for its unplug", "device", j.name())
	case o.onlineNow(j):
		// Someone was first: a udev rule, or the kernel itself (pseries'
		// DLPAR onlines every CPU and memory block it attaches, while the
		// add uevent is on its way). The kernel refuses a block already
		// online (EINVAL); nothing is wrong.
		o.m.AutoOnline.WithLabelValues(j.kind, "already").Inc()
		o.log.Info("a hot-added device was online before the daemon came to it", "device", j.name(), "write", err)
		return true
	default:
		o.m.AutoOnline.WithLabelValues(j.kind, "error").Inc()
		o.log.Error("bring a hot-added device online", "device", j.name(), "err", err)
	}
	return false
}

// onlineNow reads whether j's device is online (cpuN/online is 1, memoryN/state
// online); false when it cannot be read.
func (o *AutoOnliner) onlineNow(j job) bool {
	path, want := cpuPath(o.w.root, j.id), cpuOnline
	if j.kind == kindBlock {
		path, want = blockPath(o.w.root, j.id), blockOnline
	}
	b, err := os.ReadFile(path)
	return err == nil && strings.TrimSpace(string(b)) == want
}

// AddedCPUs returns the CPUs present in cur but not in prev that are offline.
func AddedCPUs(prev, cur *topology.Snapshot) []int {
	var out []int
	for _, id := range cur.CPUs.Present {
		if !prev.CPUs.Present.Contains(id) && !cur.CPUs.Online.Contains(id) {
			out = append(out, id)
		}
	}
	return out
}

// AddedBlocks returns the memory blocks in cur but not in prev that are
// offline.
func AddedBlocks(prev, cur *topology.Snapshot) []topology.MemoryBlock {
	had := make(map[int]bool, len(prev.MemoryBlocks))
	for _, b := range prev.MemoryBlocks {
		had[b.ID] = true
	}
	var out []topology.MemoryBlock
	for _, b := range cur.MemoryBlocks {
		if !had[b.ID] && b.State == topology.BlockOffline {
			out = append(out, b)
		}
	}
	return out
}
