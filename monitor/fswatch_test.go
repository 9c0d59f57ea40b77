package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// The kubelet root filesystem's size in the fake machine at start.
const fsSize = 100 << 30

// startFS runs the loop over a fake machine whose kubelet root
// filesystem is fsSize, and logs into the returned buffer.
func startFS(t *testing.T, cfg Config) (*harness, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, &cfg)
	h.machine = &fakeMachine{online: topology.CPUSet{0, 1}, memTotal: 4 << 30, ephemeral: fsSize}
	h.run(h.machine, cfg)
	h.next() // the startup change
	return h, logs
}

// setFS sets the filesystem's size, and the error its statfs fails with.
func (f *fakeMachine) setFS(size uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ephemeral, f.fsErr = size, err
}

func (f *fakeMachine) polls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fsPolls
}

// polled waits until the filesystem watch has polled n times in all and
// the loop has acted on the last poll.
func (h *harness) polled(n int) {
	h.t.Helper()
	waitFor(h.t, func() bool { return h.machine.polls() >= n })
	h.alive()
	if got := h.machine.polls(); got != n {
		h.t.Fatalf("the filesystem watch polled %d times, want %d", got, n)
	}
}

// noPoll steps the clock by d, after which the watch must still have
// polled n times: its timer is set for later.
func (h *harness) noPoll(d time.Duration, n int) {
	h.t.Helper()
	h.clock.Step(d)
	h.alive()
	if got := h.machine.polls(); got != n {
		h.t.Fatalf("the filesystem watch polled %d times, want %d", got, n)
	}
}

// noChange fails the test if a change was published.
func (h *harness) noChange() {
	h.t.Helper()
	select {
	case c := <-h.changes:
		h.t.Fatalf("unexpected change #%d: %v (triggers %v)", c.ID, c.Changes, c.Triggers)
	default:
	}
}

// injectBlock sends a uevent of the block subsystem for vdb, a virtio
// disk, with env as its extra entries.
func (s *fakeSource) injectBlock(action uevent.Action, env map[string]string, seq uint64) {
	full := map[string]string{"DEVNAME": "vdb", "DEVTYPE": "disk"}
	for k, v := range env {
		full[k] = v
	}
	s.send(uevent.Event{Action: action, DevPath: "/devices/pci0000:00/0000:00:05.0/virtio2/block/vdb",
		Subsystem: "block", Seqnum: seq, Env: full})
}

var resize = map[string]string{"RESIZE": "1"}

// The periodic watch sees a filesystem grown or shrunk online, with no
// uevent, at its interval and not before: one change, its trigger
// filesystem, read incrementally (the totals), and nothing more while
// the size stays.
func TestFilesystemWatchSeesAResize(t *testing.T) {
	for _, size := range []uint64{fsSize + 20<<30, fsSize - 20<<30} {
		t.Run(fmt.Sprintf("%dGiB", size>>30), func(t *testing.T) {
			h, _ := startFS(t, Config{MemPoll: -1, Resync: -1, FSPoll: 10 * time.Second})
			h.machine.setFS(size, nil)
			h.noPoll(10*time.Second-time.Millisecond, 0)
			if h.clock.Waiters() != h.base {
				t.Fatal("the loop holds a batch before the watch polled")
			}
			h.clock.Step(time.Millisecond)
			c := h.next()
			if len(c.Triggers) != 1 || c.Triggers[0] != TriggerFilesystem || c.Events != 0 {
				t.Errorf("triggers %v events %d: want filesystem and no uevents", c.Triggers, c.Events)
			}
			if want := (Rebuild{Kind: RebuildIncremental}); c.Rebuild != want {
				t.Errorf("rebuild %+v, want %+v", c.Rebuild, want)
			}
			if got := c.Capacity[resources.EphemeralStorage]; got != int64(size) {
				t.Errorf("ephemeral-storage %d, want %d", got, size)
			}
			if !hasKind(c.Changes, topology.ChangeEphemeralStorage) || len(c.Changes) != 1 {
				t.Errorf("changes %v, want the ephemeral storage's alone", c.Changes)
			}
			exactly(t, "latency from the poll", c.Latency(), 0)
			if snaps, updates := h.machine.calls(); snaps != 1 || updates != 1 {
				t.Errorf("%d full and %d incremental reads after the startup, want 1 and 1", snaps, updates)
			}
			if got := testutil.ToFloat64(h.metrics.Rebuilds.WithLabelValues(string(TriggerFilesystem), "changed")); got != 1 {
				t.Errorf("filesystem rebuilds that changed the model = %v, want 1", got)
			}
			h.alive()
			for n := 2; n <= 4; n++ {
				h.clock.Step(10 * time.Second)
				h.polled(n)
			}
			h.noChange()
			h.none()
		})
	}
}

