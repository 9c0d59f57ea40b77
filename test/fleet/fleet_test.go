package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/node-resized/node-resized/test/cluster"
	"github.com/node-resized/node-resized/test/internal/daemontest"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// Environment of the bench (make fleet-bench sets them; the defaults are
// the small instance that make e2e runs so that the bench cannot rot).
const (
	// EnvSizes is the fleet sizes to run, ascending, comma-separated
	// (default "10").
	EnvSizes = "NODE_RESIZED_FLEET_SIZES"
	// EnvOutage is how long the API server is kept away (default 20s;
	// the bench: 60s).
	EnvOutage = "NODE_RESIZED_FLEET_OUTAGE"
	// EnvIdle is how long the idle fleet is watched (default 30s; the
	// bench: 2m).
	EnvIdle = "NODE_RESIZED_FLEET_IDLE"
	// EnvOut, when set, is a file the results table is appended to.
	EnvOut = "NODE_RESIZED_FLEET_OUT"
)

const (
	configuredAnnotation = "node-resized.io/configured-capacity"
	conditionType        = "CapacityConfigured"
	// maxWritesPerChange is the most writes (status patches and events)
	// node-resized may make per node for one change that evicts no pod:
	// the sweep's and the loss's.
	maxWritesPerChange = 2
)

var (
	daemonBin string
	binDir    string
	workDir   string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "node-resized-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	workDir = dir
	if err := daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	daemonBin = filepath.Join(dir, "node-resized")
	if binDir, err = cluster.DefaultBinDir(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := cluster.Build(ctx, binDir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot build the control plane: %v\n", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	}
	return code
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

func sizes(t *testing.T) []int {
	t.Helper()
	v := os.Getenv(EnvSizes)
	if v == "" {
		return []int{10}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want sizes such as 100,250,500", EnvSizes, v)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestFleet runs a fleet of real node-resized processes against one
// control plane, each with its own synthetic machine (4 of 8 CPUs online,
// 4 GiB), its own Node registered by a stand-in kubelet (the kubelet's
// 100Mi eviction reservation, its Lease renewed every 10 s, no pod loop,
// and no status sync after registration: a kubelet that has adopted what
// node-resized publishes, as its restart makes a real one) and the
// node identity of its kubeconfig, so that the Node authorizer and the
// NodeRestriction admission plugin judge its requests as a kubelet's. It
// counts node-resized's requests from the API server's audit log (its
// user agent) and measures, per fleet size:
//
//   - idle: requests per agent per hour with nothing changing (0 writes);
//   - sweep: every Node's configured capacity changed at once, write to
//     Accepted p50/p99, requests per node (at most maxWritesPerChange
//     writes: no pod has to go);
//   - loss: a hardware loss on every machine at once (a resync stands in
//     for the uevent), to EmergencyReduced, writes per node (at most
//     maxWritesPerChange);
//   - outage: the API server away while the machines change back, then
//     a configured change right after it is back: the request rate in
//     the first 10 s against the steady one, and the time to Accepted;
//   - rollout: every agent restarted at once: what it lists and watches,
//     and no write when nothing changed.
//
// Every Node must be right at the end of each step. It logs a results
// line (and appends it to $NODE_RESIZED_FLEET_OUT).
func TestFleet(t *testing.T) {
	ns := sizes(t)
	most := ns[len(ns)-1]
	names := make([]string, most)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%04d", i)
	}
	dir := filepath.Join(workDir, "cluster")
	auditPath := filepath.Join(dir, "audit.log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(workDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := cluster.Start(ctx, cluster.Options{
		BinDir: binDir, SkipBuild: true, Dir: dir, KeepDir: true, Nodes: names,
		APIServerArgs: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditPath,
			"--audit-log-mode=batch", "--audit-log-maxsize=0"},
	})
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	defer cl.Stop()
	audit := &auditLog{path: auditPath}
	var results []string
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			r := runFleet(t, cl, audit, names[:n])
			results = append(results, r)
		})
	}
	for _, r := range results {
		t.Log(r)
	}
	if out := os.Getenv(EnvOut); out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, r := range results {
			fmt.Fprintln(f, r)
		}
	}
}

