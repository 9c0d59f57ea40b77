package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// item is one input from the socket reader.
type item struct {
	ev   uevent.Event
	lost bool
	// gap says the kernel's SEQNUM jumped with no overflow of the socket:
	// the events this socket did not get were, as a rule, tagged for
	// other network namespaces (a pod's veth devices). A CPU's, a memory
	// block's or a node's uevent carries no namespace tag, and the kernel
	// sends untagged uevents to every network namespace that the initial
	// user namespace owns, this socket's included.
	gap bool
}

// batch collects the inputs of one coalesced rebuild.
type batch struct {
	triggers []Trigger
	events   int
	seqnums  Seqnums
	first    time.Time // arrival of the first timed input (uevent, MemTotal or filesystem poll)
	deadline time.Time
	// due says the batch waits for no quiet window: it runs at deadline
	// (now, or a retry's backoff), and later inputs join it without
	// pushing it out. A resync, the leading edge of a burst and a loss
	// are due at once.
	due     bool
	waiters []chan resyncReply
	retries int
	// devs are the devices the batch's uevents named, in arrival order,
	// repeats included: the incremental rebuild re-reads these.
	devs []topology.Device
	// full says the rebuild must read the whole machine: an input other
	// than a uevent, a SEQNUM gap or the filesystem watch (lost events, a
	// resync, the MemTotal watch) is in the batch.
	full bool
	// loss says an input of the batch took capacity away (or may have:
	// lost events).
	loss bool
}

// fullReason says why the batch reads the whole machine: its first
// trigger that reads it. A uevent, a SEQNUM gap and the filesystem watch
// re-read only what they name and the totals, so they are never the
// reason: a batch that holds only them is incremental, and Update names
// its own reason when it reads the whole machine after all.
func (b *batch) fullReason() string {
	for _, t := range b.triggers {
		switch t {
		case TriggerStartup:
			return "startup"
		case TriggerLost:
			return "uevents lost"
		case TriggerResync:
			return "periodic resync"
		case TriggerRequest:
			return "resync requested"
		case TriggerMemTotal:
			return "MemTotal changed with no uevent"
		}
	}
	return "full rebuild"
}

func (b *batch) has(t Trigger) bool {
	return slices.Contains(b.triggers, t)
}

func (b *batch) addTrigger(t Trigger) {
	for _, x := range b.triggers {
		if x == t {
			return
		}
	}
	b.triggers = append(b.triggers, t)
}

// reply answers every resync request waiting on the batch.
func (b *batch) reply(res ResyncResult, err error) {
	for _, w := range b.waiters {
		w <- resyncReply{res: res, err: err}
	}
}

// Run builds the first model, then runs the loop until ctx is done. It
// closes the source before it returns and waits for its reader. An error
// means the first model could not be built.
func (m *Monitor) Run(ctx context.Context) error {
	defer close(m.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.src != nil {
		// Close the source on every return path so the reader ends.
		defer m.src.Close()
	}
	snap, err := m.firstModel()
	if err != nil {
		return err
	}
	l := m.newLoop(snap)
	defer l.stop()
	close(m.ready)
	if m.src != nil {
		wg.Go(func() { m.read(ctx, l.queue) })
	}
	l.run(ctx)
	return nil
}

// firstModel reads and installs the startup model.
func (m *Monitor) firstModel() (*topology.Snapshot, error) {
	start := m.clock.Now()
	snap, err := m.machine.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("build the first machine model: %w", err)
	}
	m.mu.Lock()
	m.stats.StartedAt = start
	m.mu.Unlock()
	b := &batch{triggers: []Trigger{TriggerStartup}}
	m.install(snap, b, Rebuild{Kind: RebuildFull, Reason: b.fullReason()}, nil, m.clock.Since(start))
	return snap, nil
}

