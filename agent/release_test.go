package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// fakeReleaser records the releases and give backs it is asked for; the
// test reports their progress and says what is held released.
type fakeReleaser struct {
	mu        sync.Mutex
	releases  []decide.Release
	giveBacks []decide.GiveBack
	released  types.Released
}

var _ Releaser = (*fakeReleaser)(nil)

func (f *fakeReleaser) Release(_ context.Context, x decide.Release, _ *topology.Snapshot, _ func(types.ReleaseReport)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, x)
}

func (f *fakeReleaser) GiveBack(_ context.Context, x decide.GiveBack, _ func(types.ReleaseReport)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.giveBacks = append(f.giveBacks, x)
}

func (f *fakeReleaser) StaysOnline(*topology.Snapshot, resources.List) []int { return nil }

func (f *fakeReleaser) Released(*topology.Snapshot) types.Released {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.released
}

func (f *fakeReleaser) hold(r types.Released) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = r
}

// last returns the generation of the last release (or give back) asked for.
func (f *fakeReleaser) last(giveBack bool) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if giveBack {
		if len(f.giveBacks) == 0 {
			return 0, false
		}
		return f.giveBacks[len(f.giveBacks)-1].Generation, true
	}
	if len(f.releases) == 0 {
		return 0, false
	}
	return f.releases[len(f.releases)-1].Generation, true
}

const blockSize = 128 << 20

// releaseRig is a rig whose node allows planned releases, with 128 MiB
// memory blocks.
func releaseRig(t *testing.T, allow bool) (*rig, *fakeReleaser) {
	t.Helper()
	f := &fakeReleaser{}
	rg := newRig(t, 4, func(c *Config) { c.Release, c.Releaser = allow, f })
	rg.blocks(4)
	return rg, f
}

// blocks gives the agent a machine of cpus CPUs with memory blocks.
func (rg *rig) blocks(cpus int) {
	snap := machine(cpus)
	snap.MemoryBlockSize = blockSize
	rg.a.OnChange(monitor.Change{Time: rg.clock.Now(), Capacity: snap.Capacity()}, snap)
}

// askRelease asks for cpu CPUs with (or without) a planned release.
func (rg *rig) askRelease(cpu string, release bool) {
	v := conf("cpu", cpu)
	v.Configured.Release = release
	rg.a.OnNode(v)
}

// untilReleaser takes passes until the releaser was asked for a release
// (or a give back) after generation after.
func (rg *rig) untilReleaser(f *fakeReleaser, giveBack bool, after int64) int64 {
	rg.t.Helper()
	for range 10 {
		rg.a.pass(rg.ctx)
		if gen, ok := f.last(giveBack); ok && gen > after {
			return gen
		}
	}
	rg.t.Fatalf("no release (give back %v) after generation %d; condition %+v", giveBack, after, rg.a.Status().Condition)
	return 0
}

// gauge reads one of the planned release's gauges.
func (rg *rig) gauge(name string) float64 {
	rg.t.Helper()
	switch name {
	case "release_allowed":
		return testutil.ToFloat64(rg.m.ReleaseAllowed)
	case "release_in_progress":
		return testutil.ToFloat64(rg.m.ReleaseInProgress)
	case "released_cpus":
		return testutil.ToFloat64(rg.m.ReleasedCPUs)
	case "released_memory_bytes":
		return testutil.ToFloat64(rg.m.ReleasedMemoryBytes)
	}
	rg.t.Fatalf("no gauge %s", name)
	return 0
}

func (rg *rig) wantGauges(want map[string]float64) {
	rg.t.Helper()
	for name, v := range want {
		if got := rg.gauge(name); got != v {
			rg.t.Errorf("node_resized_%s = %v, want %v", name, got, v)
		}
	}
}

func (rg *rig) wantReleases(want map[string]float64) {
	rg.t.Helper()
	for _, r := range metrics.ReleaseResults {
		if got := testutil.ToFloat64(rg.m.Releases.WithLabelValues(r)); got != want[r] {
			rg.t.Errorf("node_resized_releases_total{result=%q} = %v, want %v", r, got, want[r])
		}
	}
}

// wantUnplug checks node_resized_memory_device_safe_to_unplug: exactly
// the devices of want, with their values.
func (rg *rig) wantUnplug(want map[string]float64) {
	rg.t.Helper()
	if got := testutil.CollectAndCount(rg.m.MemoryDeviceSafeToUnplug); got != len(want) {
		rg.t.Errorf("node_resized_memory_device_safe_to_unplug has %d series, want %d (%v)", got, len(want), want)
	}
	for dev, v := range want {
		if got := testutil.ToFloat64(rg.m.MemoryDeviceSafeToUnplug.WithLabelValues(dev)); got != v {
			rg.t.Errorf("node_resized_memory_device_safe_to_unplug{device=%q} = %v, want %v", dev, got, v)
		}
	}
}

