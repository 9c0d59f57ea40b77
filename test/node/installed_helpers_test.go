package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// EnvDeb names a prebuilt node-resized .deb for TestInstalledPackage;
// unset, the test runs `make package` in the repository.
const EnvDeb = "NODE_RESIZED_DEB"

// repoRoot is the repository holding this package (test/node's parent's
// parent).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := packageDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(dir))
}

// buildPackage returns the path of the node-resized deb: $NODE_RESIZED_DEB,
// or the one `make package` builds into dist/ (it prints the paths of the
// packages it wrote). The guest reads it through its view of this
// machine's root, so it must not be under /tmp.
func buildPackage(t *testing.T) string {
	t.Helper()
	return debBuilt.get(t, makePackage)
}

// Builds shared by the tests, which run in parallel (each boots its own
// node and control plane).
var debBuilt, hogBuilt, faultDaemonBuilt builtOnce

// builtOnce is a build the tests share: the first caller builds, the
// others wait for it and reuse the result; a failed build is tried again
// by the next caller.
type builtOnce struct {
	mu   sync.Mutex // guards path, and serialises the build
	path string
}

func (b *builtOnce) get(t *testing.T, build func(*testing.T) string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path == "" {
		b.path = build(t)
	}
	return b.path
}

func makePackage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvDeb); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("%s: %v", EnvDeb, err)
		}
		return abs
	}
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	// The guests are amd64: the other architectures' packages are
	// make package-test's.
	cmd := exec.CommandContext(ctx, "make", "-C", root, "--no-print-directory", "package", "ARCHES=amd64")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make package: %v\n%s", err, tail(string(out), 30))
	}
	var deb string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); strings.HasSuffix(l, "_amd64.deb") && !strings.Contains(l, " ") {
			deb = l
		}
	}
	if deb == "" {
		t.Fatalf("make package named no _amd64.deb:\n%s", tail(string(out), 30))
	}
	if !filepath.IsAbs(deb) {
		deb = filepath.Join(root, deb)
	}
	if _, err := os.Stat(deb); err != nil {
		t.Fatal(err)
	}
	t.Logf("make package: %s after %v", deb, time.Since(t0).Round(time.Millisecond))
	// The guest sees this machine's root, but mounts its own /tmp and /run:
	// a checkout under /tmp would hide dist/ from it. Keep the package
	// where the guest can read it, beside the other binaries it runs.
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(cache, "node-resized", "node", filepath.Base(deb))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	deb = dst
	return deb
}

// buildHog builds test/vmscenario's vmtool (its "hog" fills a cgroup with
// anonymous memory) into this machine's cache, where the guest finds it
// through its root share.
func buildHog(t *testing.T) string {
	t.Helper()
	return hogBuilt.get(t, makeHog)
}

func makeHog(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(cache, "node-resized", "node", "vmtool")
	dir, err := packageDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./vmscenario/testdata/vmtool")
	cmd.Dir = filepath.Dir(dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build vmtool: %v\n%s", err, b)
	}
	return out
}

// str returns a journal field as text.
func (e JournalEntry) str(k string) string {
	if k == "MESSAGE" {
		return e.Message()
	}
	s, _ := e[k].(string)
	return s
}

