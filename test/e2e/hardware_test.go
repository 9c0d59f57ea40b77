package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/node-resized/node-resized/test/internal/daemontest"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// settledPatches waits until the daemon's relay has nothing pending and
// returns how many status patches it has had acknowledged.
func (e *env) settledPatches() uint64 {
	e.t.Helper()
	var last uint64
	stable := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := e.status()
		if err != nil || st.Kubernetes == nil || st.Kubernetes.PatchPending {
			stable = 0
			continue
		}
		if st.Kubernetes.Patches == last {
			stable++
		} else {
			last, stable = st.Kubernetes.Patches, 0
		}
		if stable >= 10 { // one second without a new patch
			return last
		}
	}
	e.t.Fatal("the relay did not settle within 30s")
	return 0
}

// settled waits until the daemon has taken at least uevents uevents in
// all, its relay has nothing pending, and neither a rebuild nor a patch
// has happened for a second; it returns the daemon's status then. After
// 30s it returns the last status, for the caller to report.
func (e *env) settled(uevents uint64) *daemonStatus {
	e.t.Helper()
	var last *daemonStatus
	stable := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := e.status()
		if err != nil || st.Kubernetes == nil {
			continue
		}
		if last != nil && st.Stats.Rebuilds == last.Stats.Rebuilds && st.Kubernetes.Patches == last.Kubernetes.Patches {
			stable++
		} else {
			stable = 0
		}
		last = st
		if st.Stats.Uevents >= uevents && !st.Kubernetes.PatchPending && stable >= 10 {
			return st
		}
	}
	if last == nil {
		e.t.Fatal("the daemon did not answer for 30s")
	}
	e.t.Errorf("the daemon did not settle within 30s: %d uevents taken (want %d), patch pending %v",
		last.Stats.Uevents, uevents, last.Kubernetes.PatchPending)
	return last
}

// kernelUevent makes the kernel itself send a uevent for a real sysfs
// object (writing the action to its uevent file): a real kernel message,
// sender port 0, with a SEQNUM.
func kernelUevent(t *testing.T, devpath, action string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/sys", devpath, "uevent"), []byte(action), 0o200); err != nil {
		t.Fatalf("make the kernel send %s@%s: %v", action, devpath, err)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make the kernel send uevents")
	}
}

// A DIMM hot-add as the kernel does it. add_memory_resource maps the whole
// DIMM, then registers its memory block devices one after the other, each
// sending its "add" uevent: a device registration, tens of microseconds a
// block. With auto-onlining (memory/auto_online_blocks) it then onlines
// them in turn: a block's 32768 struct pages are initialised and its
// 128 MiB handed to the page allocator, MemTotal grows by the block, and
// its "online" uevent follows: a few hundred microseconds a block. Here a
// block takes addPace or onlinePace, or longer when changing the tree and
// making the kernel send the uevent take longer (about 150µs for an add on
// tmpfs); the test reports the pace it reached.
const (
	dimmBlocks = 512 // 64 GiB in 128 MiB blocks
	addPace    = 100 * time.Microsecond
	onlinePace = 300 * time.Microsecond
	// The daemon's shipped --coalesce-quiet and --coalesce-max.
	shippedQuiet = 20 * time.Millisecond
	shippedMax   = 500 * time.Millisecond
)

