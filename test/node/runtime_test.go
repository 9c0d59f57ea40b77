package node

import (
	"context"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/test/cluster"
)

// realRuntimePod is the first step of TestDaemonSetOnRealNode, on its node
// before the DaemonSet: the node booted on the real container runtime
// (containerd, runc and the CNI bridge, test/node/build-runtime) instead of
// the fake one runs a real container: the Node reports containerd as its
// runtime and is Ready; a busybox pod's container is a process in its own
// cgroup under the pod's slice, with an address of its own on the pod
// network, serving a page that the node fetches from that address; crictl
// lists it. The pod is deleted at the end.
func realRuntimePod(t *testing.T, n *Node, c *cluster.Cluster) {
	name := n.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	versions, err := RuntimeVersions(runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	node, err := n.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "containerd://" + strings.TrimPrefix(versions["containerd"], "v")
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != want {
		t.Errorf("the Node's runtime is %q, want %q", got, want)
	}
	t.Logf("Node %s: kubelet %s, runtime %s; %s",
		name, node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion, guestSh(t, n, "runc --version | head -1"))
	for _, u := range []string{"containerd", "node-images", "kubelet"} {
		if s := guestSh(t, n, "systemctl is-active "+u+" || true"); s != "active" {
			t.Errorf("%s.service is %q, want active", u, s)
		}
	}
	if u := guestSh(t, n, "systemctl is-active fakecri || true"); u == "active" {
		t.Errorf("fakecri.service runs beside containerd")
	}

	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	pod := busyboxPod("web", "mkdir -p /www && echo hello from $(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www",
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}, nil)
	if pod, err = admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = waitPodRunning(t, ctx, admin, pod)
	t.Logf("pod %s Running after %v, IP %s", pod.Name, time.Since(t0).Round(time.Millisecond), pod.Status.PodIP)
	_, subnet, _ := net.ParseCIDR(PodSubnet)
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q is not on the pod network %s", pod.Status.PodIP, PodSubnet)
	}

	// crictl lists the container, and it is a process in its own scope
	// under the pod's slice.
	id := guestSh(t, n, "crictl ps -q --state running --label io.kubernetes.pod.name="+pod.Name)
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("crictl ps for pod %s: %q, want one running container\n%s", pod.Name, id, guestSh(t, n, "crictl ps -a"))
	}
	t.Logf("crictl ps:\n%s", guestSh(t, n, "crictl ps"))
	scope := containerCgroup(pod, id)
	procs := guestSh(t, n, "cat "+scope+"/cgroup.procs")
	if procs == "" {
		t.Errorf("%s/cgroup.procs is empty: no process runs the container", scope)
	} else if comm := guestSh(t, n, "cat /proc/"+strings.Fields(procs)[0]+"/comm"); comm != "httpd" {
		t.Errorf("the container's process is %q, want httpd", comm)
	}

	// The node reaches the pod at its own address.
	var page string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		page, err = n.Run(ctx, "curl -sS --max-time 5 http://"+pod.Status.PodIP+":8080/index.html")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || strings.TrimSpace(page) != "hello from web" {
		t.Errorf("fetching the pod's page from the node: %q, %v; want \"hello from web\"", page, err)
	}
	deletePod(t, admin, pod.Name)
}

// needRuntime fails the test when the real runtime could not be built.
func needRuntime(t *testing.T) {
	t.Helper()
	if runtimeErr != nil {
		t.Fatal(runtimeErr)
	}
}

// busyboxPod is a pod of one container from BusyboxImage running script
// under sh, with the given requests and limits. It mounts no service
// account token: no controller publishes the kube-root-ca.crt ConfigMap
// in this control plane.
func busyboxPod(name, script string, requests, limits corev1.ResourceList) *corev1.Pod {
	no := false
	var grace int64 = 1
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Hostname:                      name,
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
				Resources:       corev1.ResourceRequirements{Requests: requests, Limits: limits},
			}},
		},
	}
}

