package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeDir is the DaemonSet's kustomize base, from this package.
const kustomizeDir = "../../packaging/kubernetes"

// buildKustomization builds a kustomization directory as kubectl apply -k
// would, with kustomize's own library.
func buildKustomization(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs
}

// applier applies objects with server-side apply, as kubectl apply
// --server-side does, with strict field validation: an unknown or
// duplicated field is an error, not a warning.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply applies u; dryRun asks the API server to validate and admit it
// (every admission plugin runs) without storing it.
func (a *applier) apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: "node-resized-e2e", Force: ptr.To(true), FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
}

// TestDaemonSetManifest: the kustomize base in packaging/kubernetes builds,
// and the real API server accepts every object in it (server-side dry run,
// strict field validation, every admission plugin, the priority class
// resolved), and the DaemonSet is what the packaging promises: on every
// node whatever its taints, system-node-critical, the node name from the
// downward API, the host paths it needs, the probes, requests and limits, and a
// root that is not privileged, with the capabilities its comments account
// for and no others.
func TestDaemonSetManifest(t *testing.T) {
	ctx := context.Background()
	objs := buildKustomization(t, kustomizeDir)
	a := newApplier(t, cl.AdminConfig())

	// The namespaced objects can only be admitted into a namespace that
	// exists, so the Namespace is applied for real first, as kubectl
	// apply -k does it in one go.
	var ds *appsv1.DaemonSet
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			if _, err := a.apply(ctx, u, false); err != nil {
				t.Fatalf("apply Namespace %s: %v", u.GetName(), err)
			}
		}
	}
	for _, u := range objs {
		got, err := a.apply(ctx, u, true)
		if err != nil {
			t.Errorf("the API server refuses %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			continue
		}
		t.Logf("admitted (dry run): %s %s/%s", got.GetKind(), got.GetNamespace(), got.GetName())
		if u.GetKind() == "DaemonSet" {
			ds = &appsv1.DaemonSet{}
			// Decode what the API server returned: defaults filled, fields
			// it does not serve dropped.
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet admitted from", kustomizeDir)
	}
	checkDaemonSet(t, ds)

	// An overlay points the image at another registry with kustomize's
	// images transformer.
	overlay := t.TempDir()
	abs, err := filepath.Abs(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, abs) // kustomize takes no absolute base
	if err != nil {
		t.Fatal(err)
	}
	kust := "resources:\n- " + base + "\nimages:\n- name: ghcr.io/node-resized/node-resized\n  newName: registry.example.com/node-resized\n  newTag: v1.2.3\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range buildKustomization(t, overlay) {
		if u.GetKind() != "DaemonSet" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if img, _, _ := unstructured.NestedString(cs[0].(map[string]any), "image"); img != "registry.example.com/node-resized:v1.2.3" {
			t.Errorf("an overlay's images entry gives image %q, want registry.example.com/node-resized:v1.2.3", img)
		}
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	ps := ds.Spec.Template.Spec
	if ps.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", ps.PriorityClassName)
	}
	if !slices.ContainsFunc(ps.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
	}) {
		t.Errorf("tolerations %+v: want one that tolerates every taint (operator Exists, no key, no effect)", ps.Tolerations)
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Errorf("hostNetwork %v, hostPID %v, hostIPC %v: none is needed", ps.HostNetwork, ps.HostPID, ps.HostIPC)
	}
	if ps.HostUsers != nil && !*ps.HostUsers {
		t.Error("hostUsers: false: a user namespace's network namespace receives no kernel uevents")
	}
	if ps.ServiceAccountName != "node-resized" {
		t.Errorf("serviceAccountName %q, want node-resized", ps.ServiceAccountName)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(ps.Containers))
	}
	c := ps.Containers[0]

	// Every flag the manifest gives is one the daemon takes: the built
	// binary parses them all (--version stops it after the parse).
	args := []string{}
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", "worker-1"))
	}
	if out, err := exec.Command(daemonBin, append(args, "--version")...).CombinedOutput(); err != nil {
		t.Errorf("node-resized %s: %v: %s", strings.Join(c.Args, " "), err, out)
	}

	// The node's name from the downward API.
	if !slices.Contains(c.Args, "--node-name=$(NODE_NAME)") {
		t.Errorf("args %q: want --node-name=$(NODE_NAME)", c.Args)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("env %+v: want NODE_NAME from spec.nodeName", c.Env)
	}
	if !slices.Contains(c.Args, "--evict-as-node") {
		t.Errorf("args %q: want --evict-as-node (the ServiceAccount may not evict; see rbac.yaml)", c.Args)
	}
	if !slices.Contains(c.Args, "--kubeconfig=") {
		t.Errorf("args %q: want --kubeconfig= (the in-cluster config)", c.Args)
	}

	// Host paths, each mounted, writable where the daemon writes.
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]corev1.VolumeMount{} // host path -> mount
	for _, m := range c.VolumeMounts {
		if p, ok := hostPaths[m.Name]; ok {
			mounts[p] = m
		}
	}
	for path, writable := range map[string]bool{
		"/sys/fs/cgroup": true, "/var/lib/kubelet": true,
		"/var/lib/node-resized": true, "/run/node-resized": true, "/run/dbus": false,
	} {
		m, ok := mounts[path]
		switch {
		case !ok:
			t.Errorf("host path %s is not mounted (host paths: %v)", path, hostPaths)
		case m.MountPath != path:
			t.Errorf("host path %s is mounted at %s; the daemon's defaults want it at the same path", path, m.MountPath)
		case writable && m.ReadOnly:
			t.Errorf("host path %s is read-only; the daemon writes there", path)
		}
	}
	if len(mounts) != 5 {
		t.Errorf("host paths mounted: %v, want exactly the five above (the runtime's own read-only /sys serves the reads)", hostPaths)
	}

	// Probes on the listener's /healthz and /readyz.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe %+v: want an HTTP GET of %s", p.name, p.probe, p.path)
		}
	}
	if !slices.Contains(c.Args, "--listen-address=:9477") || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9477 {
		t.Errorf("args %q, ports %+v: want --listen-address=:9477 and port 9477", c.Args, c.Ports)
	}

	// Memory bounded, generously above the idle footprint (about 26 MiB).
	if lim := c.Resources.Limits[corev1.ResourceMemory]; lim.Cmp(resource.MustParse("128Mi")) < 0 {
		t.Errorf("memory limit %v, want at least 128Mi", lim.String())
	}
	if req := c.Resources.Requests[corev1.ResourceMemory]; req.Cmp(resource.MustParse("26Mi")) < 0 {
		t.Errorf("memory request %v, below the idle footprint", req.String())
	}
	// A CPU limit that a hardware change cannot reach (a whole CPU), and
	// ephemeral storage bounded: what scanners ask for.
	if lim := c.Resources.Limits[corev1.ResourceCPU]; lim.Cmp(resource.MustParse("1")) < 0 {
		t.Errorf("cpu limit %v, want at least one CPU so that the quota never delays a clamp", lim.String())
	}
	for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if _, ok := rl[corev1.ResourceEphemeralStorage]; !ok {
			t.Errorf("resources %+v: want an ephemeral-storage request and limit", c.Resources)
		}
	}

	// Root, not privileged, only the capabilities accounted for.
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("runAsUser %v, want 0: the files written belong to the host's root", sc.RunAsUser)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities %+v: want drop [ALL]", sc.Capabilities)
	} else if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []corev1.Capability{"NET_ADMIN"}) {
		t.Errorf("capabilities added %v, want [NET_ADMIN]", add)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
}
