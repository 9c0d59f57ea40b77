package monitor

import (
	"fmt"
	"strconv"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
)

// maxRetries bounds how often a failing rebuild is retried before the loop
// waits for the next input.
const maxRetries = 3

// rebuild re-reads the machine and installs the new model when it differs:
// a batch of uevents alone incrementally, re-reading the devices they named
// (Machine.Update, which reads the whole machine itself when the rest does
// not add up), any other batch wholly. When a check is due (verify), the
// full model of the same moment wins over a wrong incremental one. queued
// says how many inputs wait in the loop's queue. It returns the batch
// again, due after a backoff, when the read failed and may be retried.
func (m *Monitor) rebuild(b *batch, queued func() int) *batch {
	m.judge(b)
	m.mu.RLock()
	old := m.snap
	m.mu.RUnlock()
	first, c := m.cpusFirst(old, b)
	if first != nil {
		old = first
	}
	start := m.clock.Now()
	snap, how, err := m.readModel(old, b)
	took := m.clock.Since(start)
	m.cfg.Metrics.RebuildDuration.Observe(took.Seconds())
	if err != nil {
		return m.rebuildFailed(b, err)
	}
	snap, how = m.verify(old, b, snap, how, queued)
	diff := topology.Diff(old, snap)
	switch {
	case len(diff) == 0 && first != nil:
		// The rest of the machine is as it was: the CPUs' change
		// stands as published.
		m.mu.Lock()
		m.snap = snap
		m.mu.Unlock()
		b.reply(ResyncResult{Changed: true, Change: c}, nil)
		return nil
	case len(diff) == 0:
		m.unchanged(b, snap, how, took)
		return nil
	}
	if first == nil {
		m.cfg.Metrics.Rebuilds.WithLabelValues(string(b.triggers[0]), "changed").Inc()
	}
	c2 := m.install(snap, b, how, diff, took)
	b.reply(ResyncResult{Changed: true, Change: &c2}, nil)
	return nil
}

// cpusFirst publishes the CPUs' part of a batch of CPU events before the
// rest of the machine is read (topology.FS.UpdateCPUs): a CPU's capacity
// reaches the subscribers after reading what any model of it must read,
// and rebuild then reads the rest, installing a second change only when
// something besides the CPUs moved. It returns the installed model and
// its change, or nil when the batch is not CPU events only, nothing
// changed in them, or the read said to read the rest first.
func (m *Monitor) cpusFirst(old *topology.Snapshot, b *batch) (*topology.Snapshot, *Change) {
	fm, ok := m.machine.(cpuMachine)
	if !ok || b.full || old == nil || len(b.devs) == 0 {
		return nil, nil
	}
	start := m.clock.Now()
	snap, why, err := fm.UpdateCPUs(old, b.devs)
	if err != nil || why != "" {
		return nil, nil // Update says what went wrong, or reads it all
	}
	diff := topology.Diff(old, snap)
	if len(diff) == 0 {
		return nil, nil
	}
	m.cfg.Metrics.Rebuilds.WithLabelValues(string(b.triggers[0]), "changed").Inc()
	c := m.install(snap, b, Rebuild{Kind: RebuildIncremental}, diff, m.clock.Since(start))
	return snap, &c
}

// cpuMachine is a Machine that reads a batch of CPU events' part of the
// model by itself (topology.FS).
type cpuMachine interface {
	UpdateCPUs(prev *topology.Snapshot, devs []topology.Device) (*topology.Snapshot, string, error)
}

var _ cpuMachine = topology.FS{}

// readModel reads the batch's model: the whole machine when the batch holds
// more than uevents, otherwise the update of old by the devices they
// named.
func (m *Monitor) readModel(old *topology.Snapshot, b *batch) (*topology.Snapshot, Rebuild, error) {
	if b.full {
		snap, err := m.machine.Snapshot()
		return snap, Rebuild{Kind: RebuildFull, Reason: b.fullReason()}, err
	}
	snap, full, err := m.machine.Update(old, b.devs)
	if full != "" {
		return snap, Rebuild{Kind: RebuildFull, Reason: full}, err
	}
	return snap, Rebuild{Kind: RebuildIncremental}, err
}

