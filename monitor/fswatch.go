package monitor

import (
	"errors"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/uevent"
)

// The filesystem watch follows the size of the filesystem that holds the
// kubelet's root directory, the node's ephemeral-storage capacity. The
// filesystem grows online (a cloud disk resized, then growpart and
// resize2fs or xfs_growfs) and no uevent says so: the kernel tells only of
// the block device (its change uevent with RESIZE=1), and the partition
// and the filesystem are grown after it, by hand or by cloud-init. So the
// watch polls (Config.FSPoll, one statfs), and after a device's resize
// polls at the MemTotal watch's pace for a while
// (Config.FSWatchAfterResize). A size that differs from the model's is a
// change of the totals: the batch re-reads them (topology.FS.Update of no
// device), a loss when the filesystem shrank.

// pollWarnEvery is how often a watch that keeps failing (the filesystem
// watch, the MemTotal watch) says so again.
const pollWarnEvery = 10 * time.Minute

// pollWarnings rate-limits a polling watch's warnings: the first failed
// poll warns, then at most one warning every pollWarnEvery, counting the
// polls that failed in between; the first poll that works again says so
// once. The zero value is a watch whose last poll worked.
type pollWarnings struct {
	warned time.Time // the last warning; zero when the last poll worked
	failed int       // polls failed since the last warning
}

// fail records a failed poll at now; warn is true when it is to be told,
// with the number of polls that failed since the last warning.
func (p *pollWarnings) fail(now time.Time) (warn bool, failed int) {
	p.failed++
	if !p.warned.IsZero() && now.Sub(p.warned) < pollWarnEvery {
		return false, p.failed
	}
	failed = p.failed
	p.warned, p.failed = now, 0
	return true, failed
}

// ok records a poll that worked; recovered is true when the watch had
// warned, so that its recovery is told once.
func (p *pollWarnings) ok() (recovered bool) {
	recovered = !p.warned.IsZero()
	*p = pollWarnings{}
	return recovered
}

// errNotMeasured is the filesystem watch's failure when the machine
// measures no filesystem: Machine.EphemeralStorage is 0 with no error.
var errNotMeasured = errors.New("the size read is 0: no kubelet root directory is measured")

// fsWatch is the filesystem watch's state. It belongs to Run's goroutine.
type fsWatch struct {
	timer clock.Timer      // fires at the next poll; nil when the watch is off
	tick  <-chan time.Time // the timer's channel; nil when the watch is off
	armed time.Time        // when the timer fires

	slow   time.Duration // Config.FSPoll
	fast   time.Duration // the interval after a disk's resize
	window time.Duration // Config.FSWatchAfterResize; negative: none
	// fastUntil is when the window after the last disk resize ends;
	// zero when there is none.
	fastUntil time.Time

	seen uint64 // the last size the watch acted on
	// warn rate-limits the warnings of polls that failed.
	warn pollWarnings
}

// start arms the watch's first poll; size is the first model's.
func (w *fsWatch) start(clk clock.WithTicker, cfg Config, size uint64) {
	w.slow, w.window, w.seen = cfg.FSPoll, cfg.FSWatchAfterResize, size
	w.fast = time.Second
	if cfg.MemPoll > 0 {
		w.fast = cfg.MemPoll
	}
	w.fast = min(w.fast, w.slow)
	w.timer = clk.NewTimer(w.slow)
	w.tick = w.timer.C()
	w.armed = clk.Now().Add(w.slow)
}

// arm sets the timer for the next poll, d after now. The timer has fired
// and its tick been taken, or it was stopped.
func (w *fsWatch) arm(now time.Time, d time.Duration) {
	w.timer.Reset(d)
	w.armed = now.Add(d)
}

// pollFilesystem is one poll of the filesystem watch: a size that differs
// from the model's opens a batch, once per new size, so that a rebuild
// already pending for it is not pushed out by every later poll. A poll
// that fails, or reads no size, changes nothing: the watch warns, at most
// every pollWarnEvery, and polls again at its interval.
func (l *loop) pollFilesystem(at time.Time) {
	m, w := l.m, &l.fs
	now := l.clock.Now()
	next := w.slow
	switch {
	case now.Before(w.fastUntil):
		next = w.fast
	case !w.fastUntil.IsZero():
		w.fastUntil = time.Time{}
		m.log.Debug("filesystem watch back to its interval after a disk's resize", "interval", w.slow)
	}
	defer w.arm(now, next)
	size, err := m.machine.EphemeralStorage()
	if err == nil && size == 0 {
		err = errNotMeasured
	}
	if err != nil {
		l.fsFailed(now, err)
		return
	}
	if w.warn.ok() {
		m.log.Info("filesystem watch reads the kubelet root filesystem's size again", "bytes", size)
	}
	if size == w.seen {
		return
	}
	w.seen = size
	snap, _ := m.Snapshot()
	cur := snap.EphemeralStorage
	if size != cur {
		m.log.Debug("kubelet root filesystem's size changed", "old_bytes", cur, "new_bytes", size)
		l.arrive(TriggerFilesystem, at, size < cur, false, size > cur)
	}
}

// fsFailed records a poll that failed, and warns unless the watch warned
// less than pollWarnEvery ago.
func (l *loop) fsFailed(now time.Time, err error) {
	if warn, failed := l.fs.warn.fail(now); warn {
		l.m.log.Warn("filesystem watch cannot read the kubelet root filesystem's size; ephemeral-storage is re-read only by the model's rebuilds",
			"err", err, "failed_polls", failed, "next_warning_after", pollWarnEvery)
	}
}

// blockEvent takes a uevent of the block subsystem. A change with
// RESIZE=1 is the kernel's word that a block device's capacity changed
// (set_capacity_and_notify: a virtio-blk, NVMe or SCSI disk resized, a
// device-mapper volume extended, a loop device after losetup -c): the
// filesystem watch polls fast for its window, to see the filesystem grown
// after it. No block event opens a batch or names a device of the model.
func (l *loop) blockEvent(ev uevent.Event) {
	l.m.countBlockEvent()
	w := &l.fs
	if ev.Action != uevent.ActionChange || ev.Env["RESIZE"] != "1" || w.timer == nil || w.window < 0 {
		return
	}
	now := l.clock.Now()
	w.fastUntil = now.Add(w.window)
	l.m.log.Info("a disk was resized; watching the kubelet root filesystem's size closely",
		"devpath", ev.DevPath, "devname", ev.Env["DEVNAME"], "seqnum", ev.Seqnum, "interval", w.fast, "for", w.window)
	if w.armed.After(now.Add(w.fast)) {
		w.timer.Stop()
		select { // a tick the clock sent and the loop has not taken
		case <-w.tick:
		default:
		}
		w.arm(now, w.fast)
	}
}
