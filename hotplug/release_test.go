package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	tt "github.com/node-resized/node-resized/topology/topologytest"
	"github.com/node-resized/node-resized/types"
)

const testBlock = 128 << 20

// kernel is a HotplugWriter that changes a synthetic tree as the kernel
// does when its hotplug files are written: a CPU's online file and lists,
// a block's state and MemTotal. busy blocks refuse to go offline (EBUSY);
// kill, when set, is called before the offline of the block it names.
type kernel struct {
	t     *testing.T
	tree  *tt.Tree
	holds Holds
	busy  map[int]bool
	kill  map[int]func()

	mu     sync.Mutex
	writes []string
}

func (k *kernel) log(s string) {
	k.mu.Lock()
	k.writes = append(k.writes, s)
	k.mu.Unlock()
}

func (k *kernel) OfflineCPU(_ context.Context, id int) error {
	k.log("cpu" + itoa(id) + "=0")
	k.tree.SetCPUOnline(id, false)
	return nil
}

func (k *kernel) OnlineCPU(_ context.Context, id int) error {
	if k.holds.CPUHeld(id) {
		return ErrHeld
	}
	k.log("cpu" + itoa(id) + "=1")
	k.tree.SetCPUOnline(id, true)
	return nil
}

func (k *kernel) OfflineBlock(_ context.Context, id int) error {
	if f := k.kill[id]; f != nil {
		f()
	}
	if k.busy[id] {
		k.log("memory" + itoa(id) + "=busy")
		return &WriteError{Path: "memory" + itoa(id) + "/state", Value: "offline", Err: syscall.EBUSY}
	}
	k.log("memory" + itoa(id) + "=offline")
	k.tree.SetBlockState(id, tt.BlockOffline)
	k.tree.SetMemTotalKB(k.tree.MemTotalKB() - testBlock>>10)
	return nil
}

func (k *kernel) OnlineBlock(_ context.Context, id int, movable bool) error {
	if k.holds.BlockHeld(id) {
		return ErrHeld
	}
	k.log("memory" + itoa(id) + "=online")
	k.tree.SetBlockState(id, tt.BlockOnline)
	k.tree.SetMemTotalKB(k.tree.MemTotalKB() + testBlock>>10)
	return nil
}

func (k *kernel) Holds() *Holds { return &k.holds }

func itoa(i int) string { return strconv.Itoa(i) }

// releaseMachine: 4 CPUs (cpu0 without an online file, 2 and 3 hot-added),
// 16 boot blocks in zone Normal and a DIMM of 8 movable blocks.
func releaseMachine(t *testing.T) (*tt.Tree, topology.FS) {
	t.Helper()
	m := tt.Machine{
		CPUs:      []tt.CPU{{ID: 0, Core: 0, Online: true, NoOnlineFile: true}, {ID: 1, Core: 1, Online: true}, {ID: 2, Core: 2, Online: true}, {ID: 3, Core: 3, Online: true}},
		Nodes:     []tt.Node{{ID: 0, CPUs: []int{0, 1, 2, 3}, MemKB: 24 * testBlock >> 10}},
		BlockSize: testBlock,
		Blocks:    append(tt.Blocks(0, 16, tt.BlockOnline, "Normal", 0), tt.Blocks(16, 8, tt.BlockOnline, "Movable", 0)...),
		DIMMs:     []tt.DIMM{{Instance: 0, Blocks: tt.Ints(16, 23)}},
		MemKB:     24 * testBlock >> 10,
	}
	root := tt.Dir(t)
	tree := m.WriteTree(t, root)
	fsys, err := topology.NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	return tree, fsys
}

