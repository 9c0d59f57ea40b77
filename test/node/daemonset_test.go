package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/node-resized/node-resized/test/cluster"
)

// DaemonSetImage is the image the DaemonSet's manifests name, without its
// tag: the one make image builds. TestDaemonSetOnRealNode builds it from
// the checkout with make image and sets its tag with kustomize's images
// transformer, as an operator does.
const DaemonSetImage = "ghcr.io/node-resized/node-resized"

// The Linux capability bits the DaemonSet's container is checked for
// (include/uapi/linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// TestDaemonSetOnRealNode first runs a real pod on the node as booted
// (real-runtime-pod, see realRuntimePod), then the shipped DaemonSet (packaging/kubernetes,
// applied as `kubectl apply -k` would, with the tag of the image make
// image built from the checkout set by kustomize) on
// the node VM with the real container runtime and no node-resized package
// on the host, against a control plane with the DaemonSet controller: the
// pod runs in its own network namespace with NET_ADMIN its only
// capability, and from inside it node-resized
//
//   - receives a CPU hot-add's uevents (its own network namespace is
//     enough), patches its Node and restarts the kubelet over the host's
//     D-Bus, with the shipped defaults;
//   - clamps kubepods through the host's cgroupfs mounted into it when the
//     CPU goes offline again;
//   - is refused the restart by systemd when it runs as another uid than
//     0 (what systemd checks; no capability is involved);
//
// and its own token may change its own Node but not another one (the
// ValidatingAdmissionPolicy).
func TestDaemonSetOnRealNode(t *testing.T) {
	parallelGuest(t)
	const name = "node-ds"
	needKernel(t)
	needRuntime(t)
	img, tag := buildDaemonSetImage(t)
	c := startClusterOpts(t, cluster.Options{Controllers: []string{"daemonset", "root-ca-cert-publisher"}}, name)
	n := bootNode(t, c, Config{Name: name, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir,
		Files: []File{{Path: GuestImagesDir + "/node-resized.tar", Source: img, Link: true}}})
	t.Logf("boot: guest agent after %v, Node Ready after %v",
		n.AgentReadyTime().Round(time.Millisecond), n.ReadyTime().Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if s := guestSh(t, n, "test -e /usr/bin/node-resized && echo installed || echo absent"); s != "absent" {
		t.Fatalf("node-resized is installed on the host (%s): the DaemonSet must be the only one", s)
	}
	// The real runtime first, on the node as booted: the one boot serves
	// both (realRuntimePod).
	if !t.Run("real-runtime-pod", func(t *testing.T) { realRuntimePod(t, n, c) }) {
		t.FailNow()
	}

	// The shipped manifests, the image's tag set.
	applyKustomization(t, ctx, c.AdminConfig(), daemonSetOverlay(t, tag, ""))
	pod := waitDaemonSetPod(t, ctx, admin, name, "")
	id := containerID(t, n, pod)
	pid := guestSh(t, n, "crictl inspect --output go-template --template '{{.info.pid}}' "+id)
	t.Logf("pod %s Ready on %s, IP %s, container %s (pid %s in the guest)", pod.Name, pod.Spec.NodeName, pod.Status.PodIP, id[:13], pid)
	if pod.Spec.HostNetwork || pod.Spec.HostPID {
		t.Errorf("the pod shares the host's network or PID namespace: hostNetwork %v, hostPID %v", pod.Spec.HostNetwork, pod.Spec.HostPID)
	}
	if own, host := guestSh(t, n, "readlink /proc/"+pid+"/ns/net"), guestSh(t, n, "readlink /proc/1/ns/net"); own == host {
		t.Errorf("the container's network namespace %s is the host's", own)
	} else {
		t.Logf("network namespace: the container's %s, the host's %s", own, host)
	}
	checkCaps(t, n, pid, map[int]bool{capSysAdmin: false, capNetAdmin: true})
	metrics := func() string {
		return guestSh(t, n, "curl -sS --max-time 5 http://"+net.JoinHostPort(pod.Status.PodIP, "9477")+"/metrics")
	}
	podLog := func(id string) string {
		out, _, _ := n.Exec(ctx, "crictl logs "+id+" 2>&1")
		return out
	}
	defer func() {
		if t.Failed() {
			t.Logf("node-resized's log in the pod:\n%s", podLog(id))
		}
	}()

	// Its first status, written with the pod's identity.
	nd := waitNode(t, admin, name, "node-resized's CapacityConfigured condition", 2*time.Minute, func(nd *corev1.Node) bool {
		return capacityCondition(nd) != nil
	})
	cond := capacityCondition(nd)
	t.Logf("the pod's first status: CapacityConfigured %s %s: %s", cond.Status, cond.Reason, cond.Message)

	// A CPU hot-add, onlined as a udev rule would (the DaemonSet does not
	// auto-online: that needs the host's /sys writable).
	cpus0 := nd.Status.Capacity.Cpu().Value()
	pid0 := kubeletPID(t, n)
	t0 := time.Now()
	dev, err := n.HotAddCPU(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cpu := waitOfflineCPU(t, n)
	guestSh(t, n, "echo 1 > /sys/devices/system/cpu/cpu"+cpu+"/online")
	t.Logf("CPU %s hot-added (%s) and onlined", cpu, dev)
	var patched, restarted time.Duration
	var restartSeen time.Time // the guest's clock
	// Ready by the restarted kubelet itself (a heartbeat after its new
	// process was seen), not the Ready the old one left: the CPU goes
	// offline next, and a kubelet still starting would read the machine
	// without it.
	waitNode(t, admin, name, "the hot-added CPU in the Node's capacity, the kubelet restarted and Ready", 3*time.Minute, func(nd *corev1.Node) bool {
		if patched == 0 && nd.Status.Capacity.Cpu().Value() == cpus0+1 {
			patched = time.Since(t0)
		}
		if restarted == 0 && kubeletPID(t, n) != pid0 {
			restarted = time.Since(t0)
			restartSeen = guestNow(t, n)
		}
		return patched > 0 && restarted > 0 && readyAfter(nd, restartSeen) && nd.Status.Allocatable.Cpu().Value() == cpus0+1
	})
	ready := time.Since(t0)
	m := metrics()
	for _, series := range []string{`node_resized_uevents_total{action="add",subsystem="cpu"}`, `node_resized_uevents_total{action="online",subsystem="cpu"}`} {
		if v := metricValue(m, series); v < 1 {
			t.Errorf("%s is %v in the pod: the uevent did not reach its network namespace", series, v)
		} else {
			t.Logf("in the pod: %s %v", series, v)
		}
	}
	if v := metricValue(m, `node_resized_kubelet_restarts_total{result="done"}`); v != 1 {
		t.Errorf(`node_resized_kubelet_restarts_total{result="done"} is %v, want 1`, v)
	}
	if l := podLog(id); !strings.Contains(l, "kubelet restarted") {
		t.Errorf("the pod's log does not say it restarted the kubelet")
	}
	t.Logf("CPU hot-add: capacity patched %v, kubelet restarted by the pod %v (settle 10 s, the shipped default), Ready with %d CPUs %v",
		patched.Round(time.Millisecond), restarted.Round(time.Millisecond), cpus0+1, ready.Round(time.Millisecond))

	// The CPU goes offline again: kubepods is clamped through the mounted
	// cgroupfs.
	weight0 := guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/cpu.weight")
	t1 := time.Now()
	guestSh(t, n, "echo 0 > /sys/devices/system/cpu/cpu"+cpu+"/online")
	var weight1 string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if weight1 = guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/cpu.weight"); weight1 != weight0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubepods' cpu.weight still %s a minute after CPU %s went offline", weight0, cpu)
		}
	}
	clamped := time.Since(t1)
	if w0, _ := strconv.Atoi(weight0); func() bool { w1, _ := strconv.Atoi(weight1); return w1 >= w0 }() {
		t.Errorf("kubepods' cpu.weight went %s → %s after a CPU went offline, want it lower", weight0, weight1)
	}
	if !regexp.MustCompile(`msg="kubepods clamped"`).MatchString(podLog(id)) {
		t.Errorf("the pod's log does not say it clamped kubepods")
	}
	t.Logf("CPU %s offline: kubepods cpu.weight %s → %s, seen %v after the offline", cpu, weight0, weight1, clamped.Round(time.Millisecond))

	// The pod's own token: its own Node, and no other.
	checkOwnNodeOnly(t, ctx, c, admin, n, pod)

	// As uid 65534, systemd refuses the restart: it lets only its own uid
	// manage units without polkit. (The state and socket folders and the
	// kubelet's CPU and memory manager checkpoints made that uid's, so
	// that the daemon starts and gets as far as the restart; and a shorter
	// minimum interval between restarts than the shipped 2 minutes, so
	// that the restart the offline calls for is tried soon after the new
	// pod starts.)
	pid1 := kubeletPID(t, n)
	guestSh(t, n, "chown -R 65534:65534 /var/lib/node-resized /run/node-resized && chown 65534 /var/lib/kubelet/cpu_manager_state /var/lib/kubelet/memory_manager_state")
	applyKustomization(t, ctx, c.AdminConfig(), daemonSetOverlay(t, tag, nonRootPatch))
	pod2 := waitDaemonSetPod(t, ctx, admin, name, pod.UID)
	id2 := containerID(t, n, pod2)
	pid2 := guestSh(t, n, "crictl inspect --output go-template --template '{{.info.pid}}' "+id2)
	if uid := guestSh(t, n, "awk '/^Uid:/ {print $2}' /proc/"+pid2+"/status"); uid != "65534" {
		t.Fatalf("the new pod's process runs as uid %s, want 65534", uid)
	}
	var failed string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		l := podLog(id2)
		if i := strings.Index(l, `msg="kubelet restart failed"`); i >= 0 {
			failed = strings.SplitN(l[i:], "\n", 2)[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod as uid 65534 did not try the kubelet restart in 3 min:\n%s", l)
		}
	}
	t.Logf("as uid 65534: %s", failed)
	if !strings.Contains(failed, "Interactive authentication required") && !strings.Contains(failed, "Access denied") {
		t.Errorf("the restart failed, but not because systemd refused it: %s", failed)
	}
	if !strings.Contains(failed, "run node-resized as root") {
		t.Errorf("the refusal does not say what to do: %s", failed)
	}
	if p := kubeletPID(t, n); p != pid1 {
		t.Errorf("the kubelet's process changed (%s → %s) though its restart was refused", pid1, p)
	}
	if s := guestSh(t, n, "systemctl is-active kubelet || true"); s != "active" {
		t.Errorf("kubelet.service is %s after the refused restart", s)
	}
	nd = waitNode(t, admin, name, "the refusal in the condition", time.Minute, func(nd *corev1.Node) bool {
		c := capacityCondition(nd)
		return c != nil && strings.Contains(c.Message, "the kubelet restart failed")
	})
	t.Logf("condition after the refusal: %s: %s", capacityCondition(nd).Reason, capacityCondition(nd).Message)
}

