package metrics

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// alertsFile is the example alerting rules the packaging ships beside the
// daemon.
const alertsFile = "../packaging/prometheus/node-resized-alerts.yaml"

// ruleFile is the part of Prometheus' rule file format the test reads.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	// a metric of the daemon's in an expression, with its matchers
	exprMetric = regexp.MustCompile(`\b(node_resized_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	templLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// registered walks the daemon's registry, as the daemon builds it, and
// returns each metric's name and variable labels. A description does not
// say which metrics are histograms, so every name also answers to the
// _bucket, _sum and _count of a histogram's series.
func registered(t *testing.T) map[string][]string {
	t.Helper()
	m := New()
	m.RegisterBuildInfo("test")
	ch := make(chan *prometheus.Desc)
	go func() {
		m.Registry.Describe(ch)
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		s := d.String()
		n := descName.FindStringSubmatch(s)
		l := descLabels.FindStringSubmatch(s)
		if n == nil || l == nil {
			t.Fatalf("cannot read the metric description %s", s)
		}
		var labels []string
		for _, x := range strings.Split(l[1], ",") {
			if x != "" {
				labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(x, "c("), ")"))
			}
		}
		out[n[1]] = labels
	}
	names := slices.Collect(maps.Keys(out))
	for _, name := range names {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if _, ok := out[name+suffix]; !ok {
				out[name+suffix] = append(slices.Clone(out[name]), "le")
			}
		}
	}
	if _, ok := out["node_resized_capacity_condition"]; !ok {
		t.Fatalf("the registry walk found no node_resized_capacity_condition: %v", out)
	}
	return out
}

// Every alert names metrics and labels the daemon exports, so a renamed
// metric or label breaks this test, not the alert in production; and
// every alert says what it means and what to do.
func TestAlertRulesUseRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	known := registered(t)
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, r)
				continue
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if r.Labels["severity"] == "" || len(r.Annotations["summary"]) < 20 || len(r.Annotations["description"]) < 80 {
				t.Errorf("%s: want a severity, a summary and a description that says what to do", r.Alert)
			}
			uses := exprMetric.FindAllStringSubmatch(r.Expr, -1)
			if len(uses) == 0 {
				t.Errorf("%s: expr %q names no node_resized_ metric", r.Alert, r.Expr)
			}
			var exprLabels []string
			for _, u := range uses {
				labels, ok := known[u[1]]
				if !ok {
					t.Errorf("%s: expr names %s, which the daemon does not register", r.Alert, u[1])
					continue
				}
				exprLabels = append(exprLabels, labels...)
				for _, mm := range matcher.FindAllStringSubmatch(u[2], -1) {
					if !slices.Contains(labels, mm[1]) {
						t.Errorf("%s: %s has no label %q (it has %v)", r.Alert, u[1], mm[1], labels)
					}
				}
			}
			for _, a := range r.Annotations {
				for _, l := range templLabel.FindAllStringSubmatch(a, -1) {
					if l[1] != "instance" && l[1] != "job" && !slices.Contains(exprLabels, l[1]) {
						t.Errorf("%s: an annotation uses $labels.%s, which its expr's metrics do not carry", r.Alert, l[1])
					}
				}
			}
		}
	}
	for _, want := range []string{"NodeResizedEmergencyReduced", "NodeResizedKubeletStale", "NodeResizedUeventsLost"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %s", want, alertsFile)
		}
	}
}