// rebuildFailed records a failed rebuild and returns the batch to retry
// after a backoff, or nil once the retries are spent: the previous model is
// then kept until the next input.
func (m *Monitor) rebuildFailed(b *batch, err error) *batch {
	now := m.clock.Now()
	m.cfg.Metrics.Rebuilds.WithLabelValues(string(b.triggers[0]), "error").Inc()
	m.mu.Lock()
	m.stats.Rebuilds++
	m.stats.RebuildErrors++
	m.stats.LastRebuildAt = now
	m.stats.LastRebuildErr = err.Error()
	m.mu.Unlock()
	if b.retries < maxRetries {
		// sysfs can be mid-update (a CPU directory vanishing during
		// an unplug): try again shortly, keeping the batch whole.
		b.retries++
		b.addTrigger(TriggerRetry)
		b.deadline = now.Add(m.cfg.Quiet * time.Duration(1<<b.retries))
		m.log.Warn("rebuild the machine model; will retry", "err", err, "retry", b.retries)
		return b
	}
	m.log.Error("rebuild the machine model; keeping the previous model", "err", err)
	b.reply(ResyncResult{}, fmt.Errorf("rebuild the machine model: %w", err))
	return nil
}

// unchanged records a rebuild that found the model as it was: an event
// whose effect was already seen, or a forged one, is not a change.
func (m *Monitor) unchanged(b *batch, snap *topology.Snapshot, how Rebuild, took time.Duration) {
	m.cfg.Metrics.Rebuilds.WithLabelValues(string(b.triggers[0]), "unchanged").Inc()
	m.mu.Lock()
	m.snap = snap
	m.stats.Rebuilds++
	m.stats.LastRebuildAt = m.clock.Now()
	m.stats.LastRebuildErr = ""
	m.mu.Unlock()
	m.log.Debug("machine unchanged", "triggers", b.triggers, "events", b.events, "seqnums", b.seqnums.String(),
		"model", how.Kind, "rebuild", took)
	b.reply(ResyncResult{Changed: false}, nil)
}

// install makes snap the current model and records the change.
func (m *Monitor) install(snap *topology.Snapshot, b *batch, how Rebuild, diff topology.Changes, took time.Duration) Change {
	now := m.clock.Now()
	capac := snap.Capacity()
	c := Change{
		Time:     now,
		Triggers: b.triggers,
		Events:   b.events,
		Seqnums:  b.seqnums,
		Changes:  diff,
		Capacity: capac,
		Rebuild:  how,
	}
	if !b.first.IsZero() {
		lat := now.Sub(b.first)
		c.LatencySeconds = lat.Seconds()
		m.cfg.Metrics.DetectionLatency.Observe(lat.Seconds())
	}
	m.mu.Lock()
	m.nextID++
	c.ID = m.nextID
	m.snap = snap
	m.capac = capac
	if len(m.history) == m.cfg.History {
		copy(m.history, m.history[1:])
		m.history = m.history[:len(m.history)-1]
	}
	m.history = append(m.history, c)
	m.stats.Rebuilds++
	m.stats.Changes++
	m.stats.LastRebuildAt = now
	m.stats.LastRebuildErr = ""
	m.mu.Unlock()

	m.observe(c, snap)
	if len(diff) == 0 {
		m.log.Info("machine model built",
			"capacity", capac.String(), "numa_nodes", len(snap.Nodes),
			"cpus_online", snap.CPUs.Online.String(), "memory_blocks", len(snap.MemoryBlocks), "took", took)
	} else {
		args := []any{"change_id", c.ID, "changes", diff.String(), "capacity", capac.String(),
			"cpus_online", snap.CPUs.Online.String(), "triggers", b.triggers, "events", b.events,
			"seqnums", b.seqnums.String(), "latency", c.Latency(), "model", how.Kind, "rebuild", took}
		if how.Reason != "" {
			args = append(args, "full_reason", how.Reason)
		}
		m.log.Info("machine changed", args...)
	}
	for _, sub := range m.cfg.Subscribers {
		sub.OnChange(c, snap)
	}
	m.publish(c)
	return c
}

// observe updates the capacity gauges and change counters.
func (m *Monitor) observe(c Change, snap *topology.Snapshot) {
	mt := m.cfg.Metrics
	for name, v := range c.Capacity.Published() {
		mt.Capacity.WithLabelValues(name, string(resources.UnitOf(name))).Set(resources.Value(name, v))
	}
	mt.NUMACapacity.Reset()
	for _, n := range snap.NodeCapacities() {
		id := strconv.Itoa(n.ID)
		for name, v := range n.Capacity {
			mt.NUMACapacity.WithLabelValues(id, name, string(resources.UnitOf(name))).Set(resources.Value(name, v))
		}
	}
	for _, ch := range c.Changes {
		mt.ModelChanges.WithLabelValues(ch.Kind).Inc()
	}
}