// agent is one node of the fleet.
type agent struct {
	name    string
	tree    *topologytest.Tree
	args    []string
	d       *daemontest.Daemon
	kubelet *cluster.StandInKubelet
}

func machine() topologytest.Machine {
	return topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 8, 0, 0, 4, 5, 6, 7),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 7), MemKB: 4 << 20}},
		BlockSize: 128 << 20,
		Blocks:    topologytest.Blocks(0, 32, topologytest.BlockOnline, "Normal", 0),
		MemKB:     4 << 20,
	}
}

func (a *agent) setCPUs(n int) {
	for i := 1; i < 8; i++ {
		a.tree.SetCPUOnline(i, i < n)
	}
}

// fleetState is every Node as the admin's watch last saw it.
type fleetState struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node
	seen  map[string]time.Time // when the node first met the awaited condition
	cond  func(*corev1.Node) bool
	wake  chan struct{}
}

func watchFleet(t *testing.T, cs kubernetes.Interface, names []string) *fleetState {
	s := &fleetState{nodes: map[string]*corev1.Node{}, wake: make(chan struct{}, 1)}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		rv := ""
		for ctx.Err() == nil {
			if rv == "" {
				l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				for i := range l.Items {
					s.observe(&l.Items[i], keep)
				}
				rv = l.ResourceVersion
			}
			w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				rv = ""
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					rv = ""
					break
				}
				if n, ok := ev.Object.(*corev1.Node); ok {
					rv = n.ResourceVersion
					if ev.Type != watch.Bookmark {
						s.observe(n, keep)
					}
				}
			}
			w.Stop()
		}
	}()
	return s
}

func (s *fleetState) observe(n *corev1.Node, keep map[string]bool) {
	if !keep[n.Name] {
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.nodes[n.Name] = n
	if s.cond != nil && s.seen[n.Name].IsZero() && s.cond(n) {
		s.seen[n.Name] = now
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// await sets cond and returns when every named Node has met it, with the
// time each first met it; it fails after timeout with the stragglers.
func (s *fleetState) await(t *testing.T, what string, names []string, timeout time.Duration, cond func(*corev1.Node) bool) map[string]time.Time {
	t.Helper()
	s.mu.Lock()
	s.cond, s.seen = cond, map[string]time.Time{}
	now := time.Now()
	for _, n := range names {
		if nd := s.nodes[n]; nd != nil && cond(nd) {
			s.seen[n] = now
		}
	}
	s.mu.Unlock()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		var missing []string
		for _, n := range names {
			if s.seen[n].IsZero() {
				missing = append(missing, n)
			}
		}
		seen := s.seen
		s.mu.Unlock()
		if len(missing) == 0 {
			return seen
		}
		select {
		case <-s.wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			s.mu.Lock()
			last := s.nodes[missing[0]]
			s.mu.Unlock()
			t.Fatalf("%s: %d of %d Nodes not there within %v; %s: %s", what, len(missing), len(names), timeout, missing[0], describe(last))
		}
	}
}

func condition(n *corev1.Node) *corev1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == conditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func describe(n *corev1.Node) string {
	if n == nil {
		return "not seen"
	}
	c := condition(n)
	if c == nil {
		return fmt.Sprintf("cpu %s, no %s condition", n.Status.Capacity.Cpu(), conditionType)
	}
	return fmt.Sprintf("cpu %s, %s %s: %s", n.Status.Capacity.Cpu(), c.Reason, c.Status, c.Message)
}

// state is a Node condition the bench waits for: cpu and the reason, and,
// when spec is set, a message that names it.
func state(cpu int64, reason, spec string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := condition(n)
		return c != nil && c.Reason == reason && n.Status.Capacity.Cpu().Value() == cpu &&
			(spec == "" || strings.HasPrefix(c.Message, "configured capacity "+spec+": "))
	}
}

// latencies are the times from start to each Node's arrival.
func latencies(start time.Time, seen map[string]time.Time) []time.Duration {
	var out []time.Duration
	for _, at := range seen {
		out = append(out, max(0, at.Sub(start)))
	}
	slices.Sort(out)
	return out
}

// stamps records when something happened to each Node: its write
// acknowledged, its machine changed.
type stamps struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *stamps) set(name string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[name] = now
}

