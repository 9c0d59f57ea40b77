package vmscenario

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// overflowDIMM is the DIMM of uevent-overflow: 8 memory blocks, 16 add
// and online uevents in one burst.
const overflowDIMM = 1 << 30

// overflowBuffer is uevent-overflow's --uevent-buffer: the kernel raises
// it to its minimum receive buffer (2304 bytes), room for a message or
// two.
const overflowBuffer = 1024

// ueventOverflow: README's "lost uevents" on the real socket. The daemon
// is started again with a small --uevent-buffer and held (SIGSTOP, as a
// daemon starved of CPU) while a DIMM is hot-added and the guest's kernel
// onlines its blocks (auto_online_blocks online_movable: the held daemon
// cannot), so that the blocks' uevents overflow the socket's receive
// buffer. Once it runs again it counts the loss (the read's ENOBUFS:
// uevents_dropped_total{reason="overflow"}, the status's lostEvents),
// rescans the whole machine (model_rebuilds_total{trigger="lost"}), and its model and
// kubepods' memory.max are the machine's. Then the daemon runs as before
// and the DIMM is unplugged.
func (s *scenario) ueventOverflow(t *testing.T) {
	g := s.g
	restart := func(extra string) {
		t.Helper()
		g.Sh(t, "kill $(cat "+guesttest.PIDFile+"); while kill -0 $(cat "+guesttest.PIDFile+") 2>/dev/null; do sleep 0.1; done")
		g.Sh(t, "setsid "+guesttest.DaemonBin+" "+strings.Join(guesttest.DaemonArgs, " ")+extra+" >>"+guesttest.LogFile+" 2>&1 </dev/null & echo $! >"+guesttest.PIDFile)
		g.WaitStatus(t, "the daemon started again", guesttest.Settle, func(*guesttest.Status) bool { return true })
	}
	restart(fmt.Sprintf(" --uevent-buffer %d", overflowBuffer))
	normal := false
	defer func() {
		if !normal {
			g.Sh(t, "kill -CONT $(cat "+guesttest.PIDFile+"); echo offline >/sys/devices/system/memory/auto_online_blocks")
			restart("")
		}
	}()
	st0 := g.Status(t)
	last := g.LastChangeID(t)
	overflow0, rescans0 := s.droppedOverflow(t), s.rebuildsLost(t)
	mem0 := g.MemTotal(t)
	blocks0 := g.memoryBlocks(t)

	g.Sh(t, "echo online_movable >/sys/devices/system/memory/auto_online_blocks && kill -STOP $(cat "+guesttest.PIDFile+")")
	dev, err := g.HotAddDIMM(guesttest.Context(t, guesttest.QMPTimeout), overflowDIMM, guesttest.HotNode)
	if err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "MemTotal with the DIMM (onlined by the kernel)", guesttest.Settle, "grep '^MemTotal:' /proc/meminfo",
		func(out string) bool { return guesttest.ParseMemTotal(t, out) == mem0+overflowDIMM })
	var blocks []string
	for b := range g.memoryBlocks(t) {
		if !blocks0[b] {
			blocks = append(blocks, b)
		}
	}
	uevents := g.Sh(t, "grep -c ' /devices/system/memory/' "+vm.GuestUeventLog)
	start := time.Now()
	g.Sh(t, "kill -CONT $(cat "+guesttest.PIDFile+")")

	mem := mem0 + overflowDIMM
	st := g.WaitStatus(t, "the daemon's model with the DIMM", guesttest.Settle, func(st *guesttest.Status) bool { return st.PhysicalMemory() == mem })
	modelAt := time.Since(start)
	k := g.WaitKubepods(t, "memory.max for the machine with the DIMM", guesttest.Settle, func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(mem) })
	overflow := s.droppedOverflow(t) - overflow0
	var lost []string
	for _, c := range guesttest.ChangesSince(g.Events(t), last) {
		lost = append(lost, fmt.Sprintf("#%d %s (%s)", c.ID, triggers(c), c.Rebuild.Kind))
	}
	t.Logf("DIMM %s (%d blocks, %d memory uevents in the guest's log) hot-added while the daemon was held with --uevent-buffer %d: "+
		"overflow drops %v, lostEvents %d -> %d, rescans %v; changes since: %v; model right %v after SIGCONT; kubepods memory.max %s",
		dev, len(blocks), atoi(t, uevents), overflowBuffer, overflow, st0.Stats.LostEvents, st.Stats.LostEvents, s.rebuildsLost(t)-rescans0, lost, modelAt.Round(time.Millisecond), k.MemoryMax)
	if overflow < 1 {
		t.Errorf("uevents_dropped_total{reason=\"overflow\"} grew by %v, want the socket's overflow counted", overflow)
	}
	if st.Stats.LostEvents <= st0.Stats.LostEvents {
		t.Errorf("lostEvents %d -> %d: the loss was not counted", st0.Stats.LostEvents, st.Stats.LostEvents)
	}
	// The rescan: a full rebuild for the loss. (The MemTotal watch, whose
	// tick also comes due when the daemon runs again, may have read the
	// DIMM first; the rescan then finds no change to record, or be
	// batched with it, which the change's triggers then say.)
	lostBatch := false
	for _, c := range guesttest.ChangesSince(g.Events(t), last) {
		lostBatch = lostBatch || strings.Contains(triggers(c), "lost")
	}
	if got := s.rebuildsLost(t) - rescans0; got < 1 && !lostBatch {
		t.Errorf("model_rebuilds_total{trigger=\"lost\"} grew by %v: no rescan for the loss (changes %v)", got, lost)
	}
	if st.Memory.BlocksOnline != len(blocks0)+len(blocks) {
		t.Errorf("the model has %d blocks online, want %d", st.Memory.BlocksOnline, len(blocks0)+len(blocks))
	}

	// The daemon as before, then the DIMM unplugged: its blocks are
	// movable, so the kernel lets it go.
	g.Sh(t, "echo offline >/sys/devices/system/memory/auto_online_blocks")
	restart("")
	normal = true
	s.unplugDIMM(t, dev, blocks, mem0)
}

// droppedOverflow is uevents_dropped_total{reason="overflow"}.
func (s *scenario) droppedOverflow(t *testing.T) float64 {
	t.Helper()
	lines := s.g.metrics(t, `node_resized_uevents_dropped_total{reason="overflow"}`)
	if len(lines) == 0 {
		return 0 // no overflow yet: the series is not there
	}
	f := strings.Fields(lines[0])
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	if err != nil {
		t.Fatalf("metric %q: %v", lines[0], err)
	}
	return v
}

// rebuildsLost is the model's rebuilds for lost uevents, whatever their
// result (model_rebuilds_total{trigger="lost"}).
func (s *scenario) rebuildsLost(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, l := range s.g.metrics(t, "node_resized_model_rebuilds_total{") {
		if !strings.Contains(l, `trigger="lost"`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric %q: %v", l, err)
		}
		sum += v
	}
	return sum
}
