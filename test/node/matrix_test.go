//go:build matrix

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// EnvKubelets names the environment variable that picks a subset of the
// older kubelets TestKubeletVersions boots: versions separated by commas
// or spaces, e.g. "v1.34.4,v1.36.3+PodLevelResourceManagers" (a version,
// and + with the gate for v1.36's second run). Unset, it boots each.
const EnvKubelets = "NODE_RESIZED_NODE_KUBELETS"

// matrixKubeletConfig is the static CPU manager of TestKubeletRestartStaticCPU
// with the Static memory manager beside it. The memory manager wants
// reservedMemory to add up to the reservations of Node Allocatable:
// systemReserved 256Mi + kubeReserved 128Mi + evictionHard
// memory.available 100Mi = 484Mi, all on NUMA node 0, which holds the
// boot memory (node 1 has none until a DIMM is added there).
const matrixKubeletConfig = staticCPUKubeletConfig + `memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits:
    memory: 484Mi
`

// olderKubelets returns the versions of the kubelet modules in
// test/node/kubelets (the k8s.io/kubernetes each requires), sorted: the
// kubelets test/node/build-matrix builds as BinDir/kubelet-<version>.
func olderKubelets(t *testing.T) []string {
	t.Helper()
	dir, err := packageDir()
	if err != nil {
		t.Fatal(err)
	}
	mods, err := filepath.Glob(filepath.Join(dir, "kubelets", "*", "go.mod"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("no kubelet modules in %s: %v", filepath.Join(dir, "kubelets"), err)
	}
	re := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v1\.\d+\.\d+)\s*$`)
	var vs []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		v := re.FindSubmatch(b)
		if v == nil {
			t.Fatalf("%s requires no k8s.io/kubernetes", m)
		}
		vs = append(vs, string(v[1]))
	}
	sort.Strings(vs)
	return vs
}

// pickKubelets is all, or the subset $NODE_RESIZED_NODE_KUBELETS names
// (each of which must be one of all).
func pickKubelets(t *testing.T, all []string) []string {
	t.Helper()
	env := strings.FieldsFunc(os.Getenv(EnvKubelets), func(r rune) bool { return r == ',' || r == ' ' })
	if len(env) == 0 {
		return all
	}
	for _, v := range env {
		found := false
		for _, a := range all {
			found = found || a == v
		}
		if !found {
			t.Fatalf("%s names %s; the kubelets are %v", EnvKubelets, v, all)
		}
	}
	return env
}

// memState is the memory manager's checkpoint as far as this test reads
// it: the machine state per NUMA node, and each container's assignment
// kept as the kubelet wrote it (V1 to V3 share these fields).
type memState struct {
	PolicyName   string `json:"policyName"`
	MachineState map[string]struct {
		MemoryMap map[string]struct {
			Total uint64 `json:"total"`
			Free  uint64 `json:"free"`
		} `json:"memoryMap"`
	} `json:"machineState"`
	Entries map[string]map[string]json.RawMessage `json:"entries"`
}

func readMemState(t *testing.T, n *Node) (memState, string) {
	t.Helper()
	raw := guestSh(t, n, "cat "+memManagerState)
	var st memState
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("%s: %v: %s", memManagerState, err, raw)
	}
	return st, raw
}

// canonical is JSON with its object keys sorted, so that two writers'
// field orders compare equal; invalid JSON is returned as it is.
func canonical(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// nodeMemory is NUMA node id's memory total in the memory manager's
// machine state.
func (m memState) nodeMemory(id string) uint64 { return m.MachineState[id].MemoryMap["memory"].Total }

// TestKubeletVersions boots the node with each older kubelet (v1.34 to
// v1.36, built by test/node/build-matrix) and with the default one
// (v1.37, every other test's, which boot it without the Static memory
// manager), and runs the restart scenarios on it, one boot per version,
// in order:
//
//   - ready: the Node becomes Ready and reports that kubeletVersion, which
//     node-resized reads and shows with no version warning.
//   - A Guaranteed pod under the static CPU manager and the Static memory
//     manager: CPU 1 exclusively, 64Mi from NUMA node 0.
//   - cpu: a CPU hot-add (node 1) with --kubelet-restart=auto: node-resized
//     patches the Node, restarts the kubelet once (one job, its pre-start
//     rewrites the checkpoints), which is Ready with cpu=3 and starts on
//     the rewritten checkpoints (no refusal), the pod's CPU and memory
//     assignments kept.
//   - memory: a 1 GiB DIMM on node 0 the same way: Ready with the new
//     memory, node 0's total in the memory manager's machine state grown
//     by the DIMM, the assignments kept.
//   - prestart: --kubelet-restart=never and a CPU hot-add: the daemon
//     patches the Node and says a restart is needed, but restarts nothing;
//     a plain `systemctl restart kubelet` passes through the pre-start,
//     which rewrites the checkpoints, and the kubelet is Ready with cpu=4,
//     the assignments kept.
//
// It asserts order and counts, never wall-clock bounds, and logs the
// times. It is behind the matrix build tag (make e2e-node-matrix), so
// that make e2e-node needs none of the older kubelets.
//
// v1.36 runs twice: as it ships, and with its PodLevelResourceManagers
// gate on, which makes it write and read other checkpoint layouts (the
// CPU manager's v3 and the memory manager's v2, where it otherwise keeps
// v2 and v1). Each run first checks that the kubelet's own checkpoints
// are in the layouts its version and gates write, so that the rewrites
// (always the newest layouts with the legacy fields older kubelets load,
// docs/relay.md) are proven against the layout each kubelet reads.
func TestKubeletVersions(t *testing.T) {
	t.Parallel() // its runs take guest slots beside the other tests
	var runs []string
	for _, v := range olderKubelets(t) {
		runs = append(runs, v)
		if strings.HasPrefix(v, "v1.36.") {
			runs = append(runs, v+"+"+podLevelGate)
		}
	}
	// The default kubelet too, which the other tests boot with the static
	// CPU manager only: its Static memory manager's checkpoint rewritten.
	runs = append(runs, defaultKubeletVersion)
	for _, r := range pickKubelets(t, runs) {
		version, gate, _ := strings.Cut(r, "+")
		// Each run has its own guest and control plane: they run -parallel
		// at a time (make e2e-node-matrix: NODE_PARALLEL).
		t.Run(r, func(t *testing.T) {
			parallelGuest(t)
			kubeletVersion(t, version, gate == podLevelGate)
		})
	}
}

// podLevelGate is the kubelet feature gate (alpha in v1.36) that keeps
// pod-level CPU and memory assignments in the checkpoints.
const podLevelGate = "PodLevelResourceManagers"

// kubeletLayouts are the checkpoint layouts a kubelet of version writes
// itself (with the PodLevelResourceManagers gate on when podLevel): its
// CPU manager's and its memory manager's.
func kubeletLayouts(version string, podLevel bool) (cpu, mem string) {
	switch {
	case strings.HasPrefix(version, "v1.36.") && podLevel:
		return checkpoint.CPUManagerV3, checkpoint.MemoryManagerV2
	case strings.HasPrefix(version, "v1.34.") || strings.HasPrefix(version, "v1.35.") || strings.HasPrefix(version, "v1.36."):
		return checkpoint.CPUManagerV2, checkpoint.MemoryManagerV1
	}
	return checkpoint.CPUManagerV4, checkpoint.MemoryManagerV3
}

// checkLayouts says which layouts the guest's checkpoints are in, as the
// kubelet's own loader picks them, and fails unless they are cpu and mem.
func checkLayouts(t *testing.T, n *Node, when, cpu, mem string) {
	t.Helper()
	c, err := checkpoint.ParseCPUManager([]byte(guestSh(t, n, "cat "+cpuManagerState)))
	if err != nil {
		t.Errorf("%s: %s: %v", when, cpuManagerState, err)
	}
	m, err := checkpoint.ParseMemoryManager([]byte(guestSh(t, n, "cat "+memManagerState)))
	if err != nil {
		t.Errorf("%s: %s: %v", when, memManagerState, err)
	}
	t.Logf("%s: the CPU manager's checkpoint is %s, the memory manager's %s", when, c.Format, m.Format)
	if c.Format != cpu || m.Format != mem {
		t.Errorf("%s: checkpoint layouts CPU %s, memory %s; want %s and %s", when, c.Format, m.Format, cpu, mem)
	}
}

func kubeletVersion(t *testing.T, version string, podLevel bool) {
	t0 := time.Now()
	kubelet := "" // the default kubelet
	if version != defaultKubeletVersion {
		kubelet = filepath.Join(nodeBinDir, "kubelet-"+version)
		if err := checkExecutable(kubelet); err != nil {
			t.Fatal(err)
		}
	}
	config := matrixKubeletConfig
	if podLevel {
		config += "featureGates:\n  " + podLevelGate + ": true\n"
	}
	s := relayNodeConfig(t, Config{KubeletConfig: config, Kubelet: kubelet}, "--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
		t.Logf("timing: %s: %v from the start of the version's test to its end", version, time.Since(t0).Round(time.Second))
	}()

	if !t.Run("ready", func(t *testing.T) {
		nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := nd.Status.NodeInfo.KubeletVersion; got != version {
			t.Errorf("the Node's kubeletVersion %q, want %q", got, version)
		}
		if !nodeReady(nd) {
			t.Errorf("the Node is not Ready: %s", describeNode(nd))
		}
		if got := guestSh(t, n, "kubelet --version"); got != "Kubernetes "+version {
			t.Errorf("the guest's kubelet --version: %q", got)
		}
		k := daemonStatus(t, n).Kubelet
		if k.Version != version || k.VersionNote != "" {
			t.Errorf("node-resized's view of the kubelet: version %q (note %q), want %q and no note", k.Version, k.VersionNote, version)
		}
		t.Logf("Node %s: kubeletVersion %s; %s", n.Name(), nd.Status.NodeInfo.KubeletVersion, describeNode(nd))
	}) {
		return
	}

	pods := cs.CoreV1().Pods("default")
	pod := guaranteedPod("m-guaranteed", n.Name())
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	pod = waitPodRunning(t, ctx, cs, pod)
	uid := string(pod.UID)
	var cpu0 cpuState
	var mem0 memState
	var rawCPU, rawMem string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		cpu0, rawCPU = readCPUState(t, n, cpuManagerState)
		mem0, rawMem = readMemState(t, n)
		if (cpu0.Entries[uid]["c"] != "" && mem0.Entries[uid]["c"] != nil) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("pod %s (%s) Running; %s: %s; %s: %s", pod.Name, pod.Status.QOSClass, cpuManagerState, rawCPU, memManagerState, rawMem)
	held, memHeld := cpu0.Entries[uid]["c"], mem0.Entries[uid]["c"]
	if cpu0.PolicyName != "static" || held != "1" || cpu0.DefaultCPUSet != "0" {
		t.Fatalf("cpu_manager_state: policy %q, the pod's container holds %q, default set %q; want static, 1, 0", cpu0.PolicyName, held, cpu0.DefaultCPUSet)
	}
	if mem0.PolicyName != "Static" || memHeld == nil {
		t.Fatalf("memory_manager_state: policy %q, the pod's container's assignment %s; want Static and one", mem0.PolicyName, memHeld)
	}
	ownCPU, ownMem := kubeletLayouts(version, podLevel)
	checkLayouts(t, n, "as the kubelet wrote them", ownCPU, ownMem)
	kept := func(t *testing.T, when string) (cpuState, memState) {
		t.Helper()
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("%s: pod %s is not the Running pod it was: %v", when, pod.Name, err)
		}
		c, rc := readCPUState(t, n, cpuManagerState)
		m, rm := readMemState(t, n)
		t.Logf("%s: %s: %s; %s: %s", when, cpuManagerState, rc, memManagerState, rm)
		if got := c.Entries[uid]["c"]; got != held {
			t.Errorf("%s: the pod's container holds CPUs %q in cpu_manager_state, want %q", when, got, held)
		}
		if got := m.Entries[uid]["c"]; canonical(got) != canonical(memHeld) {
			t.Errorf("%s: the pod's container's memory assignment %s, want %s", when, got, memHeld)
		}
		return c, m
	}
	if !t.Run("cpu", func(t *testing.T) {
		r := s.relayUpscale(t, version+" CPU hot-add", func(ctx context.Context) error {
			_, err := n.HotAddCPU(ctx, 1)
			return err
		}, func(v nodeVersion) bool { return v.cpu == 3000 }, "cpu=3,", 10*time.Second)
		onePrestartRun(t, n, "the daemon's restart", r.mark, "rewritten")
		if one := daemonLog(t, n, "restarting the kubelet in one job", r.mark); len(one) != 1 {
			t.Errorf("%d records of a restart in one job, want 1", len(one))
		}
		noRefusal(t, n, "after the CPU hot-add", r.mark)
		c, _ := kept(t, "after the CPU hot-add")
		if c.DefaultCPUSet != "0,2" {
			t.Errorf("defaultCpuSet %q on CPUs 0-2 with 1 held, want 0,2", c.DefaultCPUSet)
		}
	}) {
		return
	}

	if !t.Run("memory", func(t *testing.T) {
		memBefore := memTotal(t, n)
		want := memBefore + installedDIMM
		m0, _ := readMemState(t, n)
		r := s.relayUpscale(t, version+" DIMM hot-add", func(ctx context.Context) error {
			_, err := hotAddDIMM(ctx, t, n, 0, want)
			return err
		}, func(v nodeVersion) bool { return v.mem == want }, fmt.Sprintf("memory=%dKi,", want>>10), 10*time.Second)
		onePrestartRun(t, n, "the daemon's restart", r.mark, "rewritten")
		noRefusal(t, n, "after the DIMM hot-add", r.mark)
		_, m := kept(t, "after the DIMM hot-add")
		if got, was := m.nodeMemory("0"), m0.nodeMemory("0"); got != was+installedDIMM {
			t.Errorf("NUMA node 0's memory in the memory manager's machine state %s, want %s (was %s, plus the DIMM)", mibs(int64(got)), mibs(int64(was+installedDIMM)), mibs(int64(was)))
		}
	}) {
		return
	}

	t.Run("prestart", func(t *testing.T) {
		setDaemonArgs(t, n, "--auto-online --kubelet-restart=never "+relayPolicy)
		guestSh(t, n, "systemctl restart node-resized")
		waitNode(t, cs, n.Name(), "CapacityConfigured Accepted", time.Minute, func(nd *corev1.Node) bool {
			c := capacityCondition(nd)
			return c != nil && c.Reason == "Accepted" && nodeReady(nd)
		})
		done0 := daemonMetric(t, n, restartsDone)
		pid0 := kubeletPID(t, n)
		mark := guestNow(t, n)
		if _, err := n.HotAddCPU(ctx, 1); err != nil {
			t.Fatal(err)
		}
		waitNode(t, cs, n.Name(), "cpu 4", time.Minute, func(nd *corev1.Node) bool { return nd.Status.Capacity.Cpu().Value() == 4 })
		for _, e := range waitDaemonLog(t, n, "Node status patched", mark, 30*time.Second) {
			if strings.Contains(e.str("CAPACITY"), "cpu=4,") {
				l, _ := e.latency()
				s.timing("%s prestart: CPU hot-add (restarts off): uevent->patch %v", version, l)
				break
			}
		}
		for deadline := time.Now().Add(30 * time.Second); daemonMetric(t, n, "node_resized_kubelet_restart_needed") != 1; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("node_resized_kubelet_restart_needed not 1 with --kubelet-restart=never and a stale kubelet")
			}
		}
		if b := daemonLog(t, n, "restarting the kubelet", mark); len(b) > 0 {
			t.Errorf("the daemon restarted the kubelet with --kubelet-restart=never: %q", b[0].Message())
		}
		if pid := kubeletPID(t, n); pid != pid0 {
			t.Errorf("kubelet MainPID %s -> %s with --kubelet-restart=never, before the restart by hand", pid0, pid)
		}
		r0 := guestNow(t, n)
		guestSh(t, n, "systemctl restart kubelet")
		since := newKubeletSince(t, n)
		nd := waitNode(t, cs, n.Name(), "Ready by the kubelet restarted by hand on 4 CPUs", 2*time.Minute, func(nd *corev1.Node) bool {
			return readyAfter(nd, since) && nd.Status.Capacity.Cpu().Value() == 4
		})
		s.timing("%s prestart: systemctl restart kubelet -> Ready with cpu=4 after %v", version, guestNow(t, n).Sub(r0).Round(time.Millisecond))
		t.Logf("kubelet %s -> %s: %s", pid0, kubeletPID(t, n), describeNode(nd))
		onePrestartRun(t, n, "systemctl restart kubelet", r0, "rewritten")
		noRefusal(t, n, "after systemctl restart kubelet", r0)
		if st := guestSh(t, n, "systemctl show kubelet -p ActiveState --value"); st != "active" {
			t.Errorf("kubelet.service %s", st)
		}
		c, _ := kept(t, "after systemctl restart kubelet")
		if c.DefaultCPUSet != "0,2-3" {
			t.Errorf("defaultCpuSet %q on CPUs 0-3 with 1 held, want 0,2-3", c.DefaultCPUSet)
		}
		if got := daemonMetric(t, n, restartsDone); got != done0 {
			t.Errorf("%s %v -> %v with --kubelet-restart=never", restartsDone, done0, got)
		}
	})
}