// latencies returns, for each Node seen, the time from its own stamp to
// when it was seen.
func (s *stamps) latencies(seen map[string]time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for name, at := range seen {
		out = append(out, max(0, at.Sub(s.at[name])))
	}
	slices.Sort(out)
	return out
}

// answered is acceptedAt for a step, and fails the test when the audit
// log lacks the status patch of a Node the bench saw change.
func answered(t *testing.T, step string, es []auditEntry, seen map[string]time.Time) map[string]time.Time {
	t.Helper()
	at := acceptedAt(es, seen)
	if len(at) != len(seen) {
		t.Errorf("%s: the audit log shows the status patch of %d of the %d Nodes seen changed", step, len(at), len(seen))
	}
	return at
}

// all returns a copy of the stamps.
func (s *stamps) all() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.at)
}

// last returns the latest stamp.
func (s *stamps) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l time.Time
	for _, at := range s.at {
		if at.After(l) {
			l = at
		}
	}
	return l
}

func quantile(ls []time.Duration, p float64) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(ls)))) - 1
	return ls[max(0, i)].Round(time.Millisecond)
}

func configure(ctx context.Context, cs kubernetes.Interface, name, spec string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{configuredAnnotation: spec}}})
	_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// each runs fn for every agent at once and fails on the first error.