// nonRootPatch runs the DaemonSet's container as uid and gid 65534.
const nonRootPatch = `
patches:
  - target:
      kind: DaemonSet
      name: node-resized
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/securityContext/runAsUser
        value: 65534
      - op: replace
        path: /spec/template/spec/containers/0/securityContext/runAsGroup
        value: 65534
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --kubelet-restart-min-interval=10s
`

// daemonSetOverlay writes a kustomization over packaging/kubernetes that
// sets DaemonSetImage's tag, with extra (kustomization YAML) appended, and
// returns its folder.
func daemonSetOverlay(t *testing.T, tag, extra string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "packaging", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: %s
    newTag: %s
`, base, DaemonSetImage, tag) + extra
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// applyKustomization builds dir with kustomize's library and applies every
// object with server-side apply and strict field validation, as `kubectl
// apply -k dir --server-side` does.
func applyKustomization(t *testing.T, ctx context.Context, cfg *rest.Config, dir string) {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, r := range res.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: "node-resized-test", Force: ptr.To(true), FieldValidation: metav1.FieldValidationStrict,
		}); err != nil {
			t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

// waitDaemonSetPod waits, at most 5 minutes, for the DaemonSet's one pod on
// node to be Ready and not the pod old (a rollout's new pod), and returns
// it.
func waitDaemonSetPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, old types.UID) *corev1.Pod {
	t.Helper()
	t0 := time.Now()
	var last string
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		pods, err := cs.CoreV1().Pods("node-resized").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=node-resized"})
		if err != nil {
			t.Fatal(err)
		}
		var state []string
		for i := range pods.Items {
			p := &pods.Items[i]
			s := fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			for _, c := range p.Status.ContainerStatuses {
				if w := c.State.Waiting; w != nil {
					s += " (" + w.Reason + ": " + w.Message + ")"
				}
			}
			state = append(state, s)
			if p.UID != old && p.DeletionTimestamp == nil && p.Spec.NodeName == node && podReady(p) && len(pods.Items) == 1 {
				t.Logf("DaemonSet pod %s Ready %v after the apply", p.Name, time.Since(t0).Round(time.Millisecond))
				return p
			}
		}
		if s := strings.Join(state, "; "); s != last {
			t.Logf("DaemonSet pods: %s", s)
			last = s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Ready DaemonSet pod on %s in 5 min: %s", node, last)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkCaps checks the effective capabilities of the guest process pid
// for the bits in want (true: held, false: not held) and that it holds no
// bit outside want.
func checkCaps(t *testing.T, n *Node, pid string, want map[int]bool) {
	t.Helper()
	hex := guestSh(t, n, "awk '/^CapEff:/ {print $2}' /proc/"+pid+"/status")
	eff, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("CapEff %q of pid %s: %v", hex, pid, err)
	}
	var allowed uint64
	for bit, held := range want {
		if held {
			allowed |= 1 << bit
		}
		if got := eff&(1<<bit) != 0; got != held {
			t.Errorf("the container's capability %d: held %v, want %v (CapEff %s)", bit, got, held, hex)
		}
	}
	if extra := eff &^ allowed; extra != 0 {
		t.Errorf("the container holds capabilities beyond the manifest's: CapEff %s, extra %#x", hex, extra)
	}
	t.Logf("the container's effective capabilities: %s", hex)
}

// waitOfflineCPU waits, at most a minute, for a present CPU that is
// offline (a hot-added one) and returns its number.
func waitOfflineCPU(t *testing.T, n *Node) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if c := guestSh(t, n, "for f in /sys/devices/system/cpu/cpu[0-9]*/online; do [ \"$(cat $f)\" = 0 ] && basename $(dirname $f); done | head -1 | tr -d cpu"); c != "" {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("no offline CPU a minute after the hot-add: online %s", guestSh(t, n, "cat /sys/devices/system/cpu/online"))
		}
	}
}

