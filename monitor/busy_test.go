package monitor

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// While the auto-onliner is still onlining a DIMM's blocks, a pause longer
// than the quiet window does not end the burst; once it is done, the
// quiet window does.
func TestBusyHoldsTheTrailingBatch(t *testing.T) {
	var busy atomic.Bool
	h := start(t, Config{Quiet: 20 * time.Millisecond, MaxWait: 500 * time.Millisecond, MemPoll: -1, Resync: -1, Busy: busy.Load})
	online := func(id int, seq uint64) {
		h.machine.set(topology.CPUSet{0, 1}, 4<<30+uint64(id-31)*128<<20)
		h.src.injectDev(fmt.Sprintf("/devices/system/memory/memory%d", id), "memory", uevent.ActionOnline, seq)
		h.settle()
	}
	busy.Store(true)
	online(32, 1)
	// The onliner takes 30ms for the next block: the quiet window passes
	// and the batch waits another.
	exactly(t, "the first quiet window", h.fire(), 20*time.Millisecond)
	h.alive()
	noChange(t, h)
	h.clock.Step(10 * time.Millisecond)
	online(33, 2)
	exactly(t, "the window after the second block", h.fire(), 20*time.Millisecond)
	h.alive()
	noChange(t, h)
	// The last block: the onliner is done, and the quiet window ends it.
	h.clock.Step(5 * time.Millisecond)
	busy.Store(false)
	online(34, 3)
	exactly(t, "the window after the last block", h.fire(), 20*time.Millisecond)
	c := h.next()
	if c.Events != 3 || c.Capacity[resources.Memory] != 4<<30+3*128<<20 {
		t.Errorf("change of %d events, memory %d; want the 3 blocks in one", c.Events, c.Capacity[resources.Memory])
	}
	exactly(t, "latency from the first block", c.Latency(), 75*time.Millisecond)

	// An onliner that stays busy holds a batch for MaxWait at most.
	h.quiet()
	busy.Store(true)
	online(35, 4)
	var waited time.Duration
	for i := 0; i < 100; i++ {
		waited += h.fire()
		h.alive()
		select {
		case c := <-h.changes:
			exactly(t, "the wait of a batch while the onliner never finishes", waited, 500*time.Millisecond)
			if c.Events != 1 {
				t.Errorf("change of %d events, want 1", c.Events)
			}
			return
		default:
		}
	}
	t.Fatal("a busy onliner held the batch past MaxWait")
}

func noChange(t *testing.T, h *harness) {
	t.Helper()
	select {
	case c := <-h.changes:
		t.Fatalf("change #%d (%d events) while the onliner is busy", c.ID, c.Events)
	default:
	}
}

// A MemTotal gain the watch sees while the auto-onliner is still onlining
// (a block onlined before its uevent reached the loop) joins the burst:
// the DIMM's blocks are one change, not a MemTotal change and then the rest.
func TestBusyHoldsAMemTotalGain(t *testing.T) {
	var busy atomic.Bool
	h := start(t, Config{Quiet: 20 * time.Millisecond, MaxWait: 500 * time.Millisecond, MemPoll: time.Second, Resync: -1, Busy: busy.Load})
	busy.Store(true)
	h.machine.set(topology.CPUSet{0, 1}, 4<<30+128<<20)
	h.clock.Step(time.Second) // the watch sees the first block's memory
	h.alive()
	noChange(t, h)
	h.machine.set(topology.CPUSet{0, 1}, 4<<30+2*128<<20)
	h.src.injectDev("/devices/system/memory/memory32", "memory", uevent.ActionOnline, 1)
	busy.Store(false)
	h.src.injectDev("/devices/system/memory/memory33", "memory", uevent.ActionOnline, 2)
	h.settle()
	h.fire()
	c := h.next()
	if c.Events != 2 || c.Capacity[resources.Memory] != 4<<30+2*128<<20 {
		t.Errorf("change of %d events, memory %d; want both blocks in one, the MemTotal gain with them", c.Events, c.Capacity[resources.Memory])
	}
}