func each(t *testing.T, agents []*agent, fn func(a *agent) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(agents))
	for _, a := range agents {
		wg.Go(func() {
			if err := fn(a); err != nil {
				errs <- fmt.Errorf("%s: %w", a.name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// agentsCPU is the CPU time of every agent's process, in seconds.
func agentsCPU(agents []*agent) float64 {
	var sum float64
	for _, a := range agents {
		sum += cpuSeconds(a.d.Pid())
	}
	return sum
}

// machineCPU is the CPU time this machine has spent busy since it
// booted, over every CPU, in seconds (/proc/stat).
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 {
			continue // idle, iowait
		}
		if i >= 8 {
			break // guest time is counted in user already
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / 100 // USER_HZ
}

func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func pss(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func runFleet(t *testing.T, cl *cluster.Cluster, audit *auditLog, names []string) string {
	n := len(names)
	cfg := cl.AdminConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	// The bench's own writes and its watch of every Node speak protobuf,
	// as the cluster's controllers do: on a machine the API server shares
	// with the whole fleet, the observer costs it as little as it can.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	st := watchFleet(t, admin, names)

	// The Nodes, registered by stand-in kubelets that agree with the
	// agents on allocatable (the kubelet's 100Mi eviction threshold).
	agents := make([]*agent, n)
	kubeletCfg := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	if err := os.WriteFile(kubeletCfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	t.Cleanup(kcancel)
	for i, name := range names {
		_ = admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		kubeconfig, err := cl.NodeKubeconfig(name)
		if err != nil {
			t.Fatal(err)
		}
		a := &agent{name: name, tree: machine().WriteTree(t, topologytest.Dir(t))}
		a.args = []string{"--kubeconfig", kubeconfig, "--kubelet-config", kubeletCfg, "--kubelet-root-dir", "",
			"--sysfs-root", a.tree.Sys, "--procfs-root", a.tree.Proc, "--uevents=false", "--log-level", "info",
			"--state-file", filepath.Join(t.TempDir(), "state.json")}
		agents[i] = a
	}
	t0 := time.Now()
	each(t, agents, func(a *agent) error {
		kubeconfig, _ := cl.NodeKubeconfig(a.name)
		k, err := cluster.StartStandInKubelet(kctx, cluster.KubeletOptions{
			NodeName: a.name, Kubeconfig: kubeconfig, PodSyncPeriod: -1,
			// A kubelet that has adopted what node-resized publishes (in
			// production node-resized restarts it to get there): no
			// status sync that would revert it, only the Lease.
			NodeStatusUpdateFrequency: time.Hour, NodeStatusReportFrequency: time.Hour,
			Machine: cluster.MachineView{
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU:              resource.MustParse("4"),
					corev1.ResourceMemory:           resource.MustParse("4Gi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
				},
				Reserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
			},
			Logf: func(string, ...any) {},
		})
		a.kubelet = k
		return err
	})
	for _, a := range agents {
		t.Cleanup(a.kubelet.Stop)
	}
	t.Logf("%d stand-in kubelets registered in %v", n, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	for _, a := range agents {
		a.d = daemontest.Start(t, daemonBin, a.args...)
	}
	st.await(t, "the agents' first status", names, 5*time.Minute, state(4, "Accepted", ""))
	t.Logf("%d agents started and Accepted in %v", n, time.Since(t0).Round(time.Millisecond))
	var rss, pssSum uint64
	var rssMin, rssMax uint64 = math.MaxUint64, 0
	for _, a := range agents {
		r, _ := a.d.RSS()
		rss += r
		rssMin, rssMax = min(rssMin, r), max(rssMax, r)
		pssSum += pss(a.d.Pid())
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	memory := fmt.Sprintf("RSS %s–%s MiB (mean %s), PSS mean %s MiB", mib(rssMin), mib(rssMax), mib(rss/uint64(n)), mib(pssSum/uint64(n)))
	t.Logf("memory per agent: %s", memory)

	// Idle: a settle, then the window.
	idle := envDuration(t, EnvIdle, 30*time.Second)
	time.Sleep(5 * time.Second)
	i0 := time.Now()
	time.Sleep(idle)
	i1 := time.Now()
	idleAll := audit.between(i0, i1)
	idleAgents := count(idleAll, auditEntry.agent)
	perHour := float64(idleAgents.total()) / float64(n) / i1.Sub(i0).Hours()
	_, steady := rates(idleAll, i0, i1, 10*time.Second)
	t.Logf("idle %v: node-resized %s (%.1f requests per agent per hour, %d writes); every client %.1f req/s",
		idle, idleAgents.per(n), perHour, idleAgents.writes(), steady)
	if w := idleAgents.writes(); w != 0 {
		t.Errorf("idle: %d writes by node-resized, want 0", w)
	}

	// Sweep: every Node's configured capacity at once.
	spec := `{"cpu":"3"}`
	cpu0, agents0, machine0 := cpuSeconds(cl.APIServerPID()), agentsCPU(agents), machineCPU()
	s0 := time.Now()
	var written stamps
	each(t, agents, func(a *agent) error {
		if err := configure(ctx, admin, a.name, spec); err != nil {
			return err
		}
		written.set(a.name)
		return nil
	})
	seen := st.await(t, "the sweep Accepted", names, 5*time.Minute, state(3, "Accepted", spec))
	s1 := time.Now()
	time.Sleep(3 * time.Second) // the events and any late write
	sweepCPU := cpuSeconds(cl.APIServerPID()) - cpu0
	sweepAgentsCPU, sweepMachineCPU := agentsCPU(agents)-agents0, machineCPU()-machine0
	sweepReq := count(audit.between(s0, time.Now()), auditEntry.agent)
	patchesOf(t, "sweep", agents[0], s0)
	sweepAudit := audit.between(s0, time.Now())
	sl, sweepSeen, sweepStart := written.latencies(answered(t, "sweep", sweepAudit, seen)), written.latencies(seen), latencies(s0, seen)
	t.Logf("sweep: write acknowledged->Accepted (the API server's answer to the status patch) p50 %v p99 %v max %v; ->seen by the bench's watch p50 %v p99 %v; sweep start->seen p50 %v p99 %v (the admin's writes acknowledged within %v, all seen in %v); node-resized per node: %s (%.2f writes); apiserver CPU %.1f s",
		quantile(sl, .5), quantile(sl, .99), quantile(sl, 1), quantile(sweepSeen, .5), quantile(sweepSeen, .99), quantile(sweepStart, .5), quantile(sweepStart, .99),
		written.last().Sub(s0).Round(time.Millisecond), s1.Sub(s0).Round(time.Millisecond), sweepReq.per(n), float64(sweepReq.writes())/float64(n), sweepCPU)
	t.Logf("sweep: CPU from its start to 3 s after the last Accepted (%v): the machine %.2f s, the API server %.2f s, every node-resized together %.2f s, the rest (etcd, the stand-in kubelets, this test) %.2f s",
		time.Since(s0).Round(time.Millisecond), sweepMachineCPU, sweepCPU, sweepAgentsCPU, sweepMachineCPU-sweepCPU-sweepAgentsCPU)
	t.Logf("sweep: where the time went, from the audit log: %s", stages(sweepAudit, adminWrites(sweepAudit), "write answered", seen))
	after, pairs, eventsEarly := eventOrder(sweepAudit)
	t.Logf("sweep: %d of %d events received after the answer to their Node's status patch", after, pairs)
	if len(eventsEarly) > 0 {
		t.Errorf("sweep: the event reached the API server before the status patch on %d Nodes (%s, ...), want it after", len(eventsEarly), eventsEarly[0])
	}
	if w := float64(sweepReq.writes()) / float64(n); w > maxWritesPerChange {
		t.Errorf("sweep: %.2f writes per node, want at most %d", w, maxWritesPerChange)
	}

	// A hardware loss on every machine at once: 4 CPUs to 2, below the
	// spec of 3 (Path B). A resync stands in for the uevent.
	l0 := time.Now()
	var changed stamps
	each(t, agents, func(a *agent) error {
		changed.set(a.name)
		a.setCPUs(2)
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := a.d.Client.Resync(c)
		return err
	})
	seen = st.await(t, "the loss EmergencyReduced", names, 5*time.Minute, state(2, "EmergencyReduced", ""))
	time.Sleep(3 * time.Second)
	lossAudit := audit.between(l0, time.Now())
	lossReq := count(lossAudit, auditEntry.agent)
	patchesOf(t, "loss", agents[0], l0)
	ll, lossSeen, lossStart := changed.latencies(answered(t, "loss", lossAudit, seen)), changed.latencies(seen), latencies(l0, seen)
	t.Logf("loss: change->EmergencyReduced (the API server's answer) p50 %v p99 %v max %v; ->seen p50 %v p99 %v; loss start->seen p50 %v p99 %v; node-resized per node: %s (%.2f writes)",
		quantile(ll, .5), quantile(ll, .99), quantile(ll, 1), quantile(lossSeen, .5), quantile(lossSeen, .99), quantile(lossStart, .5), quantile(lossStart, .99), lossReq.per(n), float64(lossReq.writes())/float64(n))
	t.Logf("loss: where the time went, from the audit log: %s", stages(lossAudit, changed.all(), "change", seen))
	if w := float64(lossReq.writes()) / float64(n); w > maxWritesPerChange {
		t.Errorf("loss: %.2f writes per node, want at most %d", w, maxWritesPerChange)
	}

	// An outage: the machines come back to 4 CPUs while the API server
	// is away; right after it is back, the spec goes to 4.
	outage := envDuration(t, EnvOutage, 20*time.Second)
	if err := cl.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = cl.StartAPIServer(context.Background())
		}
	})
	each(t, agents, func(a *agent) error {
		a.setCPUs(4)
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := a.d.Client.Resync(c)
		return err
	})
	time.Sleep(outage)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	starting := time.Now()
	if err := cl.StartAPIServer(sctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	spec = `{"cpu":"4"}`
	each(t, agents, func(a *agent) error { return configure(ctx, admin, a.name, spec) })
	seen = st.await(t, "the change after the outage Accepted", names, 5*time.Minute, state(4, "Accepted", spec))
	time.Sleep(max(0, 10*time.Second-time.Since(back)))
	ol, olSeen := latencies(back, answered(t, "outage", audit.between(back, time.Now()), seen)), latencies(back, seen)
	first10 := audit.between(back, back.Add(10*time.Second))
	peak, mean10 := rates(first10, back, back.Add(10*time.Second), time.Second)
	agentPeak, agentRate := rates(byAgents(first10), back, back.Add(10*time.Second), time.Second)
	t.Logf("outage %v: the change made as the API server was back Accepted (the API server's answer) p50 %v p99 %v max %v, seen p50 %v p99 %v; first 10 s: every client %.1f req/s (peak 1 s %.0f), node-resized %.1f req/s (peak 1 s %.0f); steady %.1f req/s (%.1f×)",
		outage, quantile(ol, .5), quantile(ol, .99), quantile(ol, 1), quantile(olSeen, .5), quantile(olSeen, .99), mean10, peak, agentRate, agentPeak, steady, mean10/math.Max(steady, 0.001))
	t.Logf("outage: first 10 s, node-resized per node: %s; per second: %v", count(first10, auditEntry.agent).per(n), perSecond(byAgents(first10), back, 10))
	// The reconnects come while the API server starts, before it is
	// ready: node-resized's requests per 500 ms from its start.
	early := byAgents(audit.between(starting, back))
	t.Logf("outage: the API server ready %v after its start; node-resized before that, per node: %s; per 500 ms: %v",
		back.Sub(starting).Round(time.Millisecond), countCodes(early).per(n), perSpan(early, starting, 500*time.Millisecond, int(back.Sub(starting)/(500*time.Millisecond))+1))

	// A rollout: every agent restarted at once, nothing changed.
	time.Sleep(5 * time.Second)
	r0 := time.Now()
	each(t, agents, func(a *agent) error { return a.d.Terminate(30 * time.Second) })
	for _, a := range agents {
		a.d = daemontest.Start(t, daemonBin, a.args...)
	}
	time.Sleep(10 * time.Second)
	st.await(t, "the Nodes after the rollout", names, time.Minute, state(4, "Accepted", spec))
	rollReq := count(audit.between(r0, time.Now()), auditEntry.agent)
	rv0 := 0
	for _, e := range audit.between(r0, time.Now()) {
		if e.agent() && (e.Verb == "list" || e.Verb == "watch") && strings.Contains(e.URI, "resourceVersion=0") {
			rv0++
		}
	}
	t.Logf("rollout: node-resized per node: %s (%.2f writes; %d of the lists and watches from the watch cache, resourceVersion=0)",
		rollReq.per(n), float64(rollReq.writes())/float64(n), rv0)
	if w := rollReq.writes(); w != 0 {
		t.Errorf("rollout: %d writes by node-resized with nothing changed, want 0", w)
	}

	return fmt.Sprintf("| %d | %s | %v / %v | %s | %s | %v / %v | %.1f (steady %.1f req/s, every client) | %.1f |",
		n, memory, quantile(sl, .5), quantile(sl, .99), sweepReq.per(n), lossReq.per(n), quantile(ol, .5), quantile(ol, .99),
		mean10, steady, perHour)
}

// patchesOf logs the status patches and events a's daemon logged since
// from: what one node's writes for the step were.
func patchesOf(t *testing.T, step string, a *agent, from time.Time) {
	t.Helper()
	for _, msg := range []string{"Node status patched", "event recorded"} {
		for _, r := range a.d.Stderr.Records(msg) {
			at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
			if at.Before(from) {
				continue
			}
			t.Logf("%s: %s: %s %v %v %v", step, a.name, msg, r["capacity"], r["condition"], r["reason"])
		}
	}
}
