package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/types"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
	"github.com/node-resized/node-resized/uevent"
)

// The API end to end: a real monitor over a real topology.FS on a
// synthetic tree, the server on a unix socket, and the client.

const blockKB = 128 << 10 // the tree's 128 MiB memory blocks, in kB

// apiMachine is a two-socket VM with a NUMA node per socket: cpu0-3 on
// node0, cpu4-7 on node1 with cpu7 offline, room for cpu8-15; 2 GiB of
// memory blocks per node, the last 4 of node1 offline; 32 × 2 MiB
// hugepages per node.
func apiMachine() topologytest.Machine {
	return topologytest.Machine{
		CPUs:     append(topologytest.SMTCPUs(0, 4, 0, 0), topologytest.SMTCPUs(4, 4, 1, 0, 7)...),
		Possible: topologytest.Ints(0, 15),
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 1990000, Distances: []int{10, 20},
				Pools: []topologytest.Pool{{KB: 2048, Nr: 32}}},
			{ID: 1, CPUs: topologytest.Ints(4, 7), MemKB: 1500000, Distances: []int{20, 10},
				Pools: []topologytest.Pool{{KB: 2048, Nr: 32}}},
		},
		BlockSize: blockKB << 10,
		Blocks: slices.Concat(
			topologytest.Blocks(0, 16, topology.BlockOnline, "Normal", 0),
			topologytest.Blocks(16, 12, topology.BlockOnline, "Normal", 1),
			topologytest.Blocks(28, 4, topology.BlockOffline, "Movable Normal", 1),
		),
		MemKB: 1990000 + 1500000,
		Pools: []topologytest.Pool{{KB: 2048, Nr: 64}},
	}
}

// source is a monitor.Source fed by the test. Like the daemon's uevent
// listener, it counts each event it delivers in node_resized_uevents_total.
type source struct {
	metrics *metrics.Metrics
	events  chan uevent.Event
	closed  chan struct{}
	once    sync.Once
}

var _ monitor.Source = (*source)(nil)

func (s *source) Receive() (uevent.Event, error) {
	select {
	case ev := <-s.events:
		s.metrics.UeventsTotal.WithLabelValues(ev.Subsystem, ev.Action.String()).Inc()
		return ev, nil
	case <-s.closed:
		return uevent.Event{}, net.ErrClosed
	}
}

func (s *source) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// apiEnv is a running monitor and server over a tree.
type apiEnv struct {
	t       *testing.T
	tree    *topologytest.Tree
	mon     *monitor.Monitor
	src     *source
	metrics *metrics.Metrics
	socket  string
	client  *api.Client
	server  *api.Server
	changes <-chan monitor.Change // every change after the startup one
	seq     uint64                // the last SEQNUM sent

	stopServe context.CancelFunc
	served    chan error // Serve's result
	stopMon   context.CancelFunc
}

func startAPI(t *testing.T, info ...api.Info) *apiEnv {
	t.Helper()
	o := apiOptions{}
	if len(info) > 0 {
		o.info = &info[0]
	}
	return startAPIWith(t, o)
}

// apiOptions change what startAPIWith starts; the zero value is
// startAPI's.
type apiOptions struct {
	info    *api.Info
	limits  *api.Limits
	history int // the monitor's History; 0: its default
}