// A filesystem that shrank is a loss, rebuilt at once in the middle of a
// burst; one that grew is a gain, which joins the burst's trailing batch,
// and the polls after it that see the same size do not push the batch out.
func TestFilesystemWatchLossAndGain(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uint64
		wait time.Duration // from the first poll that saw it to the rebuild
	}{
		{"shrunk", fsSize - 1<<30, 0},
		{"grown", fsSize + 1<<30, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := startFS(t, Config{Quiet: 50 * time.Millisecond, MaxWait: time.Second, MemPoll: -1, Resync: -1, FSPoll: 10 * time.Millisecond})
			h.machine.set(topology.CPUSet{0, 1, 2}, 4<<30)
			h.src.inject("cpu", uevent.ActionOnline, 1)
			h.nextIdle() // the leading edge
			h.machine.set(topology.CPUSet{0, 1, 2, 3}, 4<<30)
			h.src.inject("cpu", uevent.ActionOnline, 2)
			h.settle() // held: a burst
			h.machine.setFS(tc.size, nil)
			h.clock.Step(10 * time.Millisecond)
			h.polled(1)
			var waited time.Duration
			for waited < tc.wait && h.clock.Waiters() > h.base {
				// Polls every 10ms see the same size again.
				h.clock.Step(10 * time.Millisecond)
				waited += 10 * time.Millisecond
				h.polled(1 + int(waited/(10*time.Millisecond)))
			}
			c := h.next()
			exactly(t, "the wait after the poll", waited, tc.wait)
			if !hasTrigger(c, TriggerUevent) || !hasTrigger(c, TriggerFilesystem) || c.Events != 1 {
				t.Errorf("triggers %v events %d: want the held event and the filesystem in one change", c.Triggers, c.Events)
			}
			if c.Capacity[resources.EphemeralStorage] != int64(tc.size) || c.Capacity[resources.CPU] != 4000 {
				t.Errorf("capacity %v, want 4 CPUs and ephemeral-storage %d", c.Capacity, tc.size)
			}
			exactly(t, "latency from the held event", c.Latency(), 10*time.Millisecond+tc.wait)
		})
	}
}