// loop is the detection loop's state. It belongs to Run's goroutine.
type loop struct {
	m     *Monitor
	clock clock.WithTicker
	queue chan item // from the socket reader

	tickers    []clock.Ticker
	memTick    <-chan time.Time // nil when the MemTotal watch is off
	resyncTick <-chan time.Time // nil when the periodic resync is off

	// fs is the filesystem watch; its timer is nil when it is off.
	fs fsWatch

	// timer fires at the pending batch's deadline; armed is the deadline
	// it is set for (zero when none).
	timer clock.Timer
	armed time.Time

	pending *batch
	memSeen uint64       // the last MemTotal the watch acted on
	memWarn pollWarnings // rate-limits the MemTotal watch's warnings
	// active is when the loop last took a timed input (a uevent, lost
	// events, a MemTotal or filesystem change) or finished rebuilding a
	// batch of them; zero before the first. burst says that an input has
	// been held since the last leading edge: a burst is under way. An
	// input is a leading edge, rebuilt at once, when it comes a quiet
	// window after active or later, or, while no burst is under way, a
	// quarter of one, or at any time when it is a gain and the first input
	// after the rebuild of a loss (afterLoss).
	active    time.Time
	burst     bool
	afterLoss bool
}

func (m *Monitor) newLoop(snap *topology.Snapshot) *loop {
	l := &loop{m: m, clock: m.clock, queue: make(chan item, m.cfg.QueueSize), memSeen: snap.MemTotal}
	if m.cfg.MemPoll > 0 {
		t := m.clock.NewTicker(m.cfg.MemPoll)
		l.tickers = append(l.tickers, t)
		l.memTick = t.C()
	}
	if m.cfg.Resync > 0 {
		t := m.clock.NewTicker(m.cfg.Resync)
		l.tickers = append(l.tickers, t)
		l.resyncTick = t.C()
	}
	l.timer = m.clock.NewTimer(time.Hour)
	l.timer.Stop()
	if m.cfg.FSPoll > 0 {
		l.fs.start(m.clock, m.cfg, snap.EphemeralStorage)
	}
	return l
}

func (l *loop) stop() {
	for _, t := range l.tickers {
		t.Stop()
	}
	l.timer.Stop()
	if l.fs.timer != nil {
		l.fs.timer.Stop()
	}
}

// run turns until ctx is done: each input is taken into the pending batch,
// then the batch is rebuilt if it is due.
func (l *loop) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			if l.pending != nil {
				l.pending.reply(ResyncResult{}, ctx.Err())
			}
			return
		case it := <-l.queue:
			l.intake(it)
		case <-l.m.kick:
			l.overflowed()
		case at := <-l.memTick:
			l.pollMemTotal(at)
		case at := <-l.fs.tick:
			l.pollFilesystem(at)
		case <-l.resyncTick:
			l.now(TriggerResync)
		case req := <-l.m.requests:
			l.request(req)
		case p := <-l.m.pings:
			// A deadline that has passed is handled before the answer,
			// whichever the select took first: an answer means the loop
			// has caught up with its clock.
			select {
			case <-l.timer.C():
				l.armed = time.Time{}
				l.rebuildIfDue()
			default:
			}
			close(p)
		case <-l.timer.C():
			l.armed = time.Time{}
		}
		l.rebuildIfDue()
	}
}