// metricValue returns the value of series (name{labels} as Prometheus's
// text format writes it) in text, -1 when it is absent.
func metricValue(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// checkOwnNodeOnly uses the pod's own service account token (the kubelet's
// projected volume, read in the guest) as node-resized in it does: a
// status patch of its own Node is allowed, the same patch of another Node
// is refused by the ValidatingAdmissionPolicy, and so is a change to its
// own Node's labels.
func checkOwnNodeOnly(t *testing.T, ctx context.Context, c *cluster.Cluster, admin kubernetes.Interface, n *Node, pod *corev1.Pod) {
	t.Helper()
	const other = "node-ds-other"
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}, Spec: corev1.NodeSpec{Unschedulable: true}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tok := guestSh(t, n, "cat /var/lib/kubelet/pods/"+string(pod.UID)+"/volumes/kubernetes.io~projected/kube-api-access-*/token")
	cfg := rest.CopyConfig(c.AdminConfig())
	cfg.BearerToken = tok
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: "NodeResizedTest", Status: corev1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.Now(),
	}}}})
	if _, err := as.CoreV1().Nodes().Patch(ctx, pod.Spec.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the pod's token patching its own Node's status: %v", err)
	}
	_, err = as.CoreV1().Nodes().Patch(ctx, other, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not change Node "+other) {
		t.Errorf("the pod's token patching Node %s: %v; want the admission policy's refusal", other, err)
	} else {
		t.Logf("the pod's token on another Node: %v", err)
	}
	_, err = as.CoreV1().Nodes().Patch(ctx, pod.Spec.NodeName, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"node-resized-test":"x"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the pod's token labelling its own Node: %v; want it refused", err)
	} else {
		t.Logf("the pod's token labelling its own Node: %v", err)
	}
}