// A disk's resize (a block device's change uevent with RESIZE=1) makes
// the watch poll at the MemTotal watch's interval for
// FSWatchAfterResize: a filesystem grown after the disk is seen within a
// second. The event itself is no uevent of the model and opens no batch.
// After the window the watch is back at its own interval; the next
// resize makes it fast again.
func TestFilesystemWatchAfterADiskResize(t *testing.T) {
	h, logs := startFS(t, Config{Resync: -1, FSPoll: 10 * time.Second, FSWatchAfterResize: 5 * time.Minute})
	h.noPoll(3*time.Second, 0)
	h.src.injectBlock(uevent.ActionChange, resize, 1) // at 3s
	h.settle()
	if st := h.mon.Stats(); st.Uevents != 0 || st.BlockEvents != 1 || h.clock.Waiters() != h.base {
		t.Fatalf("stats %+v, batch held %v: want one block event, no uevent, no batch", st, h.clock.Waiters() != h.base)
	}
	if n := len(logs.records(t, "INFO")); n != 2 { // the first model, the resize
		t.Errorf("%d info lines, want the resize's after the first model's", n)
	}
	h.noPoll(time.Second-time.Millisecond, 0)
	h.clock.Step(time.Millisecond) // 4s: fast
	h.polled(1)
	h.noChange()
	h.machine.setFS(fsSize+50<<30, nil) // resize2fs
	h.clock.Step(time.Second)           // 5s
	c := h.next()
	if !hasTrigger(c, TriggerFilesystem) || c.Capacity[resources.EphemeralStorage] != fsSize+50<<30 {
		t.Errorf("triggers %v capacity %v: want the grown filesystem", c.Triggers, c.Capacity)
	}
	if !c.Time.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("seen at %v, want 2s after the resize", c.Time.Sub(t0))
	}
	h.polled(2)
	// The window ends 5m after the resize, at 5m3s: a poll just before
	// it is still fast, the one at its end goes back to 10s.
	h.clock.Step(5*time.Minute - 3*time.Second) // 5m2s: the timer set for 6s fires once
	h.polled(3)
	h.clock.Step(time.Second) // 5m3s
	h.polled(4)
	h.noPoll(10*time.Second-time.Millisecond, 4)
	h.clock.Step(time.Millisecond)
	h.polled(5)
	// Another resize: fast again.
	h.src.injectBlock(uevent.ActionChange, resize, 2)
	h.settle()
	h.noPoll(time.Second-time.Millisecond, 5)
	h.clock.Step(time.Millisecond)
	h.polled(6)
	h.noChange()
	if _, updates := h.machine.calls(); updates != 1 {
		t.Errorf("%d incremental reads, want the grown filesystem's alone", updates)
	}
}

// Block events other than a resize, and a resize while the watch is off
// or has no window, change nothing: no batch, no uevent of the model, no
// faster poll, no rebuild.
func TestBlockEventsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action uevent.Action
		env    map[string]string
		cfg    Config
		polls  int // in the minute after the event
	}{
		{"change", uevent.ActionChange, nil, Config{}, 6},
		{"change RESIZE=0", uevent.ActionChange, map[string]string{"RESIZE": "0"}, Config{}, 6},
		{"add RESIZE=1", uevent.ActionAdd, resize, Config{}, 6},
		{"remove", uevent.ActionRemove, nil, Config{}, 6},
		{"unknown action RESIZE=1", uevent.ActionUnknown, resize, Config{}, 6},
		{"resize, no window", uevent.ActionChange, resize, Config{FSWatchAfterResize: -1}, 6},
		{"resize, watch off", uevent.ActionChange, resize, Config{FSPoll: -1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.MemPoll, cfg.Resync = -1, -1
			h, _ := startFS(t, cfg)
			h.src.injectBlock(tc.action, tc.env, 1)
			h.settle()
			if st := h.mon.Stats(); st.Uevents != 0 || st.BlockEvents != 1 || st.Rebuilds != 1 {
				t.Errorf("stats %+v: want one block event, no uevent, no rebuild", st)
			}
			if h.clock.Waiters() != h.base {
				t.Error("the loop holds a batch")
			}
			for i := range 60 {
				h.clock.Step(time.Second)
				h.alive()
				if want := (i + 1) / 10; tc.polls > 0 && i%10 == 9 {
					h.polled(want)
				}
			}
			if got := h.machine.polls(); got != tc.polls {
				t.Errorf("%d polls in a minute, want %d", got, tc.polls)
			}
			if snaps, updates := h.machine.calls(); snaps != 1 || updates != 0 {
				t.Errorf("%d full and %d incremental reads after the startup, want 1 and none", snaps, updates)
			}
			h.noChange()
		})
	}
}