func startAPIWith(t *testing.T, o apiOptions) *apiEnv {
	t.Helper()
	e := &apiEnv{t: t, metrics: metrics.New(), seq: 3000}
	e.tree = apiMachine().WriteTree(t, topologytest.Dir(t))
	fsys, err := topology.NewFS(e.tree.Sys, e.tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	e.src = &source{metrics: e.metrics, events: make(chan uevent.Event, 1024), closed: make(chan struct{})}
	e.mon = monitor.New(fsys, e.src, monitor.Config{MemPoll: -1, Resync: -1, Metrics: e.metrics, History: o.history})
	ch, unsubscribe := e.mon.Subscribe()
	e.changes = ch
	ctx, stop := context.WithCancel(context.Background())
	e.stopMon = stop
	ran := make(chan error, 1)
	go func() { ran <- e.mon.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		unsubscribe()
		if err := within(t, ran, "Run"); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-e.mon.Ready():
	case err := <-ran:
		t.Fatalf("Run: %v", err)
	}
	if c := e.next(); c.ID != 1 {
		t.Fatalf("first change #%d, want the startup model #1", c.ID)
	}

	e.socket = filepath.Join(t.TempDir(), "s.sock")
	ln, err := api.Listen(e.socket, "")
	if err != nil {
		t.Fatal(err)
	}
	in := api.Info{Version: "v0.0.0-test", Hostname: "node-a", Mode: "standalone"}
	if o.info != nil {
		in = *o.info
	}
	srv := api.NewServer(e.mon, e.metrics, in, nil)
	if o.limits != nil {
		srv.Limits = *o.limits
	}
	e.server = srv
	sctx, stopServe := context.WithCancel(context.Background())
	e.stopServe, e.served = stopServe, make(chan error, 1)
	go func() { e.served <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stopServe()
		if err := within(t, e.served, "Serve"); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	e.client = api.NewClient(e.socket)
	return e
}

// within waits up to 10s for the result of a goroutine that should end.
func within(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not return within 10s", what)
		return nil
	}
}

// next waits for the monitor's next change.
func (e *apiEnv) next() monitor.Change {
	e.t.Helper()
	select {
	case c := <-e.changes:
		return c
	case <-time.After(10 * time.Second):
		e.t.Fatal("no change within 10s")
	}
	return monitor.Change{}
}

// event sends the kernel's uevent for devpath with the next SEQNUM.
func (e *apiEnv) event(action uevent.Action, subsystem, devpath string) uint64 {
	e.seq++
	e.src.events <- uevent.Event{
		Action: action, DevPath: devpath, Subsystem: subsystem, Seqnum: e.seq,
		Env: map[string]string{
			"ACTION": action.String(), "DEVPATH": devpath, "SUBSYSTEM": subsystem,
			"SEQNUM": strconv.FormatUint(e.seq, 10),
		},
		Received: time.Now(),
	}
	return e.seq
}

// cpuOffline takes cpu id offline in the tree and sends its uevent.
func (e *apiEnv) cpuOffline(id int) uint64 {
	e.tree.SetCPUOnline(id, false)
	return e.event(uevent.ActionOffline, "cpu", fmt.Sprintf("/devices/system/cpu/cpu%d", id))
}

// onlineBlock onlines memory block id of node1 in the tree, MemTotal
// growing with it; no uevent.
func (e *apiEnv) onlineBlock(id int) {
	e.tree.SetBlockState(id, topology.BlockOnline)
	e.tree.SetNodeMemTotalKB(1, e.tree.NodeMemTotalKB(1)+blockKB)
	e.tree.SetMemTotalKB(e.tree.MemTotalKB() + blockKB)
}

// raw sends a request without the client and returns the status, the
// Content-Type and the body.
func (e *apiEnv) raw(method, path string) (int, string, []byte) {
	e.t.Helper()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.socket)
		},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://node-resized"+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

func kinds(c monitor.Change) []string {
	var ks []string
	for _, ch := range c.Changes {
		ks = append(ks, ch.Kind)
	}
	return ks
}