// The planned release's metrics follow it from end to end: allowed, in
// progress while the CPUs and blocks go, what is held and which memory
// devices are safe to unplug once it is done, a device's series gone
// once the hypervisor removed it, the release counted done, and
// everything back to 0 after the give back.
func TestReleaseMetrics(t *testing.T) {
	rg, f := releaseRig(t, true)
	rg.a.pass(rg.ctx)
	rg.wantGauges(map[string]float64{"release_allowed": 1, "release_in_progress": 0, "released_cpus": 0, "released_memory_bytes": 0})
	rg.wantReleases(nil)
	rg.wantUnplug(nil)

	rg.askRelease("2", true)
	gen := rg.untilReleaser(f, false, 0)
	rg.wantGauges(map[string]float64{"release_in_progress": 1})
	rg.wantReleases(nil)

	// The CPUs and a DIMM and a half go offline; done.
	held := types.Released{CPUs: []int{2, 3}, Blocks: []int{32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
		Devices: []types.ReleasedDevice{
			{ID: "PNP0C80:00", Offline: 8, Blocks: 8, SafeToUnplug: true},
			{ID: "PNP0C80:01", Offline: 2, Blocks: 8},
		}}
	f.hold(held)
	rg.blocks(2)
	rg.a.ReportRelease(types.ReleaseReport{Generation: gen, Done: true})
	rg.a.pass(rg.ctx)
	if !slices.Contains(rg.relay.eventReasons(), types.EventCapacityReleased) {
		t.Fatalf("events %v, want %s", rg.relay.eventReasons(), types.EventCapacityReleased)
	}
	rg.wantGauges(map[string]float64{"release_in_progress": 0, "released_cpus": 2, "released_memory_bytes": 10 * blockSize})
	rg.wantUnplug(map[string]float64{"PNP0C80:00": 1, "PNP0C80:01": 0})
	rg.wantReleases(map[string]float64{"done": 1})

	// Passes that change nothing count nothing more.
	rg.a.pass(rg.ctx)
	rg.wantReleases(map[string]float64{"done": 1})

	// The hypervisor removed PNP0C80:00: its series goes.
	held.Blocks, held.Devices = held.Blocks[8:], held.Devices[1:]
	f.hold(held)
	rg.blocks(2)
	rg.a.pass(rg.ctx)
	rg.wantGauges(map[string]float64{"released_memory_bytes": 2 * blockSize})
	rg.wantUnplug(map[string]float64{"PNP0C80:01": 0})

	// Given back: in progress until its report, then nothing held.
	rg.askRelease("4", false)
	gb := rg.untilReleaser(f, true, gen)
	rg.wantGauges(map[string]float64{"release_in_progress": 1})
	f.hold(types.Released{})
	rg.blocks(4)
	rg.a.ReportRelease(types.ReleaseReport{Generation: gb, GiveBack: true, Done: true})
	rg.a.pass(rg.ctx)
	rg.wantGauges(map[string]float64{"release_in_progress": 0, "released_cpus": 0, "released_memory_bytes": 0})
	rg.wantUnplug(nil)
	rg.wantReleases(map[string]float64{"done": 1})
}

// A release that could not reach its target counts as short; one whose
// request changed while it ran counts as stopped.
func TestReleaseResults(t *testing.T) {
	rg, f := releaseRig(t, true)
	rg.askRelease("2", true)
	gen := rg.untilReleaser(f, false, 0)
	f.hold(types.Released{CPUs: []int{3}})
	rg.blocks(3)
	rg.a.ReportRelease(types.ReleaseReport{Generation: gen, Done: true, Short: "cpu 2: held exclusively by pod default/x"})
	rg.a.pass(rg.ctx)
	rg.wantReleases(map[string]float64{"short": 1})
	rg.wantGauges(map[string]float64{"release_in_progress": 0, "released_cpus": 1})

	// A new request for a release: it starts, and is stopped by the
	// next request before it is done.
	rg.askRelease("1", true)
	gen = rg.untilReleaser(f, false, gen)
	rg.wantGauges(map[string]float64{"release_in_progress": 1})
	rg.askRelease("4", false)
	rg.untilReleaser(f, true, gen)
	rg.wantReleases(map[string]float64{"short": 1, "stopped": 1})
}

// A node that does not allow releases says so, and a request that asks
// for one releases nothing and counts nothing.
func TestReleaseNotAllowed(t *testing.T) {
	rg, f := releaseRig(t, false)
	rg.wantGauges(map[string]float64{"release_allowed": 0})
	rg.askRelease("2", true)
	for range 5 {
		rg.a.pass(rg.ctx)
	}
	if _, ok := f.last(false); ok {
		t.Fatal("a node that does not allow it released")
	}
	rg.wantGauges(map[string]float64{"release_allowed": 0, "release_in_progress": 0})
	rg.wantReleases(nil)
	if got := testutil.CollectAndCount(rg.m.Releases); got != len(metrics.ReleaseResults) {
		t.Errorf("node_resized_releases_total has %d series, want each result at 0 (%d)", got, len(metrics.ReleaseResults))
	}
}

// A release that is done is reported only once the model has been rebuilt
// (Config.Resync): the releaser reports right after its last write to
// sysfs, and a pass on the model of a moment before took the last memory
// block for online. A report of progress does not wait.
func TestReleaseDoneWaitsForTheModel(t *testing.T) {
	a := New(Config{}, &fakeRelay{})
	var order []string
	a.SetResync(func(context.Context) error {
		a.mu.Lock()
		order = append(order, fmt.Sprintf("resync with report generation %d", a.release.Generation))
		a.mu.Unlock()
		return nil
	})
	report := a.reportRelease(context.Background())
	report(types.ReleaseReport{Generation: 1})
	report(types.ReleaseReport{Generation: 2, Done: true})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(order) != 1 || order[0] != "resync with report generation 1" || a.release.Generation != 2 || !a.release.Done {
		t.Errorf("resyncs %q, report %+v; want one resync, before the done report of generation 2 was taken", order, a.release)
	}
}
