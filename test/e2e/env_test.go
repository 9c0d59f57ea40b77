package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-resized/node-resized/test/cluster"
	"github.com/node-resized/node-resized/test/internal/daemontest"
	"github.com/node-resized/node-resized/topology/topologytest"
)

const conditionType = "CapacityConfigured"

// env is one Node: a synthetic (or real) machine, a stand-in kubelet that
// registered it, and the real daemon speaking for it.
type env struct {
	t       *testing.T
	node    string
	tree    *topologytest.Tree // nil on the real machine
	kubelet *cluster.StandInKubelet
	d       *daemontest.Daemon
	admin   kubernetes.Interface
	reasons *reasonLog
	args    []string // the daemon's flags, but for daemontest.Start's
}

type envOptions struct {
	cpus       int           // online CPUs of the synthetic machine (of 8 present)
	realSysfs  bool          // the real /sys and /proc instead of a tree
	uevents    bool          // listen to the kernel's uevents
	kubeletGap time.Duration // the stand-in kubelet's status update period (0: 10s)
	bootCPU    int64         // the stand-in kubelet's boot-time cpu capacity
	bootMemory string
	// shipped runs the daemon with its shipped detection settings: no
	// faster MemTotal watch than its default.
	shipped bool
	// nameFromKubeconfig leaves --node-name out: the daemon finds the
	// Node's name in the node identity of its kubeconfig.
	nameFromKubeconfig bool
	args               []string // more daemon flags
	// mach is the synthetic machine (nil: machine(cpus)).
	mach *topologytest.Machine
	bin  string // the daemon binary (default daemonBin)
}

const blockSize = 128 << 20

// machine is a one-node synthetic machine with 8 present CPUs, of which the
// first cpus are online, and 4 GiB in 32 memory blocks.
func machine(cpus int) topologytest.Machine {
	var offline []int
	for i := cpus; i < 8; i++ {
		offline = append(offline, i)
	}
	return topologytest.Machine{
		CPUs:      topologytest.SMTCPUs(0, 8, 0, 0, offline...),
		Nodes:     []topologytest.Node{{ID: 0, CPUs: topologytest.Ints(0, 7), MemKB: 4 << 20}},
		BlockSize: blockSize,
		Blocks:    topologytest.Blocks(0, 32, topologytest.BlockOnline, "Normal", 0),
		MemKB:     4 << 20,
	}
}

func setup(t *testing.T, node string, o envOptions) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &env{t: t, node: node, admin: kubernetes.NewForConfigOrDie(cl.AdminConfig())}
	// Start from a clean Node: a previous run may have left one.
	_ = e.admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})

	args := []string{"--state-file", filepath.Join(t.TempDir(), "state.json"), "--kubelet-root-dir", ""}
	if !o.nameFromKubeconfig {
		args = append(args, "--node-name", node)
	}
	if !o.shipped {
		args = append(args, "--memtotal-interval", "100ms")
	}
	if !o.realSysfs {
		m := machine(o.cpus)
		if o.mach != nil {
			m = *o.mach
		}
		e.tree = m.WriteTree(t, topologytest.Dir(t))
		args = append(args, "--sysfs-root", e.tree.Sys, "--procfs-root", e.tree.Proc)
	}
	if !o.uevents {
		args = append(args, "--uevents=false")
	}
	cfg := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cl.NodeKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubelet-config", cfg, "--kubeconfig", kubeconfig)
	args = append(args, o.args...)

	bootCPU, bootMem := o.bootCPU, o.bootMemory
	if bootCPU == 0 {
		bootCPU = int64(o.cpus)
	}
	if bootMem == "" {
		bootMem = "4Gi"
	}
	gap := o.kubeletGap
	if gap == 0 {
		gap = cluster.DefaultNodeStatusUpdateFrequency
	}
	// The stand-in lives until the test ends, not just through setup.
	kctx, kcancel := context.WithCancel(context.Background())
	t.Cleanup(kcancel)
	e.kubelet, err = cluster.StartStandInKubelet(kctx, cluster.KubeletOptions{
		NodeName:   node,
		Kubeconfig: kubeconfig,
		Machine: cluster.MachineView{Capacity: corev1.ResourceList{
			corev1.ResourceCPU:              *resource.NewQuantity(bootCPU, resource.DecimalSI),
			corev1.ResourceMemory:           resource.MustParse(bootMem),
			corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		}},
		NodeStatusUpdateFrequency: gap,
		Logf:                      t.Logf,
	})
	if err != nil {
		t.Fatalf("start the stand-in kubelet: %v", err)
	}
	t.Cleanup(e.kubelet.Stop)
	e.reasons = watchReasons(t, e.admin, node)
	bin := o.bin
	if bin == "" {
		bin = daemonBin
	}
	e.args = args
	e.d = daemontest.Start(t, bin, args...)
	return e
}