// intake takes one item from the socket reader: a uevent, or word that
// events were lost.
func (l *loop) intake(it item) {
	if it.lost {
		// Lost events are never delayed: what they hid may be a loss.
		l.arrive(TriggerLost, l.clock.Now(), true, false, false)
		return
	}
	if it.gap {
		// Not delayed either, but cheap: the incremental rebuild of no
		// device re-reads the CPU lists, the node directories and the
		// memory totals, and reads the whole machine when any of them
		// moved. A lost CPU or memory block moves them, so no loss
		// hides behind a gap; a block added offline (no capacity) waits
		// for the next event that names it or the periodic resync.
		l.arrive(TriggerGap, l.clock.Now(), true, false, false)
		return
	}
	if it.ev.Subsystem == uevent.SubsystemBlock {
		l.blockEvent(it.ev)
		return
	}
	l.m.countUevent()
	at := it.ev.Received
	if at.IsZero() {
		at = l.clock.Now()
	}
	dev := topology.ParseDevPath(it.ev.DevPath)
	// A memory block added is offline: no capacity yet, so nothing is
	// lost by waiting for the rest of its DIMM. And reading its
	// valid_zones while the kernel is still adding the DIMM's other
	// blocks was seen to block for minutes (Linux 6.1, ACPI hotplug under
	// QEMU): it is never a leading edge. Nor is a block coming online, a
	// gain that comes with the rest of its DIMM (onlined block by block,
	// by the kernel or by --auto-online): the DIMM is then one change for
	// its blocks' arrival and one for their capacity.
	held := dev.Kind == topology.DeviceMemory && (it.ev.Action == uevent.ActionAdd || it.ev.Action == uevent.ActionOnline)
	snap, _ := l.m.Snapshot()
	gain := it.ev.Action == uevent.ActionOnline || it.ev.Action == uevent.ActionAdd
	b := l.arrive(TriggerUevent, at, loss(snap, it.ev.Action, dev), held, gain)
	b.events++
	b.devs = append(b.devs, dev)
	if it.ev.Seqnum != 0 {
		b.seqnums.Add(it.ev.Seqnum)
	}
}

// overflowed answers the reader's kick after the queue was full: the
// events that did not fit are lost, so the machine is rescanned.
func (l *loop) overflowed() {
	m := l.m
	if !m.overflow.Swap(false) {
		return
	}
	m.cfg.Metrics.UeventsDropped.WithLabelValues("queue_full").Inc()
	m.countLost()
	m.log.Warn("uevent queue full; events lost, rescanning the machine", "queue_size", m.cfg.QueueSize)
	l.arrive(TriggerLost, l.clock.Now(), true, false, false)
}

// loss says whether a uevent takes away capacity the model snap holds: an
// offline or a remove event (the actions that take a device away) of a
// device whose going is a loss of the model (topology.IsLoss). Such an
// event is never held in a burst.
func loss(snap *topology.Snapshot, a uevent.Action, dev topology.Device) bool {
	return (a == uevent.ActionOffline || a == uevent.ActionRemove) && topology.IsLoss(snap, dev)
}

// pollMemTotal is the MemTotal watch: a MemTotal that differs from the
// model's with no uevent (a balloon, virtio-mem) opens a batch, once per
// new value, so that a rebuild already pending for this value is not
// pushed out by every later poll.
func (l *loop) pollMemTotal(at time.Time) {
	m := l.m
	mt, err := m.machine.MemTotal()
	if err != nil {
		// Rate-limited like the filesystem watch's: this poll runs every
		// second.
		if warn, failed := l.memWarn.fail(l.clock.Now()); warn {
			m.log.Warn("MemTotal watch failed", "err", err, "failed_polls", failed, "next_warning_after", pollWarnEvery)
		}
		return
	}
	if l.memWarn.ok() {
		m.log.Info("MemTotal watch reads MemTotal again", "bytes", mt)
	}
	if mt == l.memSeen {
		return
	}
	l.memSeen = mt
	snap, _ := m.Snapshot()
	cur := snap.MemTotal
	if mt != cur {
		m.log.Debug("MemTotal changed with no uevent", "old_bytes", cur, "new_bytes", mt)
		// A gain while the auto-onliner is still onlining is one of its
		// blocks seen before its uevent: it joins the onliner's burst
		// rather than leading a change of its own.
		busy := m.cfg.Busy
		l.arrive(TriggerMemTotal, at, mt < cur, mt > cur && busy != nil && busy(), mt > cur)
	}
}

// request is a resync asked for through Resync: it runs at once and
// answers when its rebuild is done.
func (l *loop) request(req resyncRequest) {
	b := l.now(TriggerRequest)
	b.waiters = append(b.waiters, req.reply)
}

