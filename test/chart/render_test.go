package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	// chartDir is the chart, from this package.
	chartDir = "../../packaging/helm/node-resized"
	// kustomizeDir is the kustomize base the chart's defaults must render.
	kustomizeDir = "../../packaging/kubernetes"
	// releaseName and namespace are the kustomize base's names.
	releaseName = "node-resized"
	namespace   = "node-resized"
	// kubeVersion is what helm template and lint assume of the cluster:
	// the test control plane's version.
	kubeVersion = "v1.37.2"
)

// helmLabels are the labels the chart adds to every object's metadata,
// beyond the kustomize base's: Helm's own bookkeeping.
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart"}

// render renders the chart as helm template does (no cluster), with vals
// over the chart's values.
func render(dir string, vals map[string]any) ([]*unstructured.Unstructured, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.Replace = true
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	install.KubeVersion = kv
	rel, err := install.Run(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("render %s: a release of type %T", dir, rel)
	}
	return decodeManifests(r.Manifest)
}

// decodeManifests splits a multi-document YAML stream into objects.
func decodeManifests(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func mustRender(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(chartDir, vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// kustomizeBuild builds a kustomization as kubectl apply -k would.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
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

func key(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// byKey indexes objects by kind, namespace and name, with Helm's labels
// taken off and the objects put through JSON, so that YAML's and
// kustomize's number types compare equal.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, u := range objs {
		u = u.DeepCopy()
		labels := u.GetLabels()
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			labels = nil
		}
		u.SetLabels(labels)
		data, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		k := key(u)
		if _, dup := out[k]; dup {
			t.Errorf("%s rendered twice", k)
		}
		out[k] = m
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// diff names the first paths where a and b differ.
func diff(a, b any, path string, out *[]string) {
	if len(*out) >= 10 {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for _, k := range keys(mergeKeys(am, bm)) {
			diff(am[k], bm[k], path+"."+k, out)
		}
		return
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		for i := range as {
			diff(as[i], bs[i], fmt.Sprintf("%s[%d]", path, i), out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		*out = append(*out, fmt.Sprintf("%s: chart %s, kustomize %s", path, ja, jb))
	}
}

func mergeKeys(a, b map[string]any) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// TestDefaultsRenderTheKustomizeBase: with its default values (and the
// Namespace turned on) the chart renders exactly the kustomize base's
// objects, field for field, but for Helm's own labels; with the defaults
// as they are, the same less the Namespace, which helm install
// --create-namespace makes.
func TestDefaultsRenderTheKustomizeBase(t *testing.T) {
	want := byKey(t, kustomizeBuild(t, kustomizeDir))
	for _, tc := range []struct {
		name   string
		vals   map[string]any
		skipNS bool
	}{
		{"namespace.create=true", map[string]any{"namespace": map[string]any{"create": true}}, false},
		{"defaults", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := byKey(t, mustRender(t, tc.vals))
			for _, k := range keys(want) {
				if tc.skipNS && strings.HasPrefix(k, "Namespace ") {
					if _, ok := got[k]; ok {
						t.Errorf("%s rendered with namespace.create false", k)
					}
					continue
				}
				g, ok := got[k]
				if !ok {
					t.Errorf("the kustomize base has %s, the chart does not", k)
					continue
				}
				var d []string
				diff(g, want[k], "", &d)
				for _, s := range d {
					t.Errorf("%s differs at %s", k, s)
				}
			}
			for _, k := range keys(got) {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, the kustomize base does not", k)
				}
			}
			t.Logf("%d objects compared", len(got))
		})
	}
}

// TestLint: helm lint, strict (a warning fails), with the defaults and
// with every optional part on.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": {
			"namespace": map[string]any{"create": true}, "autoOnline": true, "publishTopology": true,
			"taintWhileStale": true, "kubeletRestart": "never", "extraArgs": []any{"--evict=false"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = namespace
			kv, err := common.ParseKubeVersion(kubeVersion)
			if err != nil {
				t.Fatal(err)
			}
			l.KubeVersion = kv
			res := l.Run([]string{chartDir}, vals)
			for _, m := range res.Messages {
				t.Logf("lint: %s", m.Error())
			}
			if res.TotalChartsLinted != 1 || action.HasWarningsOrErrors(res) {
				t.Errorf("helm lint --strict: %d charts linted, errors %v", res.TotalChartsLinted, res.Errors)
			}
		})
	}
}

// TestValuesSchemaRefuses: values.schema.json turns mistyped values into
// an error at install time rather than a DaemonSet that fails on the node.
func TestValuesSchemaRefuses(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"kubeletRestart":        {"kubeletRestart": "sometimes"},
		"logLevel":              {"logLevel": "loud"},
		"unknown value":         {"imageTag": "v1"},
		"extraArgs not a flag":  {"extraArgs": []any{"eviction=false"}},
		"digest not sha256":     {"image": map[string]any{"repository": "r", "pullPolicy": "IfNotPresent", "digest": "latest"}},
		"pullPolicy misspelled": {"image": map[string]any{"repository": "r", "pullPolicy": "IfNotPresnt"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(chartDir, vals); err == nil {
				t.Errorf("values %v rendered; want the schema to refuse them", vals)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// writeManifests writes objects as one YAML stream for a command to read.
func writeManifests(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var buf bytes.Buffer
	for _, u := range objs {
		data, err := json.Marshal(u.Object) // JSON is YAML
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
		buf.WriteString("\n")
	}
	p := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