// buildDaemonSetImage builds the DaemonSet's image from this checkout with
// make image, as a release would, for linux/amd64 only (the node's
// platform: ARCHES=amd64, whose image is the same as the linux/amd64 one
// of the full build), and returns the archive and the image's tag. BIN
// and DIST are a folder under this machine's cache: the guest reads the
// archive through its view of this machine's root, which does not show
// /tmp. The archive names the image DaemonSetImage:tag, which the guest's
// containerd imports it as.
func buildDaemonSetImage(t *testing.T) (archive, tag string) {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Dir(runtimeDir), "daemonset-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t0 := time.Now()
	mk := exec.Command("make", "-C", repoRoot(t), "image", "ARCHES=amd64", "BIN="+filepath.Join(dir, "bin"), "DIST="+filepath.Join(dir, "dist"))
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "dist", "image", "oci", "index.json"))
	if err == nil {
		err = json.Unmarshal(b, &index)
	}
	if err != nil || len(index.Manifests) != 1 {
		t.Fatalf("make image's index.json: %v, %d entries", err, len(index.Manifests))
	}
	ref := index.Manifests[0].Annotations["io.containerd.image.name"]
	name, tag, _ := strings.Cut(ref, ":")
	if name != DaemonSetImage || tag == "" {
		t.Fatalf("make image built %q, want %s:TAG, the manifests' image", ref, DaemonSetImage)
	}
	archive = filepath.Join(dir, "dist", "node-resized-image-"+tag+".tar")
	if _, err := os.Stat(archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("make image ARCHES=amd64: %s in %v", ref, time.Since(t0).Round(time.Millisecond))
	return archive, tag
}