// open returns the pending batch, opening one if there is none.
func (l *loop) open() *batch {
	if l.pending == nil {
		l.pending = &batch{}
	}
	return l.pending
}

// arrive records a timed input that arrived at at, and says when its batch
// is due:
//
//   - a leading edge and a loss are due at once: the model follows a
//     single event, and the first of a burst, within the rebuild's time,
//     and a loss is never held. An input is a leading edge when the loop
//     has taken no timed input and rebuilt none for a quiet window, or,
//     while no burst is under way, for a quarter of one, or when it is a
//     gain (an online or add event, a MemTotal or a filesystem that grew)
//     and the first input after a loss was rebuilt: single events a few
//     milliseconds apart are each rebuilt at once, and so is a CPU
//     brought back however soon after it was taken offline (the gain may
//     undo the loss, and the loss's rebuild ended whatever came before
//     it; the removals that follow offlines still make one burst). A held
//     input (a memory block added or onlined) is never a leading edge;
//   - any other input starts a burst, or goes on with it: it opens the
//     burst's trailing batch or extends it, pushing its deadline out to
//     the end of the quiet window but never past MaxWait from the batch's
//     first input. The burst lasts until an input comes a quiet window
//     after the loop was last busy.
//
// The quiet window counts from when the loop takes the input, not from
// its arrival: inputs that queued up while the loop was rebuilding are
// one burst, not a row of late batches each already past its window.
func (l *loop) arrive(t Trigger, at time.Time, loss, held, gain bool) *batch {
	b := l.open()
	b.addTrigger(t)
	if t != TriggerUevent && t != TriggerGap && t != TriggerFilesystem {
		b.full = true
	}
	if b.first.IsZero() {
		b.first = at
	}
	now := l.clock.Now()
	gap, quiet := now.Sub(l.active), l.m.cfg.Quiet
	leading := !held && (l.active.IsZero() || gap >= quiet || (!l.burst && (gap >= quiet/4 || (gain && l.afterLoss))))
	l.active = now
	l.afterLoss = false
	b.loss = b.loss || loss
	if leading {
		l.burst = false
	}
	switch {
	case leading || loss:
		b.due = true
		b.deadline = now
	case b.due:
		// Due already (a leading edge that the loop is draining the
		// queue into), or waiting out a retry's backoff: either way
		// inputs are coming close together, so a burst is under way
		// and the next ones are held for its trailing batch.
		l.burst = true
	default:
		l.burst = true
		quietFrom := at
		if now.After(quietFrom) {
			quietFrom = now
		}
		b.deadline = quietFrom.Add(l.m.cfg.Quiet)
		if limit := b.first.Add(l.m.cfg.MaxWait); b.deadline.After(limit) {
			b.deadline = limit
		}
	}
	return b
}

// now makes the pending batch a full rebuild that runs as soon as the loop
// comes round (a resync).
func (l *loop) now(t Trigger) *batch {
	b := l.open()
	b.addTrigger(t)
	b.full = true
	b.due = true
	b.deadline = l.clock.Now()
	return b
}

// rebuildIfDue rebuilds the pending batch once its deadline has come, and
// otherwise sets the timer for it. A rebuild that failed leaves its batch
// pending, due after the retry's backoff.
func (l *loop) rebuildIfDue() {
	b := l.pending
	if b == nil {
		return
	}
	now := l.clock.Now()
	if b.deadline.After(now) {
		l.arm(b.deadline)
		return
	}
	if l.waitForBusy(b, now) {
		l.arm(b.deadline)
		return
	}
	l.disarm()
	l.drain(b)
	l.pending = l.m.rebuild(b, func() int { return len(l.queue) })
	if !b.first.IsZero() {
		l.active = l.clock.Now()
		l.afterLoss = b.loss && l.pending == nil
	}
	if l.pending != nil {
		l.arm(l.pending.deadline)
	}
}

