package node

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// guestSh runs a command that must succeed and returns its trimmed output.
// Its timeout is for a command that hangs: with three guests on two CPUs a
// dpkg -i has taken over 2 min.

// defaultKubeletVersion is the kubelet every node boots unless
// Config.Kubelet names another: the test module's k8s.io/kubernetes.
const defaultKubeletVersion = "v1.37.2"

func guestSh(t *testing.T, n *Node, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	out, err := n.Run(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// checkFreshNode checks that a freshly booted node is what it claims: the real
// systemd as PID 1 on cgroup v2, the real kubelet registered and Ready,
// kubepods.slice sized by the kubelet through systemd (the kubelet's
// configuration reserving systemReserved and DefaultKubeReservedMemory),
// and a pod running in its own cgroup. It is TestInstalledPackage's first
// step, before anything is installed; the QMP CPU hotplug the node takes
// is its g-layer1-scheduler.
func checkFreshNode(t *testing.T, n *Node, admin kubernetes.Interface, systemReserved int64) {
	name := n.Name()
	t.Logf("boot: guest agent after %v, Node Ready after %v",
		n.AgentReadyTime().Round(time.Millisecond), n.ReadyTime().Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if exe := guestSh(t, n, "readlink /proc/1/exe"); exe != "/usr/lib/systemd/systemd" && exe != "/lib/systemd/systemd" {
		t.Errorf("PID 1 is %q, want systemd", exe)
	}
	// "starting" while units are still coming up; wait for the outcome.
	var state string
	for deadline := time.Now().Add(3 * time.Minute); ; {
		out, _, err := n.Systemctl(ctx, "is-system-running")
		if err != nil {
			t.Fatal(err)
		}
		state = strings.TrimSpace(out)
		if state != "starting" && state != "initializing" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	switch state {
	case "running":
		t.Logf("systemctl is-system-running: %s", state)
	case "degraded":
		failed, _, _ := n.Systemctl(ctx, "--failed", "--no-legend", "--plain")
		t.Logf("systemctl is-system-running: degraded; failed units:\n%s", strings.TrimSpace(failed))
	default:
		failed, _, _ := n.Systemctl(ctx, "--failed", "--no-legend", "--plain")
		t.Errorf("systemctl is-system-running: %q, want running or degraded; failed units:\n%s", state, failed)
	}
	if fs := guestSh(t, n, "stat -f -c %T /sys/fs/cgroup"); fs != "cgroup2fs" {
		t.Errorf("/sys/fs/cgroup is %q, want cgroup2fs", fs)
	}
	if v1 := guestSh(t, n, "grep -c ' cgroup ' /proc/mounts || true"); v1 != "0" {
		t.Errorf("%s cgroup v1 mounts in the guest", v1)
	}
	for _, u := range []string{"systemd-journald", "dbus", "fakecri", "kubelet"} {
		out, _, err := n.Systemctl(ctx, "is-active", u)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(out); s != "active" {
			t.Errorf("%s.service is %q, want active", u, s)
		}
	}
	if ctrls := guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/cgroup.controllers"); !strings.Contains(" "+ctrls+" ", " cpuset ") {
		t.Errorf("kubepods.slice controllers %q lack cpuset", ctrls)
	}

	// The Node, as the API server has it.
	node, err := n.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("Node %s not Ready: %+v", name, node.Status.Conditions)
	}
	capMem := node.Status.Capacity.Memory().Value()
	t.Logf("Node %s: kubelet %s, runtime %s, capacity cpu=%s memory=%s, allocatable cpu=%s memory=%s, addresses %v",
		name, node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion,
		node.Status.Capacity.Cpu(), node.Status.Capacity.Memory(),
		node.Status.Allocatable.Cpu(), node.Status.Allocatable.Memory(), node.Status.Addresses)
	if got := node.Status.NodeInfo.KubeletVersion; got != defaultKubeletVersion {
		t.Errorf("kubelet version %q, want %s", got, defaultKubeletVersion)
	}

	// The kubelet's own word, from the journal.
	entries, err := n.Journal(ctx, "kubelet.service")
	if err != nil {
		t.Fatal(err)
	}
	registered := false
	for _, e := range entries {
		if strings.Contains(e.Message(), "Successfully registered node") {
			registered = true
		}
	}
	if !registered {
		t.Errorf("no \"Successfully registered node\" in the kubelet's %d journal entries", len(entries))
	}

	// kubepods.slice: the kubelet's limit, set through systemd.
	want := capMem - systemReserved - DefaultKubeReservedMemory
	out, _, err := n.Systemctl(ctx, "show", "kubepods.slice", "-p", "MemoryMax", "--value")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil || got != want {
		t.Errorf("kubepods.slice MemoryMax = %q, want %d (capacity %d - systemReserved %d - kubeReserved %d)",
			strings.TrimSpace(out), want, capMem, systemReserved, DefaultKubeReservedMemory)
	}
	if got := guestSh(t, n, "cat /sys/fs/cgroup/kubepods.slice/memory.max"); got != strconv.FormatInt(want, 10) {
		t.Errorf("kubepods.slice/memory.max = %s, want %d", got, want)
	}

	// A pod, run by the kubelet in its own cgroup.
	t0 := time.Now()
	pod := burstablePod("probe")
	pod, err = admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod = waitPodRunning(t, ctx, admin, pod)
	t.Logf("pod %s Running on %s after %v (QoS %s, IP %s)", pod.Name, pod.Spec.NodeName,
		time.Since(t0).Round(time.Millisecond), pod.Status.QOSClass, pod.Status.PodIP)
	slice := "kubepods-burstable-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	dir := "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" + slice
	if _, err := n.Run(ctx, "test -d "+dir); err != nil {
		t.Errorf("pod cgroup %s: %v", dir, err)
	}
	out, _, err = n.Systemctl(ctx, "show", slice, "-p", "ActiveState", "--value")
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(out); s != "active" {
		t.Errorf("%s is %q, want active", slice, s)
	}
	deletePod(t, admin, pod.Name)
}

// burstablePod is a pod with requests and no limits (QoS Burstable). It
// mounts no service account token: no controller publishes the
// kube-root-ca.crt ConfigMap in this control plane.
func burstablePod(name string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           "registry.k8s.io/pause:3.10",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		},
	}
}

// waitPodRunning waits for the pod to be Running, reporting its phase and
// container states as they change.
func waitPodRunning(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			return p
		}
		state := string(p.Status.Phase) + " on " + p.Spec.NodeName
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				state += "; " + string(c.Type) + ": " + c.Message
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				state += "; " + cs.Name + " waiting: " + w.Reason + " " + w.Message
			}
		}
		if state != last {
			t.Logf("pod %s: %s", p.Name, state)
			last = state
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not Running after 3m: %s", p.Name, state)
		}
		time.Sleep(time.Second)
	}
}