// containerCgroup is the cgroup of the container id of pod under the
// systemd cgroup driver: cri-containerd-<id>.scope in the pod's slice.
func containerCgroup(pod *corev1.Pod, id string) string {
	uid := strings.ReplaceAll(string(pod.UID), "-", "_")
	var qos string
	switch pod.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return "/sys/fs/cgroup/kubepods.slice/kubepods-pod" + uid + ".slice/cri-containerd-" + id + ".scope"
	case corev1.PodQOSBestEffort:
		qos = "besteffort"
	default:
		qos = "burstable"
	}
	return "/sys/fs/cgroup/kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + uid + ".slice/cri-containerd-" + id + ".scope"
}

// TestRealRuntimeExclusiveCPU is the static CPU manager with real
// containers: a Guaranteed pod with an integer CPU request gets an
// exclusive CPU, which its container's cpuset.cpus.effective shows, and a
// Burstable pod's container runs on the shared pool (3 CPUs of 4, CPU 0
// reserved). Then node-resized (installed from its deb, restarts on) sees
// a CPU hot-add, restarts the
// kubelet, and: the exclusive assignment is kept, in the checkpoint and in
// the container's real cgroup, and the shared pool's container gets the
// new CPU in its cgroup (the CPU manager's reconcile loop writes it
// through containerd), with neither container restarted. Last, the
// exclusive CPU goes offline under its container (exclusive-cpu-offline).
func TestRealRuntimeExclusiveCPU(t *testing.T) {
	parallelGuest(t)
	needRuntime(t)
	// Three CPUs of four: with CPU 0 reserved, room for the exclusive
	// CPU and the shared pool's pod.
	s := relayNodeConfig(t, Config{KubeletConfig: staticCPUKubeletConfig, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir, CPUs: 3},
		"--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()
	pods := cs.CoreV1().Pods("default")
	one := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	excl := busyboxPod("excl", "exec sleep 36000", one, one)
	shared := busyboxPod("shared", "exec sleep 36000",
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}, nil)
	for _, p := range []*corev1.Pod{excl, shared} {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	excl = waitPodRunning(t, ctx, cs, excl)
	shared = waitPodRunning(t, ctx, cs, shared)
	if excl.Status.QOSClass != corev1.PodQOSGuaranteed || shared.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("QoS %s and %s, want Guaranteed and Burstable", excl.Status.QOSClass, shared.Status.QOSClass)
	}
	exclID := containerID(t, n, excl)
	sharedID := containerID(t, n, shared)
	cpus := func(p *corev1.Pod, id string) string {
		return guestSh(t, n, "cat "+containerCgroup(p, id)+"/cpuset.cpus.effective")
	}

	var st cpuState
	var raw string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		st, raw = readCPUState(t, n, cpuManagerState)
		if st.Entries[string(excl.UID)]["c"] != "" || time.Now().After(deadline) {
			break
		}
	}
	held := st.Entries[string(excl.UID)]["c"]
	t.Logf("%s: %s", cpuManagerState, raw)
	t.Logf("before: the exclusive container's cpuset.cpus.effective %q, the shared one's %q", cpus(excl, exclID), cpus(shared, sharedID))
	online := guestSh(t, n, "cat /sys/devices/system/cpu/online")
	heldSet, err1 := cpuset.Parse(held)
	onlineSet, err2 := cpuset.Parse(online)
	if err1 != nil || err2 != nil || st.PolicyName != "static" || heldSet.Size() != 1 || heldSet.Contains(0) {
		t.Fatalf("cpu_manager_state: policy %q, the Guaranteed container holds %q; want static and one CPU other than the reserved 0 (%v %v)", st.PolicyName, held, err1, err2)
	}
	pool := onlineSet.Difference(heldSet).String()
	if st.DefaultCPUSet != pool {
		t.Errorf("defaultCpuSet %q, want the online CPUs %s less the exclusive %s: %s", st.DefaultCPUSet, online, held, pool)
	}
	if got := cpus(excl, exclID); got != held {
		t.Errorf("the Guaranteed container runs on CPUs %q, want its exclusive %q", got, held)
	}
	if got := cpus(shared, sharedID); got != pool {
		t.Errorf("the Burstable container runs on CPUs %q, want the shared pool %s", got, pool)
	}

	r := s.relayUpscale(t, "CPU hot-add, real containers", func(ctx context.Context) error {
		_, err := n.HotAddCPU(ctx, 1)
		return err
	}, func(v nodeVersion) bool { return v.cpu == 4000 }, "cpu=4,", 10*time.Second)
	t.Logf("CPU hot-add: uevent to patch %v, to the kubelet restarted %v, to Node Ready with cpu=4 %v", r.patch, r.restart, r.ready)
	onlineSet, _ = cpuset.Parse(guestSh(t, n, "cat /sys/devices/system/cpu/online"))
	pool = onlineSet.Difference(heldSet).String()
	noRefusal(t, n, "after the CPU hot-add", r.mark)
	st, raw = readCPUState(t, n, cpuManagerState)
	t.Logf("after: %s: %s", cpuManagerState, raw)
	if got := st.Entries[string(excl.UID)]["c"]; got != held {
		t.Errorf("after the hot-add the Guaranteed container holds %q in cpu_manager_state, want %q", got, held)
	}
	if st.DefaultCPUSet != pool {
		t.Errorf("defaultCpuSet %q after the hot-add, want %s", st.DefaultCPUSet, pool)
	}
	// The reconcile loop (every 10 s) moves the shared pool's containers
	// to the new default set.
	var got string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if got = cpus(shared, sharedID); got == pool || time.Now().After(deadline) {
			break
		}
	}
	if got != pool {
		t.Errorf("the Burstable container runs on CPUs %q 90 s after the kubelet's restart, want %s", got, pool)
	}
	t.Logf("after: the exclusive container's cpuset.cpus.effective %q, the shared one's %q", cpus(excl, exclID), got)
	if got := cpus(excl, exclID); got != held {
		t.Errorf("after the hot-add the Guaranteed container runs on CPUs %q, want its exclusive %q", got, held)
	}
	for _, p := range []*corev1.Pod{excl, shared} {
		now, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || now.UID != p.UID || now.Status.Phase != corev1.PodRunning || len(now.Status.ContainerStatuses) != 1 || now.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s after the hot-add: %v %+v", p.Name, err, now.Status.ContainerStatuses)
		}
	}
	if id := containerID(t, n, excl); id != exclID {
		t.Errorf("the Guaranteed pod's container is %s after the hot-add, was %s", id, exclID)
	}

	// The exclusive CPU goes offline under the running container. What
	// follows is node-resized's decision for a lost CPU that a container
	// holds: the clamp, the pod evicted, then the kubelet restarted, its
	// checkpoint rewritten without the pod, and no CPU taken from the
	// shared pool's container but the one that went.
	t.Run("exclusive-cpu-offline", func(t *testing.T) {
		mark := guestNow(t, n)
		guestSh(t, n, "echo 0 > /sys/devices/system/cpu/cpu"+held+"/online")
		clamps := waitDaemonLog(t, n, "kubepods clamped", mark, time.Minute)
		evicted := waitDaemonLog(t, n, "evicted pod", mark, 2*time.Minute)
		restarting := waitDaemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark, 5*time.Minute)
		restarted := waitDaemonLog(t, n, "kubelet restarted", mark, 5*time.Minute)
		for _, e := range []JournalEntry{clamps[0], evicted[0], restarting[0], restarted[0]} {
			t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
		}
		if !strings.Contains(evicted[0].str("POD"), excl.Name) || len(evicted) != 1 {
			t.Errorf("evicted %d pod(s), the first %q; want only %s", len(evicted), evicted[0].str("POD"), excl.Name)
		}
		if !clamps[0].Time().Before(evicted[0].Time()) || !evicted[0].Time().Before(restarting[0].Time()) {
			t.Errorf("order: clamp %s, eviction %s, restart begun %s; want in that order",
				clamps[0].Time().Format("15:04:05.000"), evicted[0].Time().Format("15:04:05.000"), restarting[0].Time().Format("15:04:05.000"))
		}
		since := newKubeletSince(t, n)
		waitNode(t, cs, n.Name(), "Ready by the restarted kubelet with cpu=3", 2*time.Minute, func(nd *corev1.Node) bool {
			return readyAfter(nd, since) && nd.Status.Capacity.Cpu().Value() == 3
		})
		noRefusal(t, n, "after the exclusive CPU went offline", mark)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
			_, err := pods.Get(ctx, excl.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s still there 2 min after its CPU went offline: %v", excl.Name, err)
			}
		}
		if out, _, _ := n.Exec(ctx, "crictl ps -q --label io.kubernetes.pod.uid="+string(excl.UID)); strings.TrimSpace(out) != "" {
			t.Errorf("the evicted pod's container %s still runs", strings.TrimSpace(out))
		}
		st, raw := readCPUState(t, n, cpuManagerState)
		t.Logf("after the offline: %s: %s", cpuManagerState, raw)
		onlineSet, _ := cpuset.Parse(guestSh(t, n, "cat /sys/devices/system/cpu/online"))
		if len(st.Entries) != 0 || st.DefaultCPUSet != onlineSet.String() {
			t.Errorf("cpu_manager_state after the offline: entries %v, default %q; want none, and every online CPU %s", st.Entries, st.DefaultCPUSet, onlineSet)
		}
		if got := cpus(shared, sharedID); got != onlineSet.String() {
			t.Errorf("the Burstable container runs on CPUs %q, want every online CPU %s", got, onlineSet)
		}
		if now, err := pods.Get(ctx, shared.Name, metav1.GetOptions{}); err != nil || now.UID != shared.UID || now.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the Burstable pod after the offline: %v", err)
		}
		l, _ := clamps[0].latency()
		t.Logf("exclusive CPU offline: uevent->clamp %v, clamp->eviction %v, eviction->restart begun %v, ->kubelet restarted %v",
			l, evicted[0].Time().Sub(clamps[0].Time()).Round(time.Millisecond), restarting[0].Time().Sub(evicted[0].Time()).Round(time.Millisecond),
			restarted[0].Time().Sub(restarting[0].Time()).Round(time.Millisecond))
	})
}

