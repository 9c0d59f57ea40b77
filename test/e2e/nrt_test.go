package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/node-resized/node-resized/test/cluster"
	"github.com/node-resized/node-resized/topology/topologytest"
)

var (
	nrtGVR = schema.GroupVersionResource{Group: "topology.node.k8s.io", Version: "v1alpha2", Resource: "noderesourcetopologies"}
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// TestNodeResourceTopologyFollowsTheMachine runs the daemon with
// --publish-topology on a synthetic machine of two NUMA nodes, under the
// node's own identity, as the kubelet's kubeconfig gives it. The Node
// authorizer grants a node nothing on NodeResourceTopology objects: the
// daemon's writes are refused and retried, detection goes on, and once an
// RBAC role allows the writes the object appears with an owner reference
// to the Node and one zone per NUMA node. Then CPU 1 goes offline and
// comes back in the tree, each change followed by the kernel's own uevent
// for cpu1 (the daemon listens to the real kernel and reads the tree): the
// object must show each change within 1 s of it.
func TestNodeResourceTopologyFollowsTheMachine(t *testing.T) {
	needRoot(t)
	admin := dynamic.NewForConfigOrDie(cl.AdminConfig())
	installCRD(t, admin, "testdata/noderesourcetopology-crd.yaml")
	nrts := admin.Resource(nrtGVR)
	// Start clean: a previous run may have left the object.
	_ = nrts.Delete(context.Background(), nodeNRT, metav1.DeleteOptions{})

	m := topologytest.Machine{
		CPUs: append(topologytest.SMTCPUs(0, 4, 0, 0), topologytest.SMTCPUs(4, 4, 1, 2)...),
		Nodes: []topologytest.Node{
			{ID: 0, CPUs: topologytest.Ints(0, 3), MemKB: 2 << 20, Distances: []int{10, 21}},
			{ID: 1, CPUs: topologytest.Ints(4, 7), MemKB: 2 << 20, Distances: []int{21, 10},
				Pools: []topologytest.Pool{{KB: 2048, Nr: 64}}},
		},
		BlockSize: blockSize,
		Blocks: append(topologytest.Blocks(0, 16, topologytest.BlockOnline, "Normal", 0),
			topologytest.Blocks(16, 16, topologytest.BlockOnline, "Normal", 1)...),
		MemKB: 4 << 20,
		Pools: []topologytest.Pool{{KB: 2048, Nr: 64}},
	}
	kcfg := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	if err := os.WriteFile(kcfg, []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
reservedSystemCPUs: "0"
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kubelet's pod-resources List, for the pod fingerprint.
	kubeletRoot := t.TempDir()
	pods := servePodResources(t, filepath.Join(kubeletRoot, "pod-resources", "kubelet.sock"),
		podRef{"kube-system", "coredns-7db6d8ff4d-x2k9q"}, podRef{"default", "web-0"}, podRef{"default", "web-1"})
	e := setup(t, nodeNRT, envOptions{cpus: 8, mach: &m, uevents: true, kubeletGap: time.Hour,
		args: []string{"--publish-topology", "--kubelet-config", kcfg, "--kubelet-restart=never", "--kubelet-root-dir", kubeletRoot}})

	// Under the node identity alone the write is forbidden; the daemon
	// says so and keeps going.
	refused := waitDaemonRecord(t, e, "publish NodeResourceTopology; will retry", func(r map[string]any) bool {
		return strings.Contains(fmt.Sprint(r["err"]), "forbidden")
	})
	t.Logf("under system:node:%s alone: %v", nodeNRT, refused["err"])
	if _, err := nrts.Get(context.Background(), nodeNRT, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the object exists before any role allows it: %v", err)
	}
	e.waitState(8, "Accepted") // detection and the status relay do not wait for it

	grantNRT(t, e, cluster.NodeUserPrefix+nodeNRT)
	obj := waitNRT(t, nrts, "the first object", func(*unstructured.Unstructured) bool { return true })
	node, err := e.admin.CoreV1().Nodes().Get(context.Background(), nodeNRT, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := obj.GetOwnerReferences()
	if len(owners) != 1 || owners[0].APIVersion != "v1" || owners[0].Kind != "Node" || owners[0].Name != nodeNRT || owners[0].UID != node.UID {
		t.Errorf("owner references %+v, want the Node %s (uid %s)", owners, nodeNRT, node.UID)
	}
	applied := false
	for _, mf := range obj.GetManagedFields() {
		applied = applied || (mf.Manager == "node-resized" && mf.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !applied {
		t.Errorf("no server-side apply by node-resized in managedFields %+v", obj.GetManagedFields())
	}
	want := []string{
		"node-0 Node [node-0=10 node-1=21] cpu=4/3/3 memory=2Gi/2Gi/2Gi",
		"node-1 Node [node-0=21 node-1=10] cpu=4/4/4 hugepages-2Mi=128Mi/128Mi/128Mi memory=2Gi/1920Mi/1920Mi",
	}
	if got := nrtZones(t, obj); !slices.Equal(got, want) {
		t.Errorf("zones:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The pod fingerprint as the podfingerprint library signs these
	// three pods, where the scheduler plugin reads it.
	const threePods = "pfp0v001ef2fc57a9e1fcd5e"
	if got := nrtAttributes(obj); got != "topologyManagerPolicy=single-numa-node topologyManagerScope=pod "+
		"nodeTopologyPodsFingerprint="+threePods+" nodeTopologyPodsFingerprintMethod=all" {
		t.Errorf("attributes %q", got)
	}
	if got := obj.GetAnnotations()["topology.node.k8s.io/fingerprint"]; got != threePods {
		t.Errorf("annotation topology.node.k8s.io/fingerprint %q, want %s", got, threePods)
	}
	if got, _, _ := unstructured.NestedStringSlice(obj.Object, "topologyPolicies"); !slices.Equal(got, []string{"SingleNUMANodePodLevel"}) {
		t.Errorf("topologyPolicies %v, want [SingleNUMANodePodLevel]", got)
	}

	// cpu1 (node 0) goes offline and comes back, five times: each change
	// in the tree, then the kernel's uevent for it; the watch sees the
	// object follow.
	w := watchNRT(t, nrts, obj.GetResourceVersion())
	before := len(e.d.Stderr.Records("NodeResourceTopology applied"))
	var lat []time.Duration
	for i := range 10 {
		online := i%2 == 1
		node0 := "node-0 Node [node-0=10 node-1=21] cpu=3/2/2 memory=2Gi/2Gi/2Gi"
		action := "offline"
		if online {
			node0, action = want[0], "online"
		}
		changed := time.Now()
		e.tree.SetCPUOnline(1, online)
		kernelUevent(t, "/devices/system/cpu/cpu1", action)
		seen := w.wait(t, fmt.Sprintf("node-0 with cpu1 %s", action), func(o *unstructured.Unstructured) bool {
			z := nrtZones(t, o)
			return len(z) == 2 && z[0] == node0 && z[1] == want[1]
		})
		lat = append(lat, seen.Sub(changed))
	}
	// The daemon logs an apply once the API server has answered it, which
	// may be after the watch delivered the new version.
	var applied2 []time.Duration
	for deadline := time.Now().Add(5 * time.Second); len(applied2) < 10 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		applied2 = applied2[:0]
		for _, r := range e.d.Stderr.Records("NodeResourceTopology applied")[before:] {
			if ns, ok := r["latency"].(float64); ok {
				applied2 = append(applied2, time.Duration(ns))
			}
		}
	}
	t.Logf("tree change → object seen changed by a watch, 10 cpu1 changes: %s", nrtLatencies(lat))
	t.Logf("uevent → apply acknowledged, the daemon's own measure: %s", nrtLatencies(applied2))
	for i, l := range lat {
		if l > time.Second {
			t.Errorf("change %d: the object followed after %s, want within 1s", i+1, l)
		}
	}
	if len(applied2) != 10 {
		t.Errorf("%d applies carried a hardware-event latency, want 10 (one per change)", len(applied2))
	}

	// A pod goes: the object follows with the fingerprint of the two
	// left, the machine unchanged.
	const twoPods = "pfp0v0014980f8ef54928fa1"
	pods.set(podRef{"default", "web-0"}, podRef{"default", "web-1"})
	obj = waitNRT(t, nrts, "the fingerprint of the pods left", func(o *unstructured.Unstructured) bool {
		return strings.Contains(nrtAttributes(o), "nodeTopologyPodsFingerprint="+twoPods) &&
			o.GetAnnotations()["topology.node.k8s.io/fingerprint"] == twoPods
	})
	if got := nrtZones(t, obj); !slices.Equal(got, want) {
		t.Errorf("zones after the pod went:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// --uninstall deletes the object.
	if err := e.d.Stop(t); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemonBin, append(slices.Clone(e.args), "--socket", e.d.Socket, "--log-level", "warn", "--uninstall")...)
	out, err := cmd.CombinedOutput()
	t.Logf("node-resized --uninstall: %v\n%s", err, out)
	if !strings.Contains(string(out), "topology: deleted NodeResourceTopology "+nodeNRT) {
		t.Errorf("--uninstall said %q, want it to delete the NodeResourceTopology", out)
	}
	if _, err := nrts.Get(context.Background(), nodeNRT, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object after --uninstall: %v, want not found", err)
	}
}

// podRef is a pod as the pod-resources API names it.
type podRef struct{ namespace, name string }

// podLister is the kubelet's pod-resources List, over pods the test sets.
type podLister struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	pods []podRef
}

func (l *podLister) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range l.pods {
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{Namespace: p.namespace, Name: p.name})
	}
	return resp, nil
}

func (l *podLister) set(pods ...podRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods = pods
}

// servePodResources serves a pod-resources List of pods at sock, as the
// kubelet does, until the test ends.
func servePodResources(t *testing.T, sock string, pods ...podRef) *podLister {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := &podLister{pods: pods}
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, l)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return l
}

// installCRD creates the CustomResourceDefinition in path (once per
// control plane) and waits until it is Established.
func installCRD(t *testing.T, c dynamic.Interface, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	crd := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&crd.Object); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the CRD %s: %v", crd.GetName(), err)
	}
	for ctx.Err() == nil {
		got, err := c.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				cm, _ := cond.(map[string]any)
				if cm["type"] == "Established" && cm["status"] == "True" {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the CRD %s is not Established within 30s", crd.GetName())
}

// grantNRT gives user what packaging/rbac.yaml gives node-resized on
// NodeResourceTopology objects, for the rest of the test: create and
// patch (an apply that creates the object is authorized as both; without
// create it is refused), and delete for --uninstall.
func grantNRT(t *testing.T, e *env, user string) {
	t.Helper()
	ctx := context.Background()
	rbac := e.admin.RbacV1()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-nrt-writer"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"topology.node.k8s.io"},
			Resources: []string{"noderesourcetopologies"},
			Verbs:     []string{"create", "patch", "delete"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-nrt-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	_ = rbac.ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	_ = rbac.ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
}

// waitDaemonRecord waits (30s at most) for a daemon log record msg that ok
// accepts.
func waitDaemonRecord(t *testing.T, e *env, msg string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, r := range e.d.Stderr.Records(msg) {
			if ok(r) {
				return r
			}
		}
	}
	t.Fatalf("no %q record in the daemon's log within 30s", msg)
	return nil
}

// waitNRT polls the Node's object until cond holds (30s at most).
func waitNRT(t *testing.T, nrts dynamic.NamespaceableResourceInterface, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		o, err := nrts.Get(context.Background(), nodeNRT, metav1.GetOptions{})
		if lastErr = err; err == nil && cond(o) {
			return o
		}
	}
	t.Fatalf("NodeResourceTopology %s: %s not reached within 30s (last error %v)", nodeNRT, what, lastErr)
	return nil
}

// nrtWatch is a watch of the Node's object that stamps each version with
// its arrival.
type nrtWatch struct {
	seen chan nrtVersion
}

type nrtVersion struct {
	at  time.Time
	obj *unstructured.Unstructured
}

func watchNRT(t *testing.T, nrts dynamic.NamespaceableResourceInterface, from string) *nrtWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wi, err := nrts.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", nodeNRT).String(),
		ResourceVersion: from,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &nrtWatch{seen: make(chan nrtVersion, 1000)}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			if o, ok := ev.Object.(*unstructured.Unstructured); ok {
				w.seen <- nrtVersion{at: time.Now(), obj: o}
			}
		}
		close(w.seen)
	}()
	return w
}

