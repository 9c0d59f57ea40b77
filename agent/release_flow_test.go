package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// cpuReleaser is a Releaser that records what it is asked and takes the
// CPUs above the target offline in the agent's model, as the kernel's
// uevents would report it.
type cpuReleaser struct {
	mu       sync.Mutex
	releases []decide.Release
	backs    []decide.GiveBack
	held     []int
	stay     []int
	onChange func(cpus int)
}

func (f *cpuReleaser) Release(_ context.Context, x decide.Release, snap *topology.Snapshot, report func(types.ReleaseReport)) {
	f.mu.Lock()
	f.releases = append(f.releases, x)
	n := len(snap.CPUs.Online)
	want := int(x.Capacity[resources.CPU] / 1000)
	for c := want; c < n; c++ {
		f.held = append(f.held, c)
	}
	f.mu.Unlock()
	go func() {
		f.onChange(want)
		report(types.ReleaseReport{Generation: x.Generation, Done: true})
	}()
}

func (f *cpuReleaser) GiveBack(_ context.Context, x decide.GiveBack, report func(types.ReleaseReport)) {
	f.mu.Lock()
	f.backs = append(f.backs, x)
	f.held = nil
	f.mu.Unlock()
	go report(types.ReleaseReport{Generation: x.Generation, GiveBack: true, Done: true})
}

func (f *cpuReleaser) StaysOnline(snap *topology.Snapshot, _ resources.List) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stay)
}

func (f *cpuReleaser) Released(*topology.Snapshot) types.Released {
	f.mu.Lock()
	defer f.mu.Unlock()
	return types.Released{CPUs: slices.Clone(f.held)}
}

// onlineEvictor records the CPUs each eviction takes for online, and
// reports every eviction done at once.
type onlineEvictor struct {
	mu      sync.Mutex
	online  [][]int
	release []bool // each eviction's Release
}

func (e *onlineEvictor) Start(_ context.Context, x decide.Evict, online []int, report func(types.EvictionReport)) {
	e.mu.Lock()
	e.online = append(e.online, slices.Clone(online))
	e.release = append(e.release, x.Release)
	e.mu.Unlock()
	go report(types.EvictionReport{Generation: x.Generation, Done: true})
}

// A request with release on a node that allows it: the evictions take the
// CPUs the release leaves online, the release goes out once they are done,
// its offlines are no loss, and the status shows what is held.
func TestReleaseThroughTheAgent(t *testing.T) {
	relay := &fakeRelay{}
	ev := &onlineEvictor{}
	var a *Agent
	fr := &cpuReleaser{stay: []int{0, 3}}
	fr.onChange = func(cpus int) {
		snap := machine(cpus)
		a.OnChange(monitorChange(snap), snap)
	}
	a = New(Config{Release: true, Releaser: fr, Evictor: ev}, relay)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	snap := machine(4)
	a.OnChange(monitorChange(snap), snap)
	a.OnNode(types.NodeView{})
	waitUntil(t, func() bool { s, ok := relay.last(); return ok && s.Condition.Reason == types.ReasonAccepted })

	v := conf("cpu", "2")
	v.Configured.Release = true
	a.OnNode(v)
	waitUntil(t, func() bool {
		st := a.Status()
		return st.Condition.Reason == types.ReasonAccepted && st.Release != nil && len(st.Release.CPUs) == 2
	})
	fr.mu.Lock()
	releases := len(fr.releases)
	fr.mu.Unlock()
	if releases != 1 {
		t.Fatalf("%d releases asked for, want 1", releases)
	}
	ev.mu.Lock()
	online, release := ev.online, ev.release
	ev.mu.Unlock()
	if len(online) == 0 || !slices.Equal(online[0], []int{0, 3}) || !release[0] {
		t.Errorf("the eviction before the release took %v for online (release %v), want the CPUs that stay, [0 3], said to be the release's", online, release)
	}
	for _, r := range relay.eventReasons() {
		if r == types.EventEmergencyCapacityReduced {
			t.Errorf("the release's own offlines made a %s", r)
		}
	}
	if st := a.Status(); !st.Release.Allowed || st.Release.Releasing || !slices.Equal(st.Release.CPUs, []int{2, 3}) {
		t.Errorf("status %+v", st.Release)
	}
	if !contains(relay.eventReasons(), types.EventCapacityReleased) {
		t.Errorf("events %v, want a %s", relay.eventReasons(), types.EventCapacityReleased)
	}

	// The request removed: given back.
	a.OnNode(types.NodeView{})
	waitUntil(t, func() bool { fr.mu.Lock(); defer fr.mu.Unlock(); return len(fr.backs) == 1 })
}

func monitorChange(snap *topology.Snapshot) monitor.Change {
	return monitor.Change{Time: time.Now(), Capacity: snap.Capacity()}
}