// setCPUs brings the synthetic machine to n online CPUs and makes the
// daemon look (a forced resync stands in for the uevent).
func (e *env) setCPUs(n int) {
	e.t.Helper()
	for i := 1; i < 8; i++ {
		e.tree.SetCPUOnline(i, i < n)
	}
	e.resync()
}

func (e *env) resync() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct{ Changed bool }
	if err := e.daemonAPI(ctx, http.MethodPost, "/v1/resync", &res); err != nil {
		e.t.Fatalf("resync: %v", err)
	}
}

// configure sets the configured-capacity annotation ("" removes it).
func (e *env) configure(value string) {
	e.t.Helper()
	v := any(value)
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"node-resized.io/configured-capacity": v}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.admin.CoreV1().Nodes().Patch(ctx, e.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("set the configured capacity: %v", err)
	}
}

// waitNode polls the Node until cond holds (30s at most) and returns it.
func (e *env) waitNode(what string, cond func(*corev1.Node) bool) *corev1.Node {
	e.t.Helper()
	var last *corev1.Node
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n, err := e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
		if err != nil {
			continue
		}
		last = n
		if cond(n) {
			return n
		}
	}
	e.t.Fatalf("Node %s: %s not reached within 30s; last status: capacity %v, condition %+v", e.node, what, capacity(last), condition(last))
	return nil
}

// waitState waits until the Node shows cpu capacity and the condition reason.
func (e *env) waitState(cpu int64, reason string) *corev1.Node {
	e.t.Helper()
	return e.waitNode(fmt.Sprintf("cpu %d with %s", cpu, reason), func(n *corev1.Node) bool {
		c := condition(n)
		q := n.Status.Capacity[corev1.ResourceCPU]
		return c != nil && c.Reason == reason && q.Value() == cpu
	})
}

// waitConfigured waits until the daemon has applied the configured
// capacity spec: the condition's reason and the CPU count, and a message
// that names spec. With the hardware already at cpu, waitState alone
// would pass before the daemon has read the spec at all.
func (e *env) waitConfigured(cpu int64, reason, spec string) *corev1.Node {
	e.t.Helper()
	return e.waitNode(fmt.Sprintf("cpu %d with %s for configured capacity %s", cpu, reason, spec), func(n *corev1.Node) bool {
		c := condition(n)
		q := n.Status.Capacity[corev1.ResourceCPU]
		return c != nil && c.Reason == reason && q.Value() == cpu && strings.HasPrefix(c.Message, "configured capacity "+spec+": ")
	})
}

func capacity(n *corev1.Node) corev1.ResourceList {
	if n == nil {
		return nil
	}
	return n.Status.Capacity
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

// events returns the reasons of the events recorded on the Node.
func (e *env) events() []string {
	e.t.Helper()
	list, err := e.admin.EventsV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("regarding.name", e.node).String(),
	})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.ReportingController == "node-resized" || ev.ReportingController == "" {
			out = append(out, ev.Type+"/"+ev.Reason)
		}
	}
	return out
}

// waitEvent waits for an event of type/reason on the Node.
func (e *env) waitEvent(want string) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, got := range e.events() {
			if got == want {
				return
			}
		}
	}
	e.t.Errorf("no %s event on Node %s; events: %v", want, e.node, e.events())
}

// reasonLog records every CapacityConfigured reason the Node shows, in
// order, from a watch.
type reasonLog struct {
	mu  sync.Mutex
	seq []string
}

func watchReasons(t *testing.T, c kubernetes.Interface, node string) *reasonLog {
	l := &reasonLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					continue
				}
				if c := condition(n); c != nil {
					l.add(c.Reason)
				}
			}
			w.Stop()
		}
	}()
	return l
}

func (l *reasonLog) add(r string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seq) == 0 || l.seq[len(l.seq)-1] != r {
		l.seq = append(l.seq, r)
	}
}

// inOrder reports whether want appears in the recorded sequence in order,
// waiting a little for the watch to catch up with what a GET already saw.
func (l *reasonLog) inOrder(want ...string) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l.mu.Lock()
		ok := inOrder(l.seq, want...)
		l.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return ok
		}
	}
}

func (l *reasonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.seq, " → ")
}