// wait returns when the watch delivers a version that cond accepts (30s
// at most).
func (w *nrtWatch) wait(t *testing.T, what string, cond func(*unstructured.Unstructured) bool) time.Time {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var last []string
	for {
		select {
		case s, ok := <-w.seen:
			if !ok {
				t.Fatal(errors.New("the watch of the NodeResourceTopology ended"))
			}
			if cond(s.obj) {
				return s.at
			}
			last = nrtZones(t, s.obj)
		case <-timeout:
			t.Fatalf("NodeResourceTopology %s: %s not seen within 30s; last zones %v", nodeNRT, what, last)
		}
	}
}

// nrtZones renders the object's zones as "node-0 Node [costs] name=capacity/allocatable/available ...".
func nrtZones(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	zones, _, err := unstructured.NestedSlice(o.Object, "zones")
	if err != nil {
		t.Fatalf("zones: %v", err)
	}
	var out []string
	for _, z := range zones {
		zm, _ := z.(map[string]any)
		var b strings.Builder
		fmt.Fprintf(&b, "%v %v [", zm["name"], zm["type"])
		costs, _ := zm["costs"].([]any)
		for i, c := range costs {
			cm, _ := c.(map[string]any)
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%v=%v", cm["name"], cm["value"])
		}
		b.WriteByte(']')
		res, _ := zm["resources"].([]any)
		for _, r := range res {
			rm, _ := r.(map[string]any)
			fmt.Fprintf(&b, " %v=%v/%v/%v", rm["name"], rm["capacity"], rm["allocatable"], rm["available"])
		}
		out = append(out, b.String())
	}
	return out
}

func nrtAttributes(o *unstructured.Unstructured) string {
	attrs, _, _ := unstructured.NestedSlice(o.Object, "attributes")
	var out []string
	for _, a := range attrs {
		am, _ := a.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v", am["name"], am["value"]))
	}
	return strings.Join(out, " ")
}

// nrtLatencies is "n=10 min=… median=… max=…".
func nrtLatencies(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("n=%d min=%s median=%s max=%s", len(s), s[0].Round(time.Microsecond),
		s[len(s)/2].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}