// With the watch off, nothing polls, and a grown filesystem waits for
// another rebuild.
func TestFilesystemWatchOff(t *testing.T) {
	h, _ := startFS(t, Config{MemPoll: -1, Resync: -1, FSPoll: -1})
	h.machine.setFS(fsSize*2, nil)
	h.noPoll(time.Hour, 0)
	h.noChange()
	if h.clock.Waiters() != h.base {
		t.Error("the loop holds a batch")
	}
}

// A statfs that fails, or reads no size (no kubelet root directory),
// changes nothing: no rebuild, no batch, one poll per interval, and a
// warning at most every 10 minutes. When it works again, it says so.
func TestFilesystemWatchFailing(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"statfs fails", errors.New("statfs /var/lib/kubelet: input/output error")},
		{"not measured", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, logs := startFS(t, Config{MemPoll: -1, Resync: -1, FSPoll: 10 * time.Second})
			h.machine.setFS(0, tc.err)
			// 12 minutes: 72 polls, warnings at 10s and 10m10s.
			for n := 1; n <= 72; n++ {
				h.clock.Step(10 * time.Second)
				h.polled(n)
				if h.clock.Waiters() != h.base {
					t.Fatalf("poll %d: the loop holds a batch", n)
				}
			}
			warns := logs.records(t, "WARN")
			if len(warns) != 2 {
				t.Fatalf("%d warnings in 12 minutes of failing polls, want 2", len(warns))
			}
			if got := warns[1]["failed_polls"]; got != float64(60) {
				t.Errorf("the second warning counts %v failed polls, want the 60 since the first", got)
			}
			if st := h.mon.Stats(); st.Rebuilds != 1 {
				t.Errorf("%d rebuilds, want the startup's alone", st.Rebuilds)
			}
			h.noChange()
			h.machine.setFS(fsSize, nil)
			h.clock.Step(10 * time.Second)
			h.polled(73)
			if n := len(logs.records(t, "INFO")); n != 2 { // the first model, and this
				t.Errorf("%d info lines, want one that says the watch reads again", n-1)
			}
			h.noChange()
			h.none()
		})
	}
}

// The MemTotal watch polls every second: a read that keeps failing warns
// once, then at most every 10 minutes with the polls failed since, and
// says once that it reads again.
func TestMemTotalWatchFailingWarnsRarely(t *testing.T) {
	h, logs := startFS(t, Config{MemPoll: time.Second, Resync: -1, FSPoll: -1})
	h.machine.mu.Lock()
	h.machine.memErr = errors.New("read /proc/meminfo: input/output error")
	h.machine.mu.Unlock()
	// 12 minutes of polls: warnings at 1 s and 10 min 1 s.
	memPolls := func() int {
		h.machine.mu.Lock()
		defer h.machine.mu.Unlock()
		return h.machine.memPolls
	}
	// Each tick is taken before the next: a ticker drops a tick that
	// finds the last one still waiting.
	step := func() {
		n := memPolls()
		h.clock.Step(time.Second)
		waitFor(t, func() bool { return memPolls() > n })
	}
	for i := 0; i < 720; i++ {
		step()
	}
	h.alive()
	warns := logs.records(t, "WARN")
	if len(warns) != 2 {
		t.Fatalf("%d warnings in 12 minutes of failing polls, want 2", len(warns))
	}
	if got := warns[1]["failed_polls"]; got != float64(600) {
		t.Errorf("the second warning counts %v failed polls, want the 600 since the first", got)
	}
	infos := len(logs.records(t, "INFO"))
	h.machine.mu.Lock()
	h.machine.memErr = nil
	h.machine.mu.Unlock()
	step()
	step()
	h.alive()
	if n := len(logs.records(t, "INFO")) - infos; n != 1 {
		t.Errorf("%d info lines once the watch reads again, want 1", n)
	}
	h.noChange()
}