// TestDIMMBurstIsOnePatch hot-adds a 64 GiB DIMM to the synthetic machine
// with the daemon's shipped settings: 512 blocks of 128 MiB added one by
// one, then onlined one by one, the tree changing before each block's real
// kernel uevent (1024 in all) at the kernel's pace. It measures the model
// changes and the Node status patches the DIMM costs and requires: no lost
// events; the Node and the daemon ending at the tree's MemTotal; no more
// changes than the burst's first event (rebuilt at once) and the
// coalescing windows of the rest of the timeline the test produced; and no
// more patches than changes of capacity. When the rest was one window (the
// sender did not stall), that is at most two model changes and exactly one
// patch. The API server's own count of status PATCH requests must agree
// with the daemon's.
func TestDIMMBurstIsOnePatch(t *testing.T) {
	needRoot(t)
	real, err := filepath.Glob("/sys/devices/system/memory/memory[0-9]*")
	if err != nil || len(real) == 0 {
		t.Skip("this kernel has no memory block devices to send uevents for")
	}
	devpath := func(i int) string { return strings.TrimPrefix(real[i%len(real)], "/sys") }
	e := setup(t, nodeBurst, envOptions{cpus: 2, uevents: true, kubeletGap: time.Hour, shipped: true})
	e.waitState(2, "Accepted")
	patches0 := e.settledPatches()
	st0 := e.mustStatus()
	requests0 := apiServerStatusPatches(t, e.admin)
	nodeMem := watchNodeMemory(t, e.admin, e.node)

	firstBlock := len(e.tree.Machine().Blocks)
	blockKB := uint64(blockSize >> 10)
	sent := make([]time.Time, 0, 2*dimmBlocks)
	// Each block takes the kernel's time for it at the least (the tree's
	// change and the uevent included), then its uevent goes out; a stall
	// delays the rest, as it would the kernel's.
	block := func(pace time.Duration, change func()) {
		began := time.Now()
		change()
		sent = append(sent, time.Now())
		waitUntil(began.Add(pace))
	}
	start := time.Now()
	for i := range dimmBlocks {
		block(addPace, func() {
			e.tree.AddBlocks(firstBlock+i, 1, 0, topologytest.BlockOffline, "Movable Normal")
			kernelUevent(t, devpath(i), "add")
		})
	}
	// Then the kernel onlines them, one by one.
	for i := range dimmBlocks {
		block(onlinePace, func() {
			e.tree.SetMemTotalKB(e.tree.MemTotalKB() + blockKB)
			e.tree.SetNodeMemTotalKB(0, e.tree.NodeMemTotalKB(0)+blockKB)
			e.tree.SetBlockState(firstBlock+i, topologytest.BlockOnline)
			kernelUevent(t, devpath(i), "online")
		})
	}
	took := time.Since(start)
	want := int64(e.tree.MemTotalKB()) << 10

	e.waitNode("memory at the tree's MemTotal", func(n *corev1.Node) bool {
		q := n.Status.Capacity[corev1.ResourceMemory]
		return q.Value() == want
	})
	st := e.settled(st0.Stats.Uevents + 2*dimmBlocks)
	patches := st.Kubernetes.Patches - patches0
	requests := apiServerStatusPatches(t, e.admin) - requests0
	changes := e.changes(st0.LastChange.ID)
	shown := nodeMem.stop()
	n, err := e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if q := n.Status.Capacity[corev1.ResourceMemory]; q.Value() != want {
		t.Errorf("Node memory capacity %s, want the tree's MemTotal %d", q.String(), want)
	}
	if q := st.Physical[corev1.ResourceMemory]; q.Value() != want {
		t.Errorf("the daemon's physical memory %s, want the tree's MemTotal %d", q.String(), want)
	}
	lost := st.Stats.LostEvents - st0.Stats.LostEvents
	uevents := st.Stats.Uevents - st0.Stats.Uevents
	nchanges := st.Stats.Changes - st0.Stats.Changes
	events, capChanges := 0, 0
	var lines []string
	prev := st0.LastChange.Capacity
	for _, c := range changes {
		events += c.Events
		if !resourceListEqual(c.Capacity, prev) {
			capChanges++
		}
		prev = c.Capacity
		q := c.Capacity[corev1.ResourceMemory]
		lines = append(lines, fmt.Sprintf("#%d %v %d uevents, seqnums %s, latency %s, memory %s: %s",
			c.ID, c.Triggers, c.Events, c.Seqnums, time.Duration(c.LatencySeconds*float64(time.Second)).Round(time.Microsecond),
			q.String(), details(c.Changes)))
	}
	// The first event is a change of its own; the rest coalesce.
	windows := coalescingWindows(sent[1:], shippedQuiet/2, shippedMax*9/10)
	addGap, onlineGap := gaps(sent[:dimmBlocks]), gaps(sent[dimmBlocks:])
	t.Logf("one 64 GiB DIMM: %d kernel uevents sent in %s (add gaps %s, online gaps %s)",
		len(sent), took.Round(time.Millisecond), addGap, onlineGap)
	t.Logf("daemon: %d uevents received, %d lost; %d model changes (%d of capacity) carrying %d uevents; coalescing windows of this timeline after its first event: %d",
		uevents, lost, nchanges, capChanges, events, windows)
	for _, l := range lines {
		t.Logf("  change %s", l)
	}
	t.Logf("Node status PATCHes: %d acknowledged by the daemon's count, %v answered by the API server; Node memory capacity shown: %s",
		patches, requests, strings.Join(shown, " → "))

	if lost != 0 {
		t.Errorf("%d uevents lost during the burst, want 0", lost)
	}
	if uevents < 2*dimmBlocks {
		t.Errorf("the daemon received %d uevents, want at least %d", uevents, 2*dimmBlocks)
	}
	if nchanges == 0 || nchanges > uint64(1+windows) {
		t.Errorf("the DIMM made %d model changes, want 1 to %d (its first event, and the coalescing windows of the rest as sent)", nchanges, 1+windows)
	}
	switch {
	case windows == 1 && patches != 1:
		t.Errorf("the DIMM, sent as one burst, cost %d Node status patches, want 1", patches)
	case patches == 0 || patches > uint64(min(capChanges, windows)):
		t.Errorf("the DIMM cost %d Node status patches, want 1 to %d (at most one per change of capacity, and per coalescing window)",
			patches, min(capChanges, windows))
	}
	if requests != float64(patches) {
		t.Errorf("the API server answered %v Node status PATCH requests, the daemon counts %d", requests, patches)
	}
}

