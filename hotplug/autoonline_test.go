package hotplug

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// writeMachine writes m as a sysfs and procfs tree, and returns it with a
// function that reads its model as it stands.
func writeMachine(t *testing.T, m topologytest.Machine) (*topologytest.Tree, func() *topology.Snapshot) {
	t.Helper()
	tree := m.WriteTree(t, topologytest.Dir(t))
	fsys, err := topology.NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	return tree, func() *topology.Snapshot {
		t.Helper()
		s, err := fsys.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestOnlinesOnlyWhatWasHotAdded(t *testing.T) {
	m := topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 4, 0, 0, 2, 3),
		Possible:  topologytest.Ints(0, 7),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 1 << 20}},
		BlockSize: 128 << 20,
		Blocks:    topologytest.Blocks(0, 8, topologytest.BlockOnline, "Normal", 0),
		MemKB:     1 << 20,
	}
	tree, snap := writeMachine(t, m)
	mt := metrics.New()
	o := NewAutoOnliner(NewWriter(tree.Sys, Config{}), nil, mt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.Run(ctx)
	o.OnChange(monitor.Change{}, snap()) // cpu2 and cpu3 were offline at start: an operator's choice

	// A DIMM arrives with two offline blocks; block 9 could go Movable.
	tree.AddBlocks(8, 2, 0, topologytest.BlockOffline, "Normal Movable")
	o.OnChange(monitor.Change{}, snap())
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(mt.AutoOnline.WithLabelValues("memory_block", "onlined")) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocks were not onlined within 10s")
		}
	}
	for _, id := range []int{8, 9} {
		if got := read(t, filepath.Join(tree.Sys, "devices/system/memory", fmt.Sprintf("memory%d", id), "state")); got != "online_movable" {
			t.Errorf("memory%d state %q, want online_movable written", id, got)
		}
	}
	for _, id := range []int{2, 3} {
		if got := read(t, filepath.Join(tree.Sys, "devices/system/cpu", fmt.Sprintf("cpu%d", id), "online")); got != "0" {
			t.Errorf("cpu%d online %q: an offline CPU that was not hot-added was onlined", id, got)
		}
	}
	if got := testutil.ToFloat64(mt.AutoOnline.WithLabelValues("memory_block", "onlined")); got != 2 {
		t.Errorf("onlined blocks counted %v, want 2", got)
	}
}

// smallMachine has 2 CPUs and 8 online blocks of 128 MiB on one node.
func smallMachine() topologytest.Machine {
	return topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 2, 0, 0),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 1), MemKB: 1 << 20}},
		BlockSize: 128 << 20,
		Blocks:    topologytest.Blocks(0, 8, topologytest.BlockOnline, "Normal", 0),
		MemKB:     1 << 20,
	}
}

func TestAddedCPUs(t *testing.T) {
	prev := &topology.Snapshot{CPUs: topology.CPUs{Present: topology.CPUSet{0, 1}, Online: topology.CPUSet{0, 1}}}
	cur := &topology.Snapshot{CPUs: topology.CPUs{Present: topology.CPUSet{0, 1, 2, 3}, Online: topology.CPUSet{0, 1, 3}}}
	if got := AddedCPUs(prev, cur); len(got) != 1 || got[0] != 2 {
		t.Errorf("AddedCPUs = %v, want [2] (3 is already online)", got)
	}
	if got := AddedCPUs(cur, cur); len(got) != 0 {
		t.Errorf("AddedCPUs with nothing added = %v", got)
	}
}

// Busy holds from the queueing of a hot-added device until its write is
// done, so that the detection loop keeps one DIMM's online events together.
func TestBusyUntilTheLastWrite(t *testing.T) {
	tree, snap := writeMachine(t, smallMachine())
	o := NewAutoOnliner(NewWriter(tree.Sys, Config{}), nil, nil)
	o.OnChange(monitor.Change{}, snap())
	if o.Busy() {
		t.Fatal("busy with nothing hot-added")
	}
	tree.AddBlocks(8, 3, 0, topologytest.BlockOffline, "Normal Movable")
	o.OnChange(monitor.Change{}, snap())
	if !o.Busy() {
		t.Fatal("not busy with 3 blocks queued")
	}
	// The last block's state is a FIFO: the write to it waits in open
	// until the test reads it, so the onliner is caught in the middle of
	// its last write.
	last := filepath.Join(tree.Sys, "devices/system/memory/memory10/state")
	if err := os.Remove(last); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(last, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.Run(ctx)
	for _, b := range []string{"memory8", "memory9"} {
		path := filepath.Join(tree.Sys, "devices/system/memory", b, "state")
		for deadline := time.Now().Add(10 * time.Second); read(t, path) != "online_movable"; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not onlined within 10s", b)
			}
		}
	}
	time.Sleep(10 * time.Millisecond) // well into the last write's open
	if !o.Busy() {
		t.Fatal("not busy while the last block's write is still going on")
	}
	fifo, err := os.Open(last)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()
	got, err := io.ReadAll(fifo)
	if err != nil || string(got) != "online_movable" {
		t.Fatalf("memory10 written %q (%v), want online_movable", got, err)
	}
	for deadline := time.Now().Add(10 * time.Second); o.Busy(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still busy 10s after the last write")
		}
	}
}