func ids(cs []api.Event) []uint64 {
	var out []uint64
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestServerStatus(t *testing.T) {
	e := startAPI(t)
	st, err := e.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"cpu": "7", "memory": "3490000Ki", "hugepages-2Mi": "128Mi"} {
		q, ok := st.Physical[name]
		if !ok || resources.Format(name, q) != want {
			t.Errorf("physical %s = %q (present %v), want %q", name, resources.Format(name, q), ok, want)
		}
	}
	if len(st.Physical) != 3 {
		t.Errorf("physical %v, want cpu, memory and hugepages-2Mi only", st.Physical)
	}
	for name, c := range map[string]struct {
		got  topology.CPUSet
		want string
	}{
		"online":   {st.CPUs.Online, "0-6"},
		"offline":  {st.CPUs.Offline, "7-15"},
		"present":  {st.CPUs.Present, "0-7"},
		"possible": {st.CPUs.Possible, "0-15"},
	} {
		if c.got.String() != c.want {
			t.Errorf("cpus %s = %q, want %q", name, c.got, c.want)
		}
	}
	wantMem := api.MemoryStatus{TotalBytes: 3490000 << 10, BlockSizeBytes: 128 << 20, BlocksOnline: 28, BlocksOffline: 4}
	if st.Memory != wantMem {
		t.Errorf("memory %+v, want %+v", st.Memory, wantMem)
	}
	wantNodes := []struct {
		cpus string
		mem  uint64
	}{{"0-3", 1990000 << 10}, {"4-6", 1500000 << 10}}
	if len(st.NUMANodes) != len(wantNodes) {
		t.Fatalf("%d NUMA nodes, want %d", len(st.NUMANodes), len(wantNodes))
	}
	for i, w := range wantNodes {
		n := st.NUMANodes[i]
		if n.ID != i || n.CPUs.String() != w.cpus || n.Memory != w.mem || n.Capacity["hugepages-2Mi"] != 64<<20 {
			t.Errorf("NUMA node %d = %+v, want cpus %s, memory %d, 64Mi of 2Mi hugepages", i, n, w.cpus, w.mem)
		}
	}
	if st.Version != "v0.0.0-test" || st.Hostname != "node-a" || st.Mode != "standalone" || st.Kubernetes != nil {
		t.Errorf("version %q hostname %q mode %q kubernetes %v", st.Version, st.Hostname, st.Mode, st.Kubernetes)
	}
	if c := st.LastChange; c == nil || c.ID != 1 || !slices.Equal(c.Triggers, []monitor.Trigger{monitor.TriggerStartup}) {
		t.Errorf("last change %+v, want the startup model", c)
	}
	if st.Stats.Changes != 1 || st.Stats.StartedAt.IsZero() || time.Since(st.Now) > time.Minute {
		t.Errorf("stats %+v now %v", st.Stats, st.Now)
	}

	// On the wire the quantities are strings, as the API server writes
	// a ResourceList.
	code, ctype, body := e.raw(http.MethodGet, "/v1/status")
	var wire struct {
		Physical map[string]any `json:"physical"`
	}
	if err := json.Unmarshal(body, &wire); err != nil || code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET /v1/status: %d %q %v", code, ctype, err)
	}
	if wire.Physical["memory"] != "3490000Ki" || wire.Physical["cpu"] != "7" {
		t.Errorf("physical on the wire %v, want memory \"3490000Ki\" and cpu \"7\"", wire.Physical)
	}
}

type fakeDecisions struct{ st agent.Status }

func (f fakeDecisions) Status() agent.Status { return f.st }

type fakeRelay struct{ st types.RelayStats }

func (f fakeRelay) Stats() types.RelayStats { return f.st }

type fakeEnforcement struct{ st cgroup.Status }

func (f fakeEnforcement) Status() cgroup.Status { return f.st }

// TestServerStatusParts: /v1/status shows what the decision loop, the relay
// and the enforcer report, read through their interfaces.
func TestServerStatusParts(t *testing.T) {
	e := startAPI(t, api.Info{
		Mode: "kubernetes", NodeName: "node-a",
		Decisions: fakeDecisions{agent.Status{
			Configured:       types.Configured{Present: true, Raw: map[string]string{"cpu": "4"}},
			ConfiguredSource: types.SourceAnnotation,
			Target:           resources.List{resources.CPU: 4000, resources.Memory: 8 << 30},
			Allocatable:      resources.List{resources.CPU: 3500, resources.Memory: 7 << 30},
			Condition:        types.Condition{Status: types.StatusTrue, Reason: types.ReasonAccepted},
			Kubelet: &agent.KubeletStatus{
				KubeletView: types.KubeletView{Unit: "kubelet.service", ActiveState: "active", SubState: "running", MainPID: 42,
					Started: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Capacity: resources.List{resources.CPU: 2000},
					Sources: map[string]string{"cpu": "pod-resources API"}, Ready: true, Stale: true, StaleSince: 7},
				Restart: "never", RestartBlocked: "restarts are turned off",
				LastRestart: &agent.RestartRecord{Result: "failed"},
			},
		}},
		Relay:       fakeRelay{types.RelayStats{Patches: 3, Pending: true, LastError: "boom"}},
		Enforcement: fakeEnforcement{cgroup.Status{Kubepods: "/sys/fs/cgroup/kubepods", Found: true}},
	})
	st, err := e.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k := st.Kubernetes
	if k == nil || k.NodeName != "node-a" || k.Configured["cpu"] != "4" || k.ConfiguredSource != types.SourceAnnotation ||
		resources.Format(resources.CPU, k.Allocatable[resources.CPU]) != "3500m" || k.Target[resources.Memory] != 8<<30 ||
		k.Condition.Reason != "Accepted" || k.Patches != 3 || !k.PatchPending || k.PatchError != "boom" {
		t.Fatalf("kubernetes status %+v", k)
	}
	kl := st.Kubelet
	if kl == nil || kl.Unit != "kubelet.service" || kl.ActiveState != "active" || kl.MainPID != 42 || !kl.Started.Equal(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) ||
		kl.Capacity[resources.CPU] != 2000 || !kl.Stale || kl.StaleSince != 7 || kl.Restart != "never" || kl.RestartBlocked == "" ||
		kl.LastRestart == nil || kl.LastRestart.Result != "failed" || kl.Sources["cpu"] == "" {
		t.Fatalf("kubelet status %+v", kl)
	}
	var enf cgroup.Status
	if err := json.Unmarshal(st.Enforcement, &enf); err != nil || !enf.Found || enf.Kubepods != "/sys/fs/cgroup/kubepods" {
		t.Fatalf("enforcement %s (%v)", st.Enforcement, err)
	}
}