// waitUntil returns at t, spinning for the last stretch: a sleep is too
// coarse for a pace of a few hundred microseconds.
func waitUntil(t time.Time) {
	if d := time.Until(t); d > 2*time.Millisecond {
		time.Sleep(d - time.Millisecond)
	}
	for time.Now().Before(t) {
	}
}

// coalescingWindows returns how many rebuilds a loop that waits for quiet
// after the last event, and at most max after the first, makes of events
// at ts: an upper bound on the model changes they can cause when quiet and
// max are taken a little below the daemon's, for the delivery's jitter.
func coalescingWindows(ts []time.Time, quiet, max time.Duration) int {
	n := 0
	for i := 0; i < len(ts); {
		j := i + 1
		for j < len(ts) && ts[j].Sub(ts[j-1]) < quiet && ts[j].Sub(ts[i]) < max {
			j++
		}
		n++
		i = j
	}
	return n
}

// gaps summarises the time between consecutive events at ts.
func gaps(ts []time.Time) string {
	d := make([]time.Duration, 0, len(ts))
	for i := 1; i < len(ts); i++ {
		d = append(d, ts[i].Sub(ts[i-1]))
	}
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	return fmt.Sprintf("median %s, p99 %s, max %s", d[len(d)/2].Round(time.Microsecond),
		d[len(d)*99/100].Round(time.Microsecond), d[len(d)-1].Round(time.Microsecond))
}

// details lists a change's model changes as the daemon words them.
func details(cs []modelChange) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Detail
	}
	return strings.Join(out, "; ")
}

func resourceListEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		if o, ok := b[name]; !ok || o.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// apiServerStatusPatches returns how many PATCH requests of nodes/status
// the API server has answered (any code), from its own metrics.
func apiServerStatusPatches(t *testing.T, c kubernetes.Interface) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	var sum float64
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `verb="PATCH"`) ||
			!strings.Contains(line, `resource="nodes"`) || !strings.Contains(line, `subresource="status"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("the API server's metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// memoryWatch records the memory capacities a Node shows, in order.
type memoryWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	shown  []string
}

// watchNodeMemory watches node from its current version on and records
// each memory capacity it shows.
func watchNodeMemory(t *testing.T, c kubernetes.Interface, node string) *memoryWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", node).String(),
		ResourceVersion: n.ResourceVersion,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	m := &memoryWatch{cancel: cancel, done: make(chan struct{})}
	q := n.Status.Capacity[corev1.ResourceMemory]
	m.shown = []string{q.String()}
	go func() {
		defer close(m.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				q := n.Status.Capacity[corev1.ResourceMemory]
				m.mu.Lock()
				if m.shown[len(m.shown)-1] != q.String() {
					m.shown = append(m.shown, q.String())
				}
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { m.stop() })
	return m
}

// stop ends the watch and returns the capacities shown.
func (m *memoryWatch) stop() []string {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.shown)
}

// TestRealCPUHotplugToPatch takes cpu1 of this machine offline and back
// and measures the time from the kernel's uevent to the API server's
// acknowledgement of the Node status patch.
func TestRealCPUHotplugToPatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to write " + daemontest.CPU1Online)
	}
	if _, err := os.Stat(daemontest.CPU1Online); err != nil {
		t.Skipf("cpu1 cannot be offlined on this machine: %v", err)
	}
	if err := daemontest.SetCPU1(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := daemontest.SetCPU1(true); err != nil {
			t.Errorf("restore cpu1: %v", err)
		}
	})
	cpus, memory := realCapacity(t)
	cycles := 20
	e := setup(t, nodeHotplug, envOptions{realSysfs: true, uevents: true, kubeletGap: time.Hour,
		bootCPU: cpus, bootMemory: resource.NewQuantity(memory, resource.BinarySI).String()})
	e.waitState(cpus, "Accepted")
	before := len(e.d.Stderr.Records("Node status patched"))
	for range cycles {
		if err := daemontest.SetCPU1(false); err != nil {
			t.Fatal(err)
		}
		e.waitState(cpus-1, "Accepted")
		if err := daemontest.SetCPU1(true); err != nil {
			t.Fatal(err)
		}
		e.waitState(cpus, "Accepted")
	}
	// A loss is patched at once, a gain after --coalesce-gains: the
	// patches of the smaller machine are the losses'. The last patch
	// can show on the Node (which the wait above watches) before the
	// daemon has read the API server's reply and logged it: wait for
	// the log line.
	var lat, losses, gains []time.Duration
	smaller := fmt.Sprintf("cpu=%d,", cpus-1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lat, losses, gains = nil, nil, nil
		for _, r := range e.d.Stderr.Records("Node status patched")[before:] {
			if ns, ok := r["latency"].(float64); ok {
				lat = append(lat, time.Duration(ns))
				if c, _ := r["capacity"].(string); strings.HasPrefix(c, smaller) {
					losses = append(losses, time.Duration(ns))
				} else {
					gains = append(gains, time.Duration(ns))
				}
			}
		}
		if len(lat) >= 2*cycles || time.Now().After(deadline) {
			break
		}
	}
	if len(lat) < 2*cycles {
		t.Fatalf("%d patches carried a hardware-event latency over %d cycles, want at least %d", len(lat), cycles, 2*cycles)
	}
	t.Logf("uevent → acknowledged Node patch over %d cpu1 offline/online cycles: %s", cycles, latencies(lat))
	t.Logf("  cpu1 offline (a loss, patched at once): %s", latencies(losses))
	t.Logf("  cpu1 online (a gain, held for --coalesce-gains): %s", latencies(gains))
}

// latencies summarises ls by nearest rank.
func latencies(ls []time.Duration) string {
	if len(ls) == 0 {
		return "n=0"
	}
	s := slices.Clone(ls)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[max(0, int(math.Ceil(p*float64(len(s))))-1)].Round(time.Microsecond)
	}
	return fmt.Sprintf("n=%d min=%s median=%s p90=%s p99=%s max=%s",
		len(s), s[0].Round(time.Microsecond), q(0.5), q(0.9), q(0.99), s[len(s)-1].Round(time.Microsecond))
}

// realCapacity returns this machine's cpu and memory capacity as the
// kubelet computes them: the online logical CPUs, and MemTotal in bytes.
func realCapacity(t *testing.T) (cpus, memory int64) {
	t.Helper()
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	for r := range strings.SplitSeq(strings.TrimSpace(string(online)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := a, error(nil)
		if found {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			t.Fatalf("/sys/devices/system/cpu/online: %q", online)
		}
		cpus += int64(b - a + 1)
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(meminfo)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("/proc/meminfo: %q", line)
			}
			return cpus, kb << 10
		}
	}
	t.Fatal("/proc/meminfo has no MemTotal")
	return 0, 0
}