// Time is the entry's __REALTIME_TIMESTAMP (the guest's clock).
func (e JournalEntry) Time() time.Time {
	us, err := strconv.ParseInt(e.str("__REALTIME_TIMESTAMP"), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// latency parses the entry's LATENCY field (a Go duration).
func (e JournalEntry) latency() (time.Duration, bool) {
	d, err := time.ParseDuration(e.str("LATENCY"))
	return d, err == nil
}

// guestNow is the guest's clock, for comparing with journal timestamps.
func guestNow(t *testing.T, n *Node) time.Time {
	t.Helper()
	ns, err := strconv.ParseInt(guestSh(t, n, "date +%s%N"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, ns)
}

// daemonLog returns node-resized's own journal records (not systemd's
// about the unit) whose message starts with msg, written after since.
func daemonLog(t *testing.T, n *Node, msg string, since time.Time) []JournalEntry {
	t.Helper()
	out, _ := daemonLogCursor(t, n, msg, since)
	return out
}

// daemonLogs reads node-resized's own journal records written after since
// once, and returns daemonLog's filter over them: a test that looks for
// several messages of one window pays for one journalctl (most of a
// second of the emulated guest's CPU) instead of one each.
func daemonLogs(t *testing.T, n *Node, since time.Time) func(msg string) []JournalEntry {
	t.Helper()
	all, _ := daemonLogCursor(t, n, "", since)
	return func(msg string) []JournalEntry {
		var out []JournalEntry
		for _, e := range all {
			if strings.HasPrefix(e.Message(), msg) {
				out = append(out, e)
			}
		}
		return out
	}
}

// daemonLogCursor is daemonLog, with the cursor of the unit's last record
// ("" when there is none) for Node.WaitJournal.
func daemonLogCursor(t *testing.T, n *Node, msg string, since time.Time) ([]JournalEntry, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := n.JournalSince(ctx, "node-resized.service", since)
	if err != nil {
		t.Fatal(err)
	}
	var out []JournalEntry
	for _, e := range all {
		if e.str("SYSLOG_IDENTIFIER") != "node-resized" || e.Time().Before(since) {
			continue
		}
		if strings.HasPrefix(e.Message(), msg) {
			out = append(out, e)
		}
	}
	return out, lastCursor(all)
}

// lastCursor is the __CURSOR of the last of entries, or "".
func lastCursor(entries []JournalEntry) string {
	if len(entries) == 0 {
		return ""
	}
	return entries[len(entries)-1].str("__CURSOR")
}

// waitDaemonLog waits for a record of daemonLog and returns them all.
// Between two reads of the journal the guest waits for its next record
// (Node.WaitJournal) rather than the test polling it.
func waitDaemonLog(t *testing.T, n *Node, msg string, since time.Time, timeout time.Duration) []JournalEntry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		es, cursor := daemonLogCursor(t, n, msg, since)
		if len(es) > 0 {
			return es
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no %q in node-resized's journal within %v; last lines:\n%s", msg, timeout, journalTail(t, n, 25))
		}
		waitJournal(t, n, "node-resized.service", cursor, since, left)
	}
}

// waitJournal is Node.WaitJournal for at most 10 s and left.
func waitJournal(t *testing.T, n *Node, unit, cursor string, since time.Time, left time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.WaitJournal(ctx, unit, cursor, since, min(left, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func journalTail(t *testing.T, n *Node, lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _, _ := n.Exec(ctx, fmt.Sprintf("journalctl -u node-resized -b --no-pager -o short-precise -n %d", lines))
	return strings.TrimRight(out, "\n")
}

// fields renders the non-trusted fields of a record (those the daemon
// set), sorted, for the test log.
func journalFields(e JournalEntry) string {
	var ks []string
	for k := range e {
		if k != "" && k[0] != '_' && k != "MESSAGE" && k != "PRIORITY" && k != "SYSLOG_IDENTIFIER" {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, " %s=%v", k, e[k])
	}
	return strings.TrimSpace(b.String())
}

// memTotal is the guest's MemTotal in bytes.
func memTotal(t *testing.T, n *Node) int64 {
	t.Helper()
	f := strings.Fields(guestSh(t, n, "grep '^MemTotal:' /proc/meminfo"))
	if len(f) < 2 {
		t.Fatalf("MemTotal: %v", f)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return kb * 1024
}

// steadyMemTotal returns MemTotal once it has not changed for 5 s (at most
// 3 minutes): a balloon that a step before inflated can still be taking
// pages from a slow guest after that step saw its target come near, and a
// step that compares the kubelet's view with MemTotal needs the final one.
func steadyMemTotal(t *testing.T, n *Node) int64 {
	t.Helper()
	began := time.Now()
	first := memTotal(t, n)
	last, since := first, time.Now()
	for deadline := time.Now().Add(3 * time.Minute); time.Since(since) < 5*time.Second; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("MemTotal still changing after 3 minutes: %s, then %s", mibs(first), mibs(last))
		}
		if mt := memTotal(t, n); mt != last {
			last, since = mt, time.Now()
		}
	}
	if last != first {
		t.Logf("MemTotal went from %s to %s before it held for 5 s (%v)", mibs(first), mibs(last), time.Since(began).Round(time.Second))
	}
	return last
}

// kubepodsMax returns the kernel's memory.max of kubepods.slice's cgroup,
// and fails the test when systemd's MemoryMax of the slice does not agree
// with it within 5 s.
func kubepodsMax(t *testing.T, n *Node) int64 {
	t.Helper()
	// node-resized writes memory.max first (the clamp is the kernel's, at
	// once) and then tells systemd: a read in between sees them differ.
	// They must agree within seconds.
	var f []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out := guestSh(t, n, "systemctl show kubepods.slice -p MemoryMax --value; cat /sys/fs/cgroup/kubepods.slice/memory.max")
		if f = strings.Fields(out); len(f) != 2 {
			t.Fatalf("kubepods.slice MemoryMax and memory.max: %q", out)
		}
		if f[0] == f[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("systemctl show kubepods.slice -p MemoryMax = %s, but kubepods.slice/memory.max = %s for 5 s", f[0], f[1])
			break
		}
	}
	v, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("kubepods.slice memory.max %q", f[1])
	}
	return v
}

// waitKubepodsMaxUntil waits until kubepods.slice's memory.max is want
// or timeout passes, and returns the last value.
func waitKubepodsMaxUntil(t *testing.T, n *Node, want int64, timeout time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := kubepodsMax(t, n)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitKubepodsMax waits until kubepods.slice's memory.max (and systemd's
// MemoryMax) is want.
func waitKubepodsMax(t *testing.T, n *Node, want int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := kubepodsMax(t, n)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubepods.slice memory.max = %d (%s), want %d (%s) within %v", got, mibs(got), want, mibs(want), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mibs(b int64) string { return fmt.Sprintf("%.1fMi", float64(b)/mib) }

// capacityCondition returns the Node's CapacityConfigured condition.
func capacityCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == "CapacityConfigured" {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNode waits until cond holds for the Node and returns it.
func waitNode(t *testing.T, cs kubernetes.Interface, name, what string, timeout time.Duration, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if cond(n) {
				return n
			}
			last = describeNode(n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node %s: %s not seen within %v; last: %s", name, what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describeNode(n *corev1.Node) string {
	s := fmt.Sprintf("capacity cpu=%s memory=%s allocatable cpu=%s memory=%s ready=%v",
		n.Status.Capacity.Cpu(), n.Status.Capacity.Memory(), n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory(), nodeReady(n))
	if c := capacityCondition(n); c != nil {
		s += fmt.Sprintf(" CapacityConfigured=%s/%s (%s)", c.Status, c.Reason, c.Message)
	}
	return s
}

// nodeHistory records every version of the Node the API server serves
// (a watch): the capacity, the CapacityConfigured reason and which field
// manager's status entry is newest, so a test can tell the kubelet's own
// status writes from node-resized's.
type nodeHistory struct {
	mu      sync.Mutex
	entries []nodeVersion
	stop    context.CancelFunc
}

type nodeVersion struct {
	at        time.Time // this machine's clock, when the watch delivered it
	cpu, mem  int64     // capacity (millicores, bytes)
	storage   int64     // ephemeral-storage capacity (bytes)
	reason    string    // CapacityConfigured reason
	manager   string    // the field manager whose status entry is newest
	rv        string
	heartbeat bool // only the kubelet's Ready heartbeat changed
	ready     bool // the Ready condition is True
	// kubeletWrite is the kubelet's status entry's time in managedFields
	// (the API server's clock, whole seconds); daemonWrite node-resized's.
	kubeletWrite, daemonWrite time.Time
}

func (v nodeVersion) String() string {
	return fmt.Sprintf("%s cpu=%dm memory=%s CapacityConfigured=%s by %s", v.at.Format("15:04:05.000"), v.cpu, mibs(v.mem), v.reason, v.manager)
}

// capacityVersion is a Node's capacity as a nodeVersion, for a want.
func capacityVersion(n *corev1.Node) nodeVersion {
	return nodeVersion{cpu: n.Status.Capacity.Cpu().MilliValue(), mem: n.Status.Capacity.Memory().Value(),
		storage: n.Status.Capacity.StorageEphemeral().Value()}
}

// watchNode starts recording; Stop ends it.
func watchNode(t *testing.T, cs kubernetes.Interface, name string) *nodeHistory {
	ctx, cancel := context.WithCancel(context.Background())
	h := &nodeHistory{stop: cancel}
	go func() {
		rv := ""
		for ctx.Err() == nil {
			w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
				FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
				ResourceVersion: rv,
			})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
						rv = ""
					}
					break
				}
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					continue
				}
				rv = n.ResourceVersion
				h.add(n)
			}
			w.Stop()
		}
	}()
	t.Cleanup(cancel)
	return h
}

