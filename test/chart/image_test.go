package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// imageName is the DaemonSet's image, without its tag: the one make image
// builds (tools/cmd/image-pack).
const imageName = "ghcr.io/node-resized/node-resized"

// TestImageIsTheVersion: the chart's default image, the kustomize base's
// images: entry and its daemonset.yaml name the image make image builds
// (the Makefile's IMAGE), and its tag is the chart's appVersion, the
// version they belong to.
func TestImageIsTheVersion(t *testing.T) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	want := imageName + ":" + ch.Metadata.AppVersion

	ds, _ := daemonSet(t, nil)
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("the chart's default image %q, want %q", got, want)
	}

	var kust struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	decodeFile(t, filepath.Join(kustomizeDir, "kustomization.yaml"), &kust)
	if len(kust.Images) != 1 || kust.Images[0].Name != imageName || kust.Images[0].NewName != "" || kust.Images[0].NewTag != ch.Metadata.AppVersion {
		t.Errorf("kustomization.yaml's images: %+v, want one entry: name %s, newTag %s", kust.Images, imageName, ch.Metadata.AppVersion)
	}

	var raw map[string]any
	decodeFile(t, filepath.Join(kustomizeDir, "daemonset.yaml"), &raw)
	cs, _, _ := unstructured.NestedSlice(raw, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("daemonset.yaml: %d containers", len(cs))
	}
	if img, _, _ := unstructured.NestedString(cs[0].(map[string]any), "image"); img != want {
		t.Errorf("daemonset.yaml names %q, want %q", img, want)
	}

	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk); m == nil || string(m[1]) != imageName {
		t.Errorf("the Makefile's IMAGE: %q, want %s", m, imageName)
	}
}

func decodeFile(t *testing.T, p string, out any) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(out); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}
