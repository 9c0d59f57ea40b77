// Package autoonline brings hot-added CPUs and memory blocks online, for
// nodes whose distribution ships no udev rules that do it: a hot-added CPU
// is onlined, a hot-added memory block is onlined movable, so that it can be
// unplugged again later.
//
// Only what was added since the previous model is touched: a CPU or block an
// operator took offline on purpose stays offline. The writes make the kernel
// send online uevents, so the detection loop sees the result as its own
// change.
package autoonline

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/topology"
)

// Onliner onlines what was hot-added. It is safe for concurrent use.
type Onliner struct {
	sysRoot string
	log     *slog.Logger
	m       *metrics.Metrics

	mu   sync.Mutex // guards prev
	prev *topology.Snapshot
}

// New returns an onliner writing under the sysfs root sysRoot.
func New(sysRoot string, log *slog.Logger, m *metrics.Metrics) *Onliner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.New()
	}
	return &Onliner{sysRoot: sysRoot, log: log, m: m}
}

// OnChange onlines the CPUs and memory blocks that appeared, offline, since
// the previous model. It is meant for monitor.Config.OnChange.
func (o *Onliner) OnChange(_ monitor.Change, snap *topology.Snapshot) {
	o.mu.Lock()
	prev := o.prev
	o.prev = snap
	o.mu.Unlock()
	if prev == nil {
		return // the first model: nothing was hot-added yet
	}
	for _, id := range AddedCPUs(prev, snap) {
		o.online("cpu", fmt.Sprintf("cpu%d", id), filepath.Join(o.sysRoot, "devices/system/cpu", fmt.Sprintf("cpu%d", id), "online"), "1")
	}
	for _, b := range AddedBlocks(prev, snap) {
		state := "online_movable"
		if b.Zone != "" && !strings.Contains(b.Zone, "Movable") {
			state = "online" // the kernel offers no movable zone for it
		}
		o.online("memory_block", fmt.Sprintf("memory%d", b.ID), filepath.Join(o.sysRoot, "devices/system/memory", fmt.Sprintf("memory%d", b.ID), "state"), state)
	}
}

func (o *Onliner) online(kind, name, path, value string) {
	err := os.WriteFile(path, []byte(value), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return // gone again before we came to it
	}
	if err != nil {
		o.m.AutoOnline.WithLabelValues(kind, "error").Inc()
		o.log.Error("bring a hot-added device online", "device", name, "path", path, "value", value, "err", err)
		return
	}
	o.m.AutoOnline.WithLabelValues(kind, "onlined").Inc()
	o.log.Info("brought a hot-added device online", "device", name, "value", value)
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