func (h *nodeHistory) add(n *corev1.Node) {
	v := capacityVersion(n)
	v.at, v.rv = time.Now(), n.ResourceVersion
	if c := capacityCondition(n); c != nil {
		v.reason = string(c.Reason)
	}
	v.ready = nodeReady(n)
	var newest time.Time
	for _, m := range n.ManagedFields {
		if m.Subresource != "status" || m.Time == nil {
			continue
		}
		if m.Manager == "kubelet" && m.Time.Time.After(v.kubeletWrite) {
			v.kubeletWrite = m.Time.Time
		}
		if m.Manager == "node-resized" && m.Time.Time.After(v.daemonWrite) {
			v.daemonWrite = m.Time.Time
		}
		if !m.Time.Time.Before(newest) {
			newest, v.manager = m.Time.Time, m.Manager
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if k := len(h.entries); k > 0 {
		p := h.entries[k-1]
		v.heartbeat = p.cpu == v.cpu && p.mem == v.mem && p.reason == v.reason
		// The times are whole seconds: a kubelet write in the second of
		// node-resized's last patch ties with it, and the newest entry
		// may name either. The manager whose time moved since the
		// version before wrote this one.
		switch {
		case v.kubeletWrite.After(p.kubeletWrite):
			v.manager = "kubelet"
		case v.daemonWrite.After(p.daemonWrite):
			v.manager = "node-resized"
		}
	}
	h.entries = append(h.entries, v)
}

// since returns the versions recorded at or after t0 whose capacity or
// condition differ from the one before.
func (h *nodeHistory) since(t0 time.Time) []nodeVersion {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []nodeVersion
	for _, v := range h.entries {
		if !v.at.Before(t0) && !v.heartbeat {
			out = append(out, v)
		}
	}
	return out
}

// all returns every version recorded.
func (h *nodeHistory) all() []nodeVersion {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]nodeVersion(nil), h.entries...)
}