// A block the release holds offline stays offline when virtio-mem adds it
// again: the auto-onliner onlines only the others, and counts it held.
func TestHeldBlocksStayOffline(t *testing.T) {
	tree, snap := writeMachine(t, smallMachine())
	mt := metrics.New()
	w := NewWriter(tree.Sys, Config{})
	w.Holds().Hold(nil, []int{9})
	o := NewAutoOnliner(w, nil, mt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.Run(ctx)
	o.OnChange(monitor.Change{}, snap())
	tree.AddBlocks(8, 3, 0, topologytest.BlockOffline, "Movable Normal")
	o.OnChange(monitor.Change{}, snap())
	for deadline := time.Now().Add(10 * time.Second); o.Busy(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocks were not handled within 10s")
		}
	}
	for id, want := range map[int]string{8: "online_movable", 9: "offline", 10: "online_movable"} {
		if got := read(t, filepath.Join(tree.Sys, "devices/system/memory", fmt.Sprintf("memory%d", id), "state")); got != want {
			t.Errorf("memory%d state %q, want %q", id, got, want)
		}
	}
	if held, onlined := testutil.ToFloat64(mt.AutoOnline.WithLabelValues("memory_block", "held")), testutil.ToFloat64(mt.AutoOnline.WithLabelValues("memory_block", "onlined")); held != 1 || onlined != 2 {
		t.Errorf("counted %v held and %v onlined, want 1 and 2", held, onlined)
	}
}

// A hot-added device that someone else brought online first (pseries'
// DLPAR onlines what it attaches while its add uevent is on the way) is
// counted as already online, not as an error; one that stayed offline
// when the write failed is an error.
func TestAlreadyOnlineIsNoError(t *testing.T) {
	m := topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 2, 0, 0),
		Possible:  topologytest.Ints(0, 3),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 1), MemKB: 1 << 20}},
		BlockSize: 256 << 20,
		Blocks:    topologytest.Blocks(0, 4, topologytest.BlockOnline, "Normal", 0),
		MemKB:     1 << 20,
	}
	tree, snap := writeMachine(t, m)
	mt := metrics.New()
	w := NewWriter(tree.Sys, Config{})
	// Every write fails, as the kernel's EINVAL for a block already online.
	w.open = func(string) (int, error) { return unix.Open("/dev/full", unix.O_WRONLY|unix.O_CLOEXEC, 0) }
	o := NewAutoOnliner(w, nil, mt)
	o.OnChange(monitor.Change{}, snap())
	tree.AddBlocks(4, 2, 0, topologytest.BlockOffline, "Movable Normal")
	o.OnChange(monitor.Change{}, snap())
	// The kernel onlines block 4 before the daemon's write; block 5
	// stays offline.
	state := filepath.Join(tree.Sys, "devices/system/memory/memory4/state")
	if err := os.WriteFile(state, []byte("online\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); o.Busy(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocks were not handled within 10s")
		}
	}
	for result, want := range map[string]float64{"already": 1, "error": 1, "onlined": 0} {
		if got := testutil.ToFloat64(mt.AutoOnline.WithLabelValues("memory_block", result)); got != want {
			t.Errorf("memory blocks counted %s: %v, want %v", result, got, want)
		}
	}
}

// Settling holds past the last write until a model shows the devices
// online (the relay's hold of a gain: one patch for the whole DIMM), and
// no longer than UnseenMax when none does; Busy ends at the last write.
func TestSettlingUntilTheModelShowsThem(t *testing.T) {
	tree, snap := writeMachine(t, smallMachine())
	o := NewAutoOnliner(NewWriter(tree.Sys, Config{}), nil, nil)
	now := time.Now()
	o.now = func() time.Time { return now }
	o.OnChange(monitor.Change{}, snap())
	if o.Settling() {
		t.Fatal("settling with nothing hot-added")
	}
	tree.AddBlocks(8, 3, 0, topologytest.BlockOffline, "Normal Movable")
	added := snap()
	o.OnChange(monitor.Change{}, added)
	if !o.Settling() {
		t.Fatal("not settling with 3 blocks queued")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.Run(ctx)
	for deadline := time.Now().Add(10 * time.Second); o.Busy(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still busy 10s after the blocks were queued")
		}
	}
	if !o.Settling() {
		t.Fatal("not settling after the last write, with no model showing the blocks online")
	}
	// A model that shows two of the three: still settling; all three: done.
	part := snap()
	for i := range part.MemoryBlocks {
		if part.MemoryBlocks[i].ID == 10 {
			part.MemoryBlocks[i].State = topology.BlockOffline
		}
	}
	o.OnChange(monitor.Change{}, part)
	if !o.Settling() {
		t.Fatal("not settling with memory10 not yet online in the model")
	}
	o.OnChange(monitor.Change{}, snap())
	if o.Settling() {
		t.Fatal("settling after a model showed every block online")
	}

	// A block no model shows online is waited for UnseenMax, no longer.
	tree.AddBlocks(11, 1, 0, topologytest.BlockOffline, "Normal Movable")
	added = snap()
	o.OnChange(monitor.Change{}, added)
	for deadline := time.Now().Add(10 * time.Second); o.Busy(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still busy 10s after memory11 was queued")
		}
	}
	o.OnChange(monitor.Change{}, added) // a model from before the write
	if !o.Settling() {
		t.Fatal("not settling with memory11 unseen")
	}
	now = now.Add(UnseenMax)
	if o.Settling() {
		t.Fatalf("still settling %v after memory11's write", UnseenMax)
	}
}