func TestServerTopology(t *testing.T) {
	e := startAPI(t)
	s, err := e.client.Topology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.MemTotal != 3490000<<10 || s.MemoryBlockSize != 128<<20 || len(s.MemoryBlocks) != 32 || len(s.Nodes) != 2 {
		t.Fatalf("MemTotal %d, block size %d, %d blocks, %d nodes", s.MemTotal, s.MemoryBlockSize, len(s.MemoryBlocks), len(s.Nodes))
	}
	want := topology.MemoryBlock{ID: 30, State: topology.BlockOffline, Zone: "Movable", Node: 1}
	if b := s.MemoryBlocks[30]; b != want {
		t.Errorf("block 30 = %+v, want %+v", b, want)
	}
	if s.CPUs.Online.String() != "0-6" || len(s.Nodes[1].CPUs) != 3 || s.Nodes[1].MemTotal != 1500000<<10 {
		t.Errorf("online %s, node1 %+v", s.CPUs.Online, s.Nodes[1])
	}
	if want := []topology.Hugepages{{PageSize: 2 << 20, Count: 64}}; !slices.Equal(s.Hugepages, want) {
		t.Errorf("hugepages %+v, want %+v", s.Hugepages, want)
	}
	// The model the API serves is the monitor's.
	snap, _ := e.mon.Snapshot()
	if a, b := mustJSON(t, s), mustJSON(t, snap); a != b {
		t.Errorf("GET /v1/topology differs from the monitor's model\n got %s\nwant %s", a, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServerEvents(t *testing.T) {
	e := startAPI(t)
	ctx := context.Background()
	evs, err := e.client.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != 1 || evs[0].Triggers[0] != monitor.TriggerStartup {
		t.Fatalf("events %v, want the startup change alone", ids(evs))
	}
	seq := e.cpuOffline(6)
	e.next()
	evs, err = e.client.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(evs), []uint64{1, 2}) {
		t.Fatalf("events %v, want [1 2]", ids(evs))
	}
	c := evs[1]
	if !slices.Equal(kinds(c.Change), []string{topology.ChangeCPUOffline, topology.ChangeNodeCPUs}) ||
		c.Capacity[resources.CPU] != 6000 || c.Events != 1 || c.Seqnums.String() != strconv.FormatUint(seq, 10) {
		t.Errorf("change %+v: want cpu6 offline, 6 cpus, seqnum %d", c, seq)
	}
}

func TestServerResync(t *testing.T) {
	e := startAPI(t)
	ctx := context.Background()
	r, err := e.client.Resync(ctx)
	if err != nil || r.Changed || r.Change != nil {
		t.Fatalf("Resync of an unchanged machine = %+v, %v; want unchanged", r, err)
	}
	// Block 28 comes online with no uevent (one lost, say): only a
	// resync sees it.
	e.onlineBlock(28)
	r, err = e.client.Resync(ctx)
	if err != nil || !r.Changed || r.Change == nil {
		t.Fatalf("Resync after a change = %+v, %v; want changed", r, err)
	}
	c := r.Change
	if c.ID != 2 || !slices.Equal(c.Triggers, []monitor.Trigger{monitor.TriggerRequest}) ||
		!slices.Equal(kinds(*c), []string{topology.ChangeNodeMemTotal, topology.ChangeMemoryBlockOnline, topology.ChangeMemTotal}) ||
		c.Capacity[resources.Memory] != (3490000+blockKB)<<10 {
		t.Errorf("change %+v: want #2, a requested resync, block 28 online, MemTotal up by a block", c)
	}
	st, err := e.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q := resources.Format(resources.Memory, st.Physical["memory"]); q != strconv.Itoa(3490000+blockKB)+"Ki" || st.Memory.BlocksOnline != 29 {
		t.Errorf("status after the resync: memory %s, %d blocks online", q, st.Memory.BlocksOnline)
	}
	r, err = e.client.Resync(ctx)
	if err != nil || r.Changed {
		t.Errorf("a second Resync = %+v, %v; want unchanged", r, err)
	}
}

// follow runs Client.Follow from since in a goroutine; it returns the
// changes it receives and Follow's result.
func (e *apiEnv) follow(ctx context.Context, since api.Cursor) (<-chan api.Event, <-chan error) {
	got := make(chan api.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- e.client.Follow(ctx, since, func(c api.Event) error {
			got <- c
			return nil
		})
	}()
	return got, done
}

func receive(t *testing.T, got <-chan api.Event) api.Event {
	t.Helper()
	select {
	case c := <-got:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("Follow delivered nothing within 10s")
	}
	return api.Event{}
}

func TestServerFollow(t *testing.T) {
	e := startAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	got, done := e.follow(ctx, api.Cursor{})
	if c := receive(t, got); c.ID != 1 || c.Triggers[0] != monitor.TriggerStartup {
		t.Fatalf("first followed change #%d %v, want the startup #1", c.ID, c.Triggers)
	}
	seq := e.cpuOffline(6)
	if c := receive(t, got); c.ID != 2 || !slices.Equal(kinds(c.Change), []string{topology.ChangeCPUOffline, topology.ChangeNodeCPUs}) ||
		c.Seqnums.String() != strconv.FormatUint(seq, 10) {
		t.Fatalf("second followed change #%d %v seqnums %s, want #2 cpu6 offline from %d", c.ID, kinds(c.Change), c.Seqnums.String(), seq)
	}
	// An unchanged rebuild sends nothing; the next change follows #2.
	if r, err := e.client.Resync(ctx); err != nil || r.Changed {
		t.Fatalf("Resync = %+v, %v", r, err)
	}
	e.onlineBlock(28)
	e.event(uevent.ActionOnline, "memory", "/devices/system/memory/memory28")
	if c := receive(t, got); c.ID != 3 || !slices.Contains(kinds(c.Change), topology.ChangeMemoryBlockOnline) {
		t.Fatalf("third followed change #%d %v, want #3 with block 28 online", c.ID, kinds(c.Change))
	}
	cancel()
	if err := within(t, done, "Follow"); err != nil {
		t.Errorf("Follow after its context was cancelled = %v, want nil", err)
	}
	for c := range drain(got) {
		t.Errorf("Follow delivered #%d again or out of order", c.ID)
	}

	// Since #2: the history after it, then what happens next, once each.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	got, done = e.follow(ctx, api.Cursor{ID: 2})
	if c := receive(t, got); c.ID != 3 {
		t.Fatalf("first change since #2 is #%d, want #3", c.ID)
	}
	e.cpuOffline(5)
	if c := receive(t, got); c.ID != 4 || c.Capacity[resources.CPU] != 5000 {
		t.Fatalf("next change #%d with %d cpus, want #4 with 5", c.ID, c.Capacity[resources.CPU]/1000)
	}
	cancel()
	if err := within(t, done, "Follow"); err != nil {
		t.Errorf("Follow = %v", err)
	}
	for c := range drain(got) {
		t.Errorf("Follow since #2 delivered #%d again or out of order", c.ID)
	}
}

// drain yields what is left in a channel that no one sends on any more.
func drain(ch <-chan api.Event) func(func(api.Event) bool) {
	return func(yield func(api.Event) bool) {
		for {
			select {
			case c := <-ch:
				if !yield(c) {
					return
				}
			default:
				return
			}
		}
	}
}

func TestServerMetrics(t *testing.T) {
	e := startAPI(t)
	e.cpuOffline(6)
	e.next()
	code, ctype, body := e.raw(http.MethodGet, "/metrics")
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("GET /metrics: %d %q", code, ctype)
	}
	text := string(body)
	for _, want := range []string{
		`node_resized_uevents_total{action="offline",subsystem="cpu"} 1`,
		`node_resized_detection_latency_seconds_count 1`,
		`node_resized_detection_latency_seconds_bucket{le="+Inf"} 1`,
		`node_resized_physical_capacity{resource="cpu",unit="core"} 6`,
		`node_resized_physical_capacity{resource="memory",unit="byte"} 3.57376e+09`,
		`node_resized_physical_capacity{resource="hugepages-2Mi",unit="byte"} 1.34217728e+08`,
		`node_resized_numa_node_capacity{numa_node="1",resource="cpu",unit="core"} 2`,
		`node_resized_numa_node_capacity{numa_node="0",resource="hugepages-2Mi",unit="byte"} 6.7108864e+07`,
		`node_resized_model_changes_total{kind="cpu_offline"} 1`,
		`node_resized_model_rebuilds_total{result="changed",trigger="uevent"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestServerHealthz(t *testing.T) {
	e := startAPI(t)
	code, ctype, body := e.raw(http.MethodGet, "/healthz")
	var h map[string]string
	if err := json.Unmarshal(body, &h); err != nil || code != http.StatusOK || ctype != "application/json" || h["status"] != "ok" {
		t.Errorf("GET /healthz: %d %q %s (%v)", code, ctype, body, err)
	}
}

func TestServerUnknownPath(t *testing.T) {
	e := startAPI(t)
	code, ctype, body := e.raw(http.MethodGet, "/v1/nope")
	var apiErr api.Error
	if err := json.Unmarshal(body, &apiErr); err != nil || code != http.StatusNotFound || ctype != "application/json" {
		t.Fatalf("GET /v1/nope: %d %q %s (%v); want a 404 with a JSON error", code, ctype, body, err)
	}
	if !strings.Contains(apiErr.Error, "GET /v1/nope") || !strings.Contains(apiErr.Error, "/v1/status") {
		t.Errorf("error %q, want one naming the request and the endpoints", apiErr.Error)
	}
}

// A request with the wrong method is rejected with a JSON error, and a
// GET of /v1/resync does not resync.
func TestServerWrongMethod(t *testing.T) {
	e := startAPI(t)
	before := e.mon.Stats().Rebuilds
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/status"},
		{http.MethodPost, "/v1/topology"},
		{http.MethodDelete, "/v1/events"},
		{http.MethodPut, "/healthz"},
		{http.MethodGet, "/v1/resync"},
	} {
		code, ctype, body := e.raw(r.method, r.path)
		var apiErr api.Error
		if code != http.StatusMethodNotAllowed && code != http.StatusNotFound {
			t.Errorf("%s %s: %d, want it rejected", r.method, r.path, code)
		}
		if err := json.Unmarshal(body, &apiErr); err != nil || ctype != "application/json" || apiErr.Error == "" {
			t.Errorf("%s %s: %q %s, want a JSON error", r.method, r.path, ctype, body)
		}
	}
	if after := e.mon.Stats().Rebuilds; after != before {
		t.Errorf("%d rebuilds after requests with the wrong method, want none", after-before)
	}
}

// Cancelling Serve's context ends an open event stream and Serve returns
// promptly; the follower is told the stream ended.
func TestServeEndsOpenFollowStream(t *testing.T) {
	e := startAPI(t)
	got, done := e.follow(context.Background(), api.Cursor{})
	receive(t, got) // the stream is open
	start := time.Now()
	e.stopServe()
	select {
	case err := <-e.served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
		e.served <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of its context being cancelled")
	}
	// Shutdown waits up to 5s for requests in flight; the stream must not
	// be one it waits for.
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Serve took %v to return with a stream open", took)
	}
	if err := within(t, done, "Follow"); err == nil {
		t.Error("Follow returned nil when the daemon ended the stream, want an error")
	}
	_, err := e.client.Status(context.Background())
	var nr *api.NotRunningError
	if !errors.As(err, &nr) {
		t.Errorf("Status after Serve returned = %v, want a NotRunningError", err)
	}
}
