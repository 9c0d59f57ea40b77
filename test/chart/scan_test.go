package chart

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kubeScore is the scanner, at a pinned version. It is run with go run
// rather than linked: its module wants an older k8s.io/api than Helm's.
const kubeScore = "github.com/zegl/kube-score/cmd/kube-score@v1.20.0"

// score runs kube-score over objects and returns its CRITICAL and WARNING
// lines. The deliberate exceptions are annotated on the pod template
// (kube-score/ignore), with their reasons beside them.
func score(t *testing.T, objs []*unstructured.Unstructured) (findings []string, ok int) {
	t.Helper()
	cmd := exec.Command("go", "run", kubeScore, "score", "--output-format", "ci", "--kubernetes-version", "v1.37", writeManifests(t, objs))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "[CRITICAL]"), strings.HasPrefix(line, "[WARNING]"):
			findings = append(findings, line)
		case strings.HasPrefix(line, "[OK]"):
			ok++
		}
	}
	if ok == 0 {
		t.Fatalf("kube-score printed no result (%v): %s%s", err, stdout.String(), stderr.String())
	}
	return findings, ok
}

// TestKubeScore: kube-score finds nothing critical and warns of nothing in
// the kustomize base or in the chart, with its defaults or with every
// optional part on.
func TestKubeScore(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs func(t *testing.T) []*unstructured.Unstructured
	}{
		{"kustomize base", func(t *testing.T) []*unstructured.Unstructured { return kustomizeBuild(t, kustomizeDir) }},
		{"chart defaults", func(t *testing.T) []*unstructured.Unstructured { return mustRender(t, nil) }},
		{"chart with everything on", func(t *testing.T) []*unstructured.Unstructured {
			return mustRender(t, map[string]any{"namespace": map[string]any{"create": true}, "autoOnline": true, "publishTopology": true, "taintWhileStale": true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			findings, ok := score(t, tc.objs(t))
			for _, f := range findings {
				t.Error(f)
			}
			t.Logf("kube-score: %d checks OK, %d findings", ok, len(findings))
		})
	}
}