func newTestReleaser(t *testing.T, k *kernel, fsys topology.FS, record string, reserved ...int) *Releaser {
	t.Helper()
	r, err := NewReleaser(ReleaserConfig{FS: fsys, Writer: k, RecordPath: record, ReservedCPUs: topology.NewCPUSet(reserved...),
		Exclusive: func() (map[int]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run starts f (a Release or GiveBack) and waits for its report.
func run(t *testing.T, f func(report func(types.ReleaseReport))) types.ReleaseReport {
	t.Helper()
	ch := make(chan types.ReleaseReport, 1)
	f(func(r types.ReleaseReport) { ch <- r })
	return <-ch
}

func TestReleaseTakesTheSurplusOfflineAndGivesItBack(t *testing.T) {
	tree, fsys := releaseMachine(t)
	k := &kernel{t: t, tree: tree}
	record := filepath.Join(t.TempDir(), "released.json")
	r := newTestReleaser(t, k, fsys, record)
	ctx := context.Background()
	target := resources.List{resources.CPU: 2000, resources.Memory: 16 * testBlock}
	rep := run(t, func(f func(types.ReleaseReport)) {
		r.Release(ctx, decide.Release{Generation: 1, Capacity: target, Spec: `{"cpu":"2"} with release`}, nil, f)
	})
	if !rep.Done || rep.Short != "" || rep.Generation != 1 {
		t.Fatalf("report %+v", rep)
	}
	want := "cpu3=0 cpu2=0 memory23=offline memory22=offline memory21=offline memory20=offline memory19=offline memory18=offline memory17=offline memory16=offline"
	if got := strings.Join(k.writes, " "); !sameWords(got, want) {
		t.Errorf("writes %s, want (in any block order) %s", got, want)
	}
	if !strings.HasPrefix(strings.Join(k.writes, " "), "cpu3=0 cpu2=0 ") {
		t.Errorf("CPUs not first, highest first: %v", k.writes)
	}
	snap, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := r.Released(snap)
	if len(got.CPUs) != 2 || len(got.Blocks) != 8 || len(got.Devices) != 1 || !got.Devices[0].SafeToUnplug || got.Devices[0].ID != "PNP0C80:00" {
		t.Fatalf("released %+v", got)
	}
	if !strings.Contains(got.Summary(), "cpus 2-3; memory PNP0C80:00") || !strings.Contains(got.Summary(), "8/8 blocks offline, safe to unplug") {
		t.Errorf("summary %q", got.Summary())
	}
	// Held: nothing onlines them but a give back.
	if err := k.OnlineCPU(ctx, 3); !errors.Is(err, ErrHeld) {
		t.Errorf("online of a released CPU: %v, want ErrHeld", err)
	}
	// The record says what was released, for the next start.
	b, err := os.ReadFile(record)
	if err != nil || !strings.Contains(string(b), `"cpus":[2,3]`) || !strings.Contains(string(b), `"blocks":[16,17,18,19,20,21,22,23]`) {
		t.Fatalf("record %s: %v", b, err)
	}

	// Someone else takes cpu1 offline: a give back leaves it.
	tree.SetCPUOnline(1, false)
	k.writes = nil
	rep = run(t, func(f func(types.ReleaseReport)) { r.GiveBack(ctx, decide.GiveBack{Generation: 2}, f) })
	if !rep.Done || !rep.GiveBack || rep.Short != "" {
		t.Fatalf("give back report %+v", rep)
	}
	for _, w := range k.writes {
		if w == "cpu1=1" {
			t.Errorf("gave back cpu1, which node-resized did not release")
		}
	}
	if n := len(k.writes); n != 10 {
		t.Errorf("give back wrote %v, want the 2 CPUs and 8 blocks", k.writes)
	}
	snap, _ = fsys.Snapshot()
	if got := r.Released(snap); !got.Empty() {
		t.Errorf("still released after the give back: %+v", got)
	}
}

func sameWords(a, b string) bool {
	x, y := strings.Fields(a), strings.Fields(b)
	if len(x) != len(y) {
		return false
	}
	seen := map[string]int{}
	for _, w := range x {
		seen[w]++
	}
	for _, w := range y {
		seen[w]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// A block that will not go is skipped for another; with none left the
// report says what could not be released.
func TestReleaseSkipsABlockThatWillNotGo(t *testing.T) {
	tree, fsys := releaseMachine(t)
	k := &kernel{t: t, tree: tree, busy: map[int]bool{23: true}}
	r := newTestReleaser(t, k, fsys, "")
	rep := run(t, func(f func(types.ReleaseReport)) {
		r.Release(context.Background(), decide.Release{Generation: 1, Capacity: resources.List{resources.Memory: 20 * testBlock}}, nil, f)
	})
	if !rep.Done || rep.Short != "" {
		t.Fatalf("report %+v: 4 blocks of 7 that go are enough", rep)
	}
	if tree.MemTotalKB() != 20*testBlock>>10 {
		t.Errorf("MemTotal %d KiB, want %d", tree.MemTotalKB(), 20*testBlock>>10)
	}
	// Now more than the DIMM can give: short, and it says why.
	rep = run(t, func(f func(types.ReleaseReport)) {
		r.Release(context.Background(), decide.Release{Generation: 2, Capacity: resources.List{resources.Memory: 14 * testBlock}}, nil, f)
	})
	if !rep.Done || !strings.Contains(rep.Short, "memory") || !strings.Contains(rep.Short, "EBUSY") && !strings.Contains(rep.Short, "busy") {
		t.Fatalf("report %+v", rep)
	}
	snap, _ := fsys.Snapshot()
	if got := r.Released(snap); len(got.Blocks) != 7 || got.Devices[0].SafeToUnplug {
		t.Errorf("released %+v: 7 of the DIMM's 8 blocks, not safe to unplug", got)
	}
}

// A daemon killed between two offlines: the record names what went, a new
// Releaser holds it at once, and the release resumed ends where one run
// would have.
func TestReleaseResumesFromItsRecord(t *testing.T) {
	tree, fsys := releaseMachine(t)
	record := filepath.Join(t.TempDir(), "released.json")
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	k := &kernel{t: t, tree: tree}
	killed := make(chan struct{})
	k.kill = map[int]func(){20: func() { once.Do(func() { cancel(); close(killed) }) }} // the kill lands as block 20 is written
	r := newTestReleaser(t, k, fsys, record)
	x := decide.Release{Generation: 1, Capacity: resources.List{resources.Memory: 16 * testBlock}}
	r.Release(ctx, x, nil, func(types.ReleaseReport) { t.Error("a cancelled release reported") })
	<-killed
	r.Stop()
	t.Logf("writes before the kill: %v", k.writes)

	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Blocks []int }
	if err := json.Unmarshal(b, &rec); err != nil || len(rec.Blocks) == 0 || len(rec.Blocks) == 8 {
		t.Fatalf("record at the kill: %s (%v): want some of the DIMM's blocks", b, err)
	}
	k2 := &kernel{t: t, tree: tree}
	r2 := newTestReleaser(t, k2, fsys, record)
	for _, id := range rec.Blocks {
		if !k2.holds.BlockHeld(id) {
			t.Errorf("block %d released before the kill is not held after it", id)
		}
	}
	rep := run(t, func(f func(types.ReleaseReport)) { r2.Release(context.Background(), x, nil, f) })
	if !rep.Done || rep.Short != "" || tree.MemTotalKB() != 16*testBlock>>10 {
		t.Fatalf("resumed: report %+v, MemTotal %d KiB", rep, tree.MemTotalKB())
	}
	snap, _ := fsys.Snapshot()
	if got := r2.Released(snap); len(got.Blocks) != 8 || !got.Devices[0].SafeToUnplug {
		t.Errorf("resumed to %+v, want the whole DIMM", got)
	}
}

// The record is input from disk: one the Releaser could not have written
// is moved aside, and nothing is held.
func TestReleaseRecordRefused(t *testing.T) {
	for name, body := range map[string]string{
		"garbage":     "not json",
		"bad version": `{"version":9,"cpus":[2]}`,
		"negative id": `{"version":1,"cpus":[-1]}`,
		"unsorted":    `{"version":1,"blocks":[5,4]}`,
	} {
		t.Run(name, func(t *testing.T) {
			tree, fsys := releaseMachine(t)
			record := filepath.Join(t.TempDir(), "released.json")
			if err := os.WriteFile(record, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			k := &kernel{t: t, tree: tree}
			_, err := NewReleaser(ReleaserConfig{FS: fsys, Writer: k, RecordPath: record})
			if err == nil || !strings.Contains(err.Error(), "moved to") {
				t.Fatalf("err %v", err)
			}
			if c, b := k.holds.Held(); len(c)+len(b) != 0 {
				t.Errorf("held %v %v from a refused record", c, b)
			}
		})
	}
}

// The evictions before a release take the CPUs the release leaves online:
// a pod's exclusive CPU is kept while the target allows, and where it does
// not, it is not among those that stay (so its pod is evicted first).
func TestStaysOnline(t *testing.T) {
	tree, fsys := releaseMachine(t)
	k := &kernel{t: t, tree: tree}
	r, err := NewReleaser(ReleaserConfig{FS: fsys, Writer: k,
		Exclusive: func() (map[int]string, error) { return map[int]string{3: "pod-a"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cpu  int64
		want string
	}{
		{4000, "[0 1 2 3]"},
		{2000, "[0 3]"}, // 2 and 1 go, the exclusive 3 stays
		{1000, "[0]"},   // 3 must go too: its pod is evicted first
	} {
		if got := fmt.Sprint(r.StaysOnline(snap, resources.List{resources.CPU: tc.cpu})); got != tc.want {
			t.Errorf("cpu %d: stays %s, want %s", tc.cpu, got, tc.want)
		}
	}
	if got := r.StaysOnline(snap, resources.List{resources.Memory: 1 << 30}); got != nil {
		t.Errorf("no cpu target: %v, want nil (the CPUs online now)", got)
	}
}

// What the hypervisor removes leaves the record and its hold, at once and
// across a restart: a DIMM plugged later into the freed range reuses the
// block ids, and must come online as any hot-added memory.
func TestReleasedDevicesTheHypervisorRemovedAreForgotten(t *testing.T) {
	tree, fsys := releaseMachine(t)
	k := &kernel{t: t, tree: tree}
	record := filepath.Join(t.TempDir(), "released.json")
	r := newTestReleaser(t, k, fsys, record)
	rep := run(t, func(f func(types.ReleaseReport)) {
		r.Release(context.Background(), decide.Release{Generation: 1, Capacity: resources.List{resources.Memory: 16 * testBlock}}, nil, f)
	})
	if !rep.Done || rep.Short != "" {
		t.Fatalf("report %+v", rep)
	}
	tree.RemoveDIMM(0)
	snap, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Released(snap); !got.Empty() {
		t.Errorf("released after the DIMM's removal: %+v", got)
	}
	if _, b := k.holds.Held(); len(b) != 0 {
		t.Errorf("blocks %v still held after their DIMM was removed", b)
	}
	// The same range plugged again: nothing holds it.
	tree.AddDIMM(tt.DIMM{Instance: 1, Blocks: tt.Ints(16, 23)}, 0, tt.BlockOffline, "Movable Normal")
	if err := k.OnlineBlock(context.Background(), 16, true); err != nil {
		t.Errorf("online of a re-plugged block: %v", err)
	}

	// Across a restart: a record that names removed blocks.
	if err := os.WriteFile(record, []byte(`{"version":1,"blocks":[30,31]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k2 := &kernel{t: t, tree: tree}
	newTestReleaser(t, k2, fsys, record)
	if _, b := k2.holds.Held(); len(b) != 0 {
		t.Errorf("blocks %v that no longer exist held at start", b)
	}
}

// --uninstall, with no daemon running: a Releaser started from the record
// brings back online what it names and the machine still has (not what
// someone else took offline), then removes the record; a second run finds
// nothing to do.
func TestGiveBackAllFromTheRecord(t *testing.T) {
	tree, fsys := releaseMachine(t)
	k := &kernel{t: t, tree: tree}
	record := filepath.Join(t.TempDir(), "released.json")
	r := newTestReleaser(t, k, fsys, record)
	rep := run(t, func(f func(types.ReleaseReport)) {
		r.Release(context.Background(), decide.Release{Generation: 1, Capacity: resources.List{resources.CPU: 2000, resources.Memory: 16 * testBlock}}, nil, f)
	})
	if !rep.Done || rep.Short != "" {
		t.Fatalf("release: %+v", rep)
	}
	r.Stop()
	tree.SetCPUOnline(1, false) // someone else's offline

	k2 := &kernel{t: t, tree: tree}
	r2 := newTestReleaser(t, k2, fsys, record)
	named, short, err := r2.GiveBackAll(context.Background())
	if err != nil || short != "" {
		t.Fatalf("GiveBackAll: %q, %v", short, err)
	}
	if named.CPUs.String() != "2-3" || len(named.Blocks) != 8 {
		t.Errorf("named %+v, want cpus 2-3 and the DIMM's 8 blocks", named)
	}
	snap, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if on := snap.CPUs.Online.String(); on != "0,2-3" {
		t.Errorf("online CPUs %s after the give back, want 0,2-3 (cpu1 was not ours)", on)
	}
	if tree.MemTotalKB() != 24*testBlock>>10 {
		t.Errorf("MemTotal %d KiB after the give back, want the whole machine", tree.MemTotalKB())
	}
	if _, err := os.Stat(record); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record is still there after everything was given back: %v", err)
	}
	r3 := newTestReleaser(t, &kernel{t: t, tree: tree}, fsys, record)
	if named, short, err := r3.GiveBackAll(context.Background()); !named.IsEmpty() || short != "" || err != nil {
		t.Errorf("a second run: %+v %q %v, want nothing", named, short, err)
	}
}