// podCgroup is the pod's cgroup with the systemd driver.
func podCgroup(p *corev1.Pod) string {
	qos := strings.ToLower(string(p.Status.QOSClass))
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	if qos == "guaranteed" {
		return "/sys/fs/cgroup/kubepods.slice/kubepods-pod" + uid + ".slice"
	}
	return fmt.Sprintf("/sys/fs/cgroup/kubepods.slice/kubepods-%s.slice/kubepods-%s-pod%s.slice", qos, qos, uid)
}

// deletePod deletes a pod at once and waits for it to be gone.
func deletePod(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
	}
	t.Fatalf("pod %s still exists a minute after its deletion", name)
}

// scanLines splits command output into trimmed, non-empty lines.
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// hotAddDIMM plugs an installedDIMM on NUMA node numa and waits, at most
// 2 minutes, until MemTotal is want (the daemon's --auto-online brings the
// blocks online); it returns the DIMM's id.
func hotAddDIMM(ctx context.Context, t *testing.T, n *Node, numa int, want int64) (string, error) {
	t.Helper()
	id, err := n.HotAddDIMM(ctx, installedDIMM, numa)
	if err != nil {
		return "", err
	}
	for deadline := time.Now().Add(2 * time.Minute); memTotal(t, n) != want; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return id, fmt.Errorf("MemTotal %d, want %d after the DIMM", memTotal(t, n), want)
		}
	}
	return id, nil
}