// containerID is the id of pod's one running container, from crictl.
func containerID(t *testing.T, n *Node, pod *corev1.Pod) string {
	t.Helper()
	id := guestSh(t, n, "crictl ps -q --state running --label io.kubernetes.pod.uid="+string(pod.UID))
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("crictl ps for pod %s: %q, want one running container\n%s", pod.Name, id, guestSh(t, n, "crictl ps -a"))
	}
	return id
}

// dimmUnplugUnderHog is TestPlannedRelease's control for b-dimm, on a node
// of its own: a DIMM unplug under a real memory hog, with no release:
// node-resized installed from its deb, a 1 GiB DIMM hot-added and adopted
// by the kubelet (restarted by node-resized), a Guaranteed pod that fits
// the smaller machine, and a Burstable pod whose container (test/cmd/memhog)
// touches more memory than the allocatable without the DIMM but less than
// kubepods may hold then. The DIMM goes: kubepods is clamped first, then
// node-resized evicts the hog's pod and its container goes, the Node's
// allocatable follows, and the Guaranteed pod is untouched. The hog holds
// less than the clamp, so the kernel has no cause to OOM-kill it: the
// eviction is what ends it (kubepods' memory.events are reported, and the
// container must not end OOMKilled). What the guest does: its kernel
// offlines the DIMM's blocks itself, migrating the hog's pages to the
// boot memory, and QEMU reports DEVICE_DELETED.
func dimmUnplugUnderHog(t *testing.T) {
	needRuntime(t)
	s := relayNodeConfig(t, Config{KubeletConfig: installedKubeletConfig, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir},
		"--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	defer func() {
		for _, l := range s.timings {
			t.Logf("timing: %s", l)
		}
	}()
	mem0 := memTotal(t, n)
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	fits := busyboxPod("fits", "exec sleep 36000", small, small)
	fits.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
	if _, err := pods.Create(ctx, fits, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fits = waitPodRunning(t, ctx, cs, fits)
	fitsID := containerID(t, n, fits)

	// The DIMM, adopted by the kubelet through node-resized's restart.
	want := mem0 + installedDIMM
	var dimm string
	r := s.relayUpscale(t, "DIMM hot-add", func(ctx context.Context) error {
		var err error
		dimm, err = hotAddDIMM(ctx, t, n, 1, want)
		return err
	}, func(v nodeVersion) bool { return v.mem == want }, fmt.Sprintf("memory=%dKi,", want>>10), 10*time.Second)
	t.Logf("DIMM hot-add: uevent to the kubelet restarted %v, to Node Ready with it %v", r.restart, r.ready)
	waitKubepodsMax(t, n, want-installedReserved, 30*time.Second)

	// The hog: above the allocatable without the DIMM, below the clamp.
	allocAfter := mem0 - installedReserved - evictionHardMemory
	clampTo := mem0 - installedReserved
	target := (allocAfter + clampTo) / 2
	avail := memInfoBytes(t, n, "MemAvailable")
	t.Logf("the hog will hold %s: above the allocatable without the DIMM (%s), below kubepods' clamp (%s); MemAvailable %s, %s without the DIMM",
		mibs(target), mibs(allocAfter), mibs(clampTo), mibs(avail), mibs(avail-installedDIMM))
	if avail-installedDIMM < target+64*mib {
		t.Fatalf("no room: the guest uses too much for the hog to hold %s without the DIMM (MemAvailable %s)", mibs(target), mibs(avail))
	}
	hog, hogID := startHog(t, ctx, n, cs, "hog", target,
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")})
	hogCg := containerCgroup(hog, hogID)
	events0 := guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/memory.events")
	t.Logf("the hog holds %s (its container's memory.current %s); kubepods memory.events: %s",
		mibs(target), guestSh(t, n, "cat "+hogCg+"/memory.current"), strings.ReplaceAll(events0, "\n", ", "))

	// The unplug.
	mark := guestNow(t, n)
	u0 := time.Now()
	if err := n.DeviceDel(ctx, dimm); err != nil {
		t.Fatal(err)
	}
	t.Logf("DIMM unplugged (DEVICE_DELETED) after %v", time.Since(u0).Round(time.Millisecond))
	clamps := waitDaemonLog(t, n, "kubepods clamped", mark, time.Minute)
	evicted := waitDaemonLog(t, n, "evicted pod", mark, 2*time.Minute)
	var gone time.Duration
	// A timeout, not a bound: loaded guests (three on two CPUs) have
	// taken over 2 min to stop it.
	for deadline := time.Now().Add(6 * time.Minute); ; time.Sleep(time.Second) {
		if out, _, _ := n.Exec(ctx, "crictl ps -q --label io.kubernetes.pod.uid="+string(hog.UID)); strings.TrimSpace(out) == "" {
			gone = time.Since(u0)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog's container still runs 6 min after the unplug")
		}
	}
	clampLat, _ := clamps[0].latency()
	for _, e := range []JournalEntry{clamps[0], evicted[0]} {
		t.Logf("journal: %s %q: %s", e.Time().Format("15:04:05.000"), e.Message(), journalFields(e))
	}
	if !clamps[0].Time().Before(evicted[0].Time()) {
		t.Errorf("the eviction (%s) before the clamp (%s)", evicted[0].Time().Format("15:04:05.000"), clamps[0].Time().Format("15:04:05.000"))
	}
	if len(evicted) != 1 || !strings.Contains(evicted[0].str("POD"), "default/hog") {
		t.Errorf("evicted %d pod(s), the first %q; want only default/hog", len(evicted), evicted[0].str("POD"))
	}
	if got := kubepodsMax(t, n); got != clampTo {
		t.Errorf("kubepods.slice MemoryMax %s after the unplug, want the clamp %s", mibs(got), mibs(clampTo))
	}
	events1 := guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/memory.events")
	t.Logf("kubepods memory.events after: %s", strings.ReplaceAll(events1, "\n", ", "))
	if p, err := pods.Get(ctx, hog.Name, metav1.GetOptions{}); err == nil {
		for _, c := range p.Status.ContainerStatuses {
			if term := c.State.Terminated; term != nil && term.Reason == "OOMKilled" {
				t.Errorf("the hog was OOM-killed, not evicted: it held less than the clamp")
			}
		}
	}
	nd := waitNode(t, cs, n.Name(), "memory capacity without the DIMM", 2*time.Minute, func(nd *corev1.Node) bool {
		return nd.Status.Capacity.Memory().Value() == mem0
	})
	t.Logf("after the unplug: %s", describeNode(nd))
	now, err := pods.Get(ctx, fits.Name, metav1.GetOptions{})
	if err != nil || now.UID != fits.UID || now.DeletionTimestamp != nil || now.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the Guaranteed pod that fits was touched: %v", err)
	} else if id := containerID(t, n, fits); id != fitsID {
		t.Errorf("the Guaranteed pod's container is %s, was %s", id, fitsID)
	}
	t.Logf("DIMM unplug under a real hog of %s: uevent->clamp %v, clamp->eviction logged %v, unplug->container gone %v",
		mibs(target), clampLat, evicted[0].Time().Sub(clamps[0].Time()).Round(time.Millisecond), gone.Round(time.Millisecond))
}

// TestRealRuntimeCPUWeight: two Burstable pods whose containers spin on
// CPU, one requesting 100m and one 400m, before and after the machine
// loses two of its three CPUs. Their pod cgroups' cpu.weight is the
// kubelet's for their requests throughout (their containers' is runc's), kubepods' cpu.weight follows the
// smaller machine's allocatable (node-resized's clamp, then the kubelet
// it restarts), and their measured shares of CPU time move with it: with
// a CPU each they run alike, on one CPU the 400m pod gets about four times
// the other's time.
func TestRealRuntimeCPUWeight(t *testing.T) {
	parallelGuest(t)
	needRuntime(t)
	// Multi-threaded TCG: its pods spin on CPU, and with one TCG thread
	// the spinners and the node's own work (containerd, the kubelet)
	// would share one host core; a pod took over 3 minutes to start.
	s := relayNodeConfig(t, Config{Runtime: RuntimeContainerd, RuntimeDir: runtimeDir, CPUs: 3, Accel: "tcg"}, "--auto-online "+relayPolicy)
	n, cs := s.n, s.admin
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	type spinner struct {
		pod    *corev1.Pod
		id, cg string
		milli  int64
	}
	spinners := []*spinner{{milli: 100}, {milli: 400}}
	for i, sp := range spinners {
		p := busyboxPod(fmt.Sprintf("spin-%dm", sp.milli), "while :; do :; done",
			corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(sp.milli, resource.DecimalSI), corev1.ResourceMemory: resource.MustParse("16Mi")}, nil)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		spinners[i].pod = waitPodRunning(t, ctx, cs, p)
		spinners[i].id = containerID(t, n, spinners[i].pod)
		spinners[i].cg = containerCgroup(spinners[i].pod, spinners[i].id)
	}
	// The pod's slice is the kubelet's, with its conversion of the
	// request's shares to a weight; the container's scope is runc's,
	// which converts the shares the kubelet passes through the CRI with
	// its own formula (17 and 49 where the kubelet's are 4 and 16). The
	// pods compete through their slices.
	checkWeights := func(when string) {
		t.Helper()
		for _, sp := range spinners {
			shares := decide.MilliCPUToShares(sp.milli)
			for _, w := range []struct{ cg, who, want string }{
				{path.Dir(sp.cg), "the kubelet's", strconv.FormatUint(decide.SharesToWeight(shares), 10)},
				{sp.cg, "runc's", strconv.FormatUint(cgroups.ConvertCPUSharesToCgroupV2Value(shares), 10)},
			} {
				if got := guestSh(t, n, "cat "+w.cg+"/cpu.weight"); got != w.want {
					t.Errorf("%s: %s/cpu.weight %s, want %s %s for %dm", when, w.cg, got, w.who, w.want, sp.milli)
				}
			}
		}
	}
	kubepodsWeight := func(nd *corev1.Node) (got, want string) {
		want = strconv.FormatUint(decide.SharesToWeight(decide.MilliCPUToShares(nd.Status.Allocatable.Cpu().MilliValue())), 10)
		return guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/cpu.weight"), want
	}
	// share measures each container's CPU time over a window and returns
	// the 400m pod's time over the 100m pod's.
	share := func(when string) float64 {
		t.Helper()
		read := func() []float64 {
			var us []float64
			for _, sp := range spinners {
				f := strings.Fields(guestSh(t, n, "grep '^usage_usec' "+sp.cg+"/cpu.stat"))
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					t.Fatal(err)
				}
				us = append(us, v)
			}
			return us
		}
		a := read()
		t0 := time.Now()
		time.Sleep(15 * time.Second)
		b := read()
		el := time.Since(t0).Seconds() * 1e6
		light, heavy := (b[0]-a[0])/el, (b[1]-a[1])/el
		t.Logf("%s: over %.1f s the 100m container ran %.0f%% of a CPU, the 400m one %.0f%%: ratio %.2f", when, el/1e6, light*100, heavy*100, heavy/light)
		return heavy / light
	}

	nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkWeights("on 3 CPUs")
	got, want := kubepodsWeight(nd)
	t.Logf("on 3 CPUs: allocatable cpu %s, kubepods cpu.weight %s (the kubelet's %s)", nd.Status.Allocatable.Cpu(), got, want)
	if got != want {
		t.Errorf("on 3 CPUs: kubepods cpu.weight %s, want %s", got, want)
	}
	before := share("on 3 CPUs")

	mark := guestNow(t, n)
	guestSh(t, n, "echo 0 > /sys/devices/system/cpu/cpu2/online")
	time.Sleep(time.Second)
	guestSh(t, n, "echo 0 > /sys/devices/system/cpu/cpu1/online")
	waitDaemonLog(t, n, "kubepods clamped", mark, time.Minute)
	restarting := waitDaemonLog(t, n, "restarting the kubelet so that it adopts the capacity", mark, 2*time.Minute)
	waitDaemonLog(t, n, "kubelet restarted", restarting[len(restarting)-1].Time(), 2*time.Minute)
	since := newKubeletSince(t, n)
	nd = waitNode(t, cs, n.Name(), "Ready by the restarted kubelet with cpu=1", 3*time.Minute, func(nd *corev1.Node) bool {
		return readyAfter(nd, since) && nd.Status.Capacity.Cpu().Value() == 1
	})
	if evicted := daemonLog(t, n, "evicted pod", mark); len(evicted) > 0 {
		t.Fatalf("evicted %s: the spinners fit the smaller machine", evicted[0].str("POD"))
	}
	checkWeights("on 1 CPU")
	got, want = kubepodsWeight(nd)
	t.Logf("on 1 CPU: allocatable cpu %s, kubepods cpu.weight %s (the kubelet's %s)", nd.Status.Allocatable.Cpu(), got, want)
	if got != want {
		t.Errorf("on 1 CPU: kubepods cpu.weight %s, want %s", got, want)
	}
	after := share("on 1 CPU")
	// The weights are 4 and 16: on one CPU the scheduler gives the 400m
	// container about four times the other's time. On three each could
	// have a CPU, but the guest's vCPUs are host threads, and on a loaded
	// host they get unequal time: that ratio was 1.4 on an idle host and
	// higher on a busy one, so it is the control (sharing one CPU raised
	// the ratio), not a bound.
	if after < 2.5 || after <= before {
		t.Errorf("the 400m container's time over the 100m one's: %.2f on 3 CPUs, %.2f on 1 CPU; want at least 2.5 on 1 CPU (weights 16 and 4), and above the ratio on 3 CPUs", before, after)
	}
}

// startHog runs a Burstable pod named name on n whose container
// (test/cmd/memhog) touches target bytes and holds them, with requests
// (its memory request is what the kubelet's eviction order weighs), and
// returns it, Running and holding, with its container's id.
func startHog(t *testing.T, ctx context.Context, n *Node, cs kubernetes.Interface, name string, target int64, requests corev1.ResourceList) (*corev1.Pod, string) {
	t.Helper()
	hog := busyboxPod(name, fmt.Sprintf("exec memhog -mib %d -step 16 -interval 20ms", target>>20), requests, nil)
	hog.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name()}
	if _, err := cs.CoreV1().Pods(hog.Namespace).Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hog = waitPodRunning(t, ctx, cs, hog)
	id := containerID(t, n, hog)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		logs, _, _ := n.Exec(ctx, "crictl logs --tail 1 "+id+" 2>&1")
		if strings.Contains(logs, "holding") {
			return hog, id
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hog %s did not reach %s in 3 min: %q", name, mibs(target), logs)
		}
	}
}
