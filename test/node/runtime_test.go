package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestRealRuntimePod boots the node on the real container runtime
// (containerd, runc and the CNI bridge, test/node/build-runtime) instead of
// the fake one, and runs a real container: the Node reports containerd as
// its runtime and becomes Ready; a busybox pod's container is a process in
// its own cgroup under the pod's slice, with an address of its own on the
// pod network, serving a page that the node fetches from that address;
// crictl lists it.
func TestRealRuntimePod(t *testing.T) {
	t.Parallel()
	const name = "node-rt"
	needKernel(t)
	needRuntime(t)
	c := startCluster(t, name)
	n := bootNode(t, c, Config{Name: name, Runtime: RuntimeContainerd, RuntimeDir: runtimeDir})
	t.Logf("boot: guest agent after %v, Node Ready after %v",
		n.AgentReadyTime().Round(time.Millisecond), n.ReadyTime().Round(time.Millisecond))
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
