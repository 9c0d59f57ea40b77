package chart

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// find returns the rendered object of a kind, decoded into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind string, out any) bool {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
				t.Fatalf("decode %s: %v", kind, err)
			}
			return true
		}
	}
	return false
}

func daemonSet(t *testing.T, vals map[string]any) (*appsv1.DaemonSet, []*unstructured.Unstructured) {
	t.Helper()
	objs := mustRender(t, vals)
	ds := &appsv1.DaemonSet{}
	if !find(t, objs, "DaemonSet", ds) {
		t.Fatal("no DaemonSet rendered")
	}
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers", n)
	}
	return ds, objs
}

var (
	daemonOnce sync.Once
	daemonPath string
	daemonErr  error
)

// daemon builds node-resized from the root module, once.
func daemon(t *testing.T) string {
	t.Helper()
	daemonOnce.Do(func() {
		dir, err := os.MkdirTemp("", "node-resized-chart-")
		if err != nil {
			daemonErr = err
			return
		}
		daemonPath = filepath.Join(dir, "node-resized")
		cmd := exec.Command("go", "build", "-o", daemonPath, "./cmd/node-resized")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			daemonErr = err
			t.Logf("%s", out)
		}
	})
	if daemonErr != nil {
		t.Fatalf("build node-resized: %v", daemonErr)
	}
	return daemonPath
}

// checkArgs: the daemon itself parses every flag the DaemonSet gives it
// (--version stops it after the parse).
func checkArgs(t *testing.T, c corev1.Container) {
	t.Helper()
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", "worker-1"))
	}
	if out, err := exec.Command(daemon(t), append(args, "--version")...).CombinedOutput(); err != nil {
		t.Errorf("node-resized %s: %v: %s", strings.Join(c.Args, " "), err, out)
	}
}

func hostPaths(ps corev1.PodSpec) map[string]string {
	m := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			m[v.HostPath.Path] = v.Name
		}
	}
	return m
}