// waitForBusy pushes a trailing batch whose quiet window has passed out by
// another window while Config.Busy says more gains are coming, up to
// MaxWait from its first input; it reports whether it did.
func (l *loop) waitForBusy(b *batch, now time.Time) bool {
	busy := l.m.cfg.Busy
	if b.due || b.first.IsZero() || busy == nil || !busy() {
		return false
	}
	limit := b.first.Add(l.m.cfg.MaxWait)
	if !now.Before(limit) {
		return false
	}
	b.deadline = now.Add(l.m.cfg.Quiet)
	if b.deadline.After(limit) {
		b.deadline = limit
	}
	return true
}

// drain takes into b, which is about to be rebuilt, the inputs that have
// reached the queue already: the rebuild reads sysfs as it is now, which
// shows what their events name, so they are rebuilt with b rather than
// after it. It takes no more than were queued when it began, so that a
// steady stream cannot hold the rebuild up.
func (l *loop) drain(b *batch) {
	b.due = true // the inputs join without pushing b out
	for n := len(l.queue); n > 0; n-- {
		l.intake(<-l.queue)
	}
}

// arm sets the timer for deadline unless it is set for it already, so that
// an input that does not move the deadline leaves the timer alone.
func (l *loop) arm(deadline time.Time) {
	if deadline.Equal(l.armed) {
		return
	}
	l.stopTimer()
	l.armed = deadline
	l.timer.Reset(deadline.Sub(l.clock.Now()))
}

func (l *loop) disarm() {
	if !l.armed.IsZero() {
		l.stopTimer()
		l.armed = time.Time{}
	}
}

// stopTimer stops the timer and takes a tick it sent and the loop has not
// read yet, so that a stale tick never ends the next deadline early. Go's
// own timers drop such a tick by themselves; a clock whose timers keep it
// in a buffered channel (the tests' fake clock) would otherwise block its
// next tick on the full channel.
func (l *loop) stopTimer() {
	l.timer.Stop()
	select {
	case <-l.timer.C():
	default:
	}
}

// read moves uevents from the source into the queue. It never blocks on a
// full queue: the event is counted as lost and the loop rescans instead.
func (m *Monitor) read(ctx context.Context, queue chan<- item) {
	var failures int
	for {
		ev, err := m.src.Receive()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var le *uevent.LostError
			if errors.As(err, &le) && le.Reason == uevent.DropSeqnumGap {
				m.countGap()
				m.log.Debug("uevent SEQNUM gap; re-reading the machine's totals", "err", err)
				m.offer(queue, item{gap: true})
				continue
			}
			if errors.Is(err, uevent.ErrLost) {
				m.countLost()
				m.log.Warn("kernel uevents lost; rescanning the machine", "err", err)
				m.offer(queue, item{lost: true})
				continue
			}
			// An unexpected socket error: keep the daemon alive, rescan,
			// and back off so a broken socket does not spin.
			failures++
			m.log.Error("read kernel uevents", "err", err, "consecutive_failures", failures)
			m.offer(queue, item{lost: true})
			select {
			case <-ctx.Done():
				return
			case <-m.clock.After(min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)):
			}
			continue
		}
		failures = 0
		m.offer(queue, item{ev: ev})
	}
}

func (m *Monitor) offer(queue chan<- item, it item) {
	select {
	case queue <- it:
	default:
		m.overflow.Store(true)
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

func (m *Monitor) countUevent() {
	m.mu.Lock()
	m.stats.Uevents++
	m.mu.Unlock()
}

func (m *Monitor) countBlockEvent() {
	m.mu.Lock()
	m.stats.BlockEvents++
	m.mu.Unlock()
}

func (m *Monitor) countGap() {
	m.mu.Lock()
	m.stats.SeqnumGaps++
	m.mu.Unlock()
}

func (m *Monitor) countLost() {
	m.mu.Lock()
	m.stats.LostEvents++
	m.mu.Unlock()
}
