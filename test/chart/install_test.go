package chart

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// controlPlane starts the test control plane (etcd, kube-apiserver,
// kube-scheduler) with test/cluster's cluster-up, from the binaries that
// test/cluster/up -build-only made, and returns its admin kubeconfig.
func controlPlane(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NODE_RESIZED_CLUSTER_BIN")
	if bin == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(cache, "node-resized", "cluster", "bin")
	}
	for _, b := range []string{"cluster-up", "etcd", "kube-apiserver", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("the control plane's %s is not built in %s: run test/cluster/up -build-only first (make chart-test does): %v", b, bin, err)
		}
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "up.state")
	cmd := exec.Command(filepath.Join(bin, "cluster-up"), "-bin-dir", bin, "-skip-build", "-dir", filepath.Join(dir, "cp"), "-state-file", state)
	logf, err := os.Create(filepath.Join(dir, "cluster-up.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if b, err := os.ReadFile(state); err == nil {
			sc := bufio.NewScanner(strings.NewReader(string(b)))
			for sc.Scan() {
				if kc, ok := strings.CutPrefix(sc.Text(), "kubeconfig="); ok {
					return kc
				}
			}
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("cluster-up exited (%v):\n%s", err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("the control plane did not come up in 3 minutes:\n%s", out)
		}
	}
}

// helmConfig is what helm install -n ns would use: the kubeconfig, the
// namespace, releases stored as Secrets.
func helmConfig(t *testing.T, kubeconfig, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newInstall(cfg *action.Configuration, name, ns string) *action.Install {
	i := action.NewInstall(cfg)
	i.ReleaseName = name
	i.Namespace = ns
	i.CreateNamespace = true
	i.Timeout = 2 * time.Minute
	// helm install's default (no --wait): hooks only. The test control
	// plane runs no controller manager, so no DaemonSet controller would
	// ever report the DaemonSet ready.
	i.WaitStrategy = kube.HookOnlyStrategy
	return i
}

// TestInstall: the chart installs into the test control plane with Helm's
// Go SDK as helm install --create-namespace does (server-side apply, strict
// field validation, every admission plugin), after a server dry run; the
// DaemonSet the API server stores is the kustomize base's, as the API
// server defaults it; an upgrade changes the flags; an unknown field is
// refused, not dropped; and helm uninstall removes every object.
func TestInstall(t *testing.T) {
	kubeconfig := controlPlane(t)
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, kubeconfig, namespace)

	// helm install --dry-run=server: rendered against the live cluster's
	// capabilities, nothing stored.
	dry := newInstall(cfg, releaseName, namespace)
	dry.DryRunStrategy = action.DryRunServer
	rel, err := dry.RunWithContext(ctx, ch, nil)
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v", err)
	}
	if r := rel.(*releasev1.Release); !strings.Contains(r.Manifest, "kind: DaemonSet") {
		t.Fatalf("the server dry run rendered no DaemonSet:\n%s", r.Manifest)
	}
	if _, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, releaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run, Get DaemonSet: %v; want NotFound", err)
	}

	// helm install.
	inst := newInstall(cfg, releaseName, namespace)
	rel, err = inst.RunWithContext(ctx, ch, nil)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	if r := rel.(*releasev1.Release); r.Info.Status != "deployed" {
		t.Fatalf("release status %s: %s", r.Info.Status, r.Info.Description)
	}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the installed DaemonSet: %v", err)
	}
	if !slices.ContainsFunc(ds.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("the DaemonSet's managers %+v: want a server-side apply", ds.ManagedFields)
	}
	for _, get := range []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, releaseName+"-own-node", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, releaseName+"-own-node", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.NetworkingV1().NetworkPolicies(namespace).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Errorf("an installed object: %v", err)
		}
	}

	// The kustomize base's DaemonSet, as the same API server admits and
	// defaults it (a dry-run create in a namespace of its own), has the
	// same pod template as the chart's.
	kns := "kustomize-check"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var kds appsv1.DaemonSet
	for _, u := range kustomizeBuild(t, kustomizeDir) {
		if u.GetKind() == "DaemonSet" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &kds); err != nil {
				t.Fatal(err)
			}
		}
	}
	kds.Namespace = kns
	got, err := cs.AppsV1().DaemonSets(kns).Create(ctx, &kds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatalf("the kustomize base's DaemonSet, dry-run create: %v", err)
	}
	if !reflect.DeepEqual(got.Spec, ds.Spec) {
		var d []string
		diff(toMap(t, &ds.Spec), toMap(t, &got.Spec), ".spec", &d)
		t.Errorf("the installed DaemonSet's spec differs from the kustomize base's as the API server stores them: %v", d)
	}

	// helm upgrade --set kubeletRestart=never.
	up := action.NewUpgrade(cfg)
	up.Namespace = namespace
	up.Timeout = 2 * time.Minute
	up.WaitStrategy = kube.HookOnlyStrategy
	if _, err := up.RunWithContext(ctx, releaseName, ch, map[string]any{"kubeletRestart": "never"}); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	ds, err = cs.AppsV1().DaemonSets(namespace).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--kubelet-restart=never") {
		t.Errorf("after the upgrade, args %q: want --kubelet-restart=never", args)
	}

	// Strict field validation: a chart whose DaemonSet has a misspelled
	// field is refused by the API server, not installed without it.
	bad := copyChart(t)
	tpl := filepath.Join(bad, "templates", "daemonset.yaml")
	b, err := os.ReadFile(tpl)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "          imagePullPolicy:", "          imagePulPolicy: Always\n          imagePullPolicy:", 1)
	if s == string(b) {
		t.Fatal("found no imagePullPolicy in the chart's DaemonSet to misspell")
	}
	if err := os.WriteFile(tpl, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	badCh, err := loader.LoadDir(bad)
	if err != nil {
		t.Fatal(err)
	}
	badNS := "strict-check"
	badInst := newInstall(helmConfig(t, kubeconfig, badNS), "strict-check", badNS)
	badInst.Timeout = 30 * time.Second
	_, err = badInst.RunWithContext(ctx, badCh, map[string]any{"fullnameOverride": "strict-check", "admissionPolicy": map[string]any{"enabled": false}})
	if err == nil || !strings.Contains(err.Error(), "imagePulPolicy") {
		t.Errorf("helm install of a DaemonSet with an unknown field: %v; want the API server's strict decoding error naming imagePulPolicy", err)
	} else {
		t.Logf("refused: %v", err)
	}

	// helm uninstall.
	un := action.NewUninstall(cfg)
	un.Timeout = 2 * time.Minute
	un.WaitStrategy = kube.HookOnlyStrategy
	if _, err := un.Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var left []string
		if _, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, releaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "DaemonSet")
		}
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, releaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "ClusterRole")
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, releaseName+"-own-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "ValidatingAdmissionPolicy")
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after helm uninstall, still there: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// toMap converts a pointer to an API struct to its JSON map.
func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// copyChart copies the chart into a temporary directory.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "node-resized")
	err := filepath.WalkDir(chartDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return dst
}