// TestValues: each value changes what it says, and nothing else breaks:
// every rendering's flags parse in the daemon.
func TestValues(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		ds, objs := daemonSet(t, nil)
		c := ds.Spec.Template.Spec.Containers[0]
		checkArgs(t, c)
		if !strings.HasPrefix(c.Image, imageName+":") {
			t.Errorf("image %q, want %s (TestImageIsTheVersion checks the tag)", c.Image, imageName)
		}
		if _, ok := hostPaths(ds.Spec.Template.Spec)["/sys"]; ok {
			t.Error("the host's /sys is mounted without autoOnline")
		}
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--kubelet-restart") }) {
			t.Errorf("args %q: the default restart policy needs no flag", c.Args)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			if _, ok := c.Resources.Requests[r]; !ok {
				t.Errorf("no %s request", r)
			}
			if _, ok := c.Resources.Limits[r]; !ok {
				t.Errorf("no %s limit", r)
			}
		}
		role := &rbacv1.ClusterRole{}
		find(t, objs, "ClusterRole", role)
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "topology.node.k8s.io") {
				t.Error("the NodeResourceTopology rule without publishTopology")
			}
		}
	})
	t.Run("image", func(t *testing.T) {
		ds, _ := daemonSet(t, map[string]any{"image": map[string]any{"repository": "registry.example.com/node-resized", "tag": "v1.2.3", "pullPolicy": "Always"}})
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != "registry.example.com/node-resized:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("image %q, pull policy %q", c.Image, c.ImagePullPolicy)
		}
		digest := "sha256:" + strings.Repeat("ab", 32)
		ds, _ = daemonSet(t, map[string]any{"image": map[string]any{"repository": "registry.example.com/node-resized", "tag": "v1.2.3", "digest": digest, "pullPolicy": "IfNotPresent"}})
		if c := ds.Spec.Template.Spec.Containers[0]; c.Image != "registry.example.com/node-resized@"+digest {
			t.Errorf("with a digest, image %q", c.Image)
		}
	})
	t.Run("tolerations, node selector, affinity, priority", func(t *testing.T) {
		tol := []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}}
		ds, _ := daemonSet(t, map[string]any{
			"tolerations":       tol,
			"nodeSelector":      map[string]any{"node-resized.io/enabled": "true"},
			"priorityClassName": "",
			"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
				"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}}},
			}}},
		})
		ps := ds.Spec.Template.Spec
		if len(ps.Tolerations) != 1 || ps.Tolerations[0].Key != "dedicated" || ps.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("tolerations %+v", ps.Tolerations)
		}
		// Helm merges maps: the default kubernetes.io/os stays unless set
		// to null.
		if len(ps.NodeSelector) != 2 || ps.NodeSelector["node-resized.io/enabled"] != "true" || ps.NodeSelector["kubernetes.io/os"] != "linux" {
			t.Errorf("node selector %v", ps.NodeSelector)
		}
		if ps.Affinity == nil || ps.Affinity.NodeAffinity == nil {
			t.Errorf("affinity %+v", ps.Affinity)
		}
		if ps.PriorityClassName != "" {
			t.Errorf("priorityClassName %q, want none", ps.PriorityClassName)
		}
	})
	t.Run("resources", func(t *testing.T) {
		ds, _ := daemonSet(t, map[string]any{"resources": map[string]any{
			"requests": map[string]any{"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "32Mi"},
			"limits":   map[string]any{"cpu": "2", "memory": "256Mi", "ephemeral-storage": "256Mi"},
		}})
		r := ds.Spec.Template.Spec.Containers[0].Resources
		if q := r.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("256Mi")) != 0 {
			t.Errorf("memory limit %s", q.String())
		}
		if q := r.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("50m")) != 0 {
			t.Errorf("cpu request %s", q.String())
		}
	})
	t.Run("kubeletRestart=never", func(t *testing.T) {
		ds, _ := daemonSet(t, map[string]any{"kubeletRestart": "never", "capabilities": []any{"NET_ADMIN"}})
		c := ds.Spec.Template.Spec.Containers[0]
		checkArgs(t, c)
		if !slices.Contains(c.Args, "--kubelet-restart=never") {
			t.Errorf("args %q: want --kubelet-restart=never", c.Args)
		}
		if add := c.SecurityContext.Capabilities.Add; !slices.Equal(add, []corev1.Capability{"NET_ADMIN"}) {
			t.Errorf("capabilities added %v, want [NET_ADMIN]", add)
		}
	})
	t.Run("autoOnline", func(t *testing.T) {
		ds, _ := daemonSet(t, map[string]any{"autoOnline": true})
		ps := ds.Spec.Template.Spec
		c := ps.Containers[0]
		checkArgs(t, c)
		if !slices.Contains(c.Args, "--auto-online") {
			t.Errorf("args %q: want --auto-online", c.Args)
		}
		name, ok := hostPaths(ps)["/sys"]
		if !ok {
			t.Fatal("autoOnline without the host's /sys")
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == name && m.MountPath == "/sys" && !m.ReadOnly
		}) {
			t.Errorf("mounts %+v: want the host's /sys writable at /sys", c.VolumeMounts)
		}
		if p := c.SecurityContext.AppArmorProfile; p == nil || p.Type != corev1.AppArmorProfileTypeUnconfined {
			t.Errorf("appArmorProfile %+v, want Unconfined", p)
		}
	})
	t.Run("publishTopology, taintWhileStale, logLevel, extraArgs", func(t *testing.T) {
		ds, objs := daemonSet(t, map[string]any{"publishTopology": true, "taintWhileStale": true, "logLevel": "debug", "extraArgs": []any{"--evict=false"}})
		c := ds.Spec.Template.Spec.Containers[0]
		checkArgs(t, c)
		for _, a := range []string{"--publish-topology", "--taint-while-stale", "--log-level=debug", "--evict=false"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args %q: want %s", c.Args, a)
			}
		}
		role := &rbacv1.ClusterRole{}
		find(t, objs, "ClusterRole", role)
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, "topology.node.k8s.io") && slices.Contains(r.Resources, "noderesourcetopologies") &&
				slices.Contains(r.Verbs, "patch") && slices.Contains(r.Verbs, "delete")
		}) {
			t.Errorf("rules %+v: want patch and delete of noderesourcetopologies", role.Rules)
		}
	})
	t.Run("names", func(t *testing.T) {
		ds, objs := daemonSet(t, map[string]any{"fullnameOverride": "resized", "serviceAccount": map[string]any{"name": "resized-sa"}})
		if ds.Name != "resized" || ds.Spec.Template.Spec.ServiceAccountName != "resized-sa" {
			t.Errorf("DaemonSet %s, service account %s", ds.Name, ds.Spec.Template.Spec.ServiceAccountName)
		}
		// The admission policy matches the account it is given.
		for _, u := range objs {
			if u.GetKind() != "ValidatingAdmissionPolicy" {
				continue
			}
			data, _ := json.Marshal(u.Object)
			if !strings.Contains(string(data), `:resized-sa$`) {
				t.Errorf("the admission policy does not match the service account resized-sa: %s", data)
			}
		}
	})
	t.Run("networkPolicy and admissionPolicy off", func(t *testing.T) {
		objs := mustRender(t, map[string]any{"networkPolicy": map[string]any{"enabled": false}, "admissionPolicy": map[string]any{"enabled": false}})
		for _, u := range objs {
			switch u.GetKind() {
			case "NetworkPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				t.Errorf("%s rendered although turned off", u.GetKind())
			}
		}
	})
}
