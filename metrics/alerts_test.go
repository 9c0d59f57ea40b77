package metrics

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	descConst  = regexp.MustCompile(`constLabels: \{(.*)\}, variableLabels: `)
	constName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	// a metric of the daemon's in an expression, with its matchers
	exprMetric = regexp.MustCompile(`\b(node_resized_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	templLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// registered walks the daemon's registry, as the daemon builds it, and
// returns each metric's name and labels (variable and constant). A
// description does not say which metrics are histograms, so every name
// also answers to the _bucket, _sum and _count of a histogram's series.
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
		if c := descConst.FindStringSubmatch(s); c != nil {
			for _, x := range constName.FindAllStringSubmatch(c[1], -1) {
				labels = append(labels, x[1])
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

// alertsTestFile is promtool's unit tests of alertsFile (make rules-test).
const alertsTestFile = "../packaging/prometheus/node-resized-alerts_test.yaml"

var (
	// a series selector of promtool's input_series: name{label="value",...}
	seriesSel   = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$`)
	seriesLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)
	// an equality or regex matcher's values: label="v" or label=~"a|b"
	valueMatcher = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*=~?\s*"([^"]*)"`)
)

// fresh gathers a registry as the daemon builds it, before any event: each
// series as name{label="value",...} (labels sorted) and its value.
func fresh(t *testing.T) map[string]float64 {
	t.Helper()
	m := New()
	m.RegisterBuildInfo("test")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.Metric {
			var labels []string
			for _, l := range s.Label {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			slices.Sort(labels)
			v := s.GetGauge().GetValue()
			if s.Counter != nil {
				v = s.GetCounter().GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// seriesKey is a series selector's key in fresh's map, without the labels
// the scrape adds.
func seriesKey(name string, labels map[string]string) string {
	var l []string
	for k, v := range labels {
		if k != "instance" && k != "job" {
			l = append(l, k+"="+strconv.Quote(v))
		}
	}
	slices.Sort(l)
	return name + "{" + strings.Join(l, ",") + "}"
}

// The daemon exposes the counters the alerts read at 0 from its start,
// with every label value an alert names: NodeResizedUeventsLost and
// NodeResizedCgroupUpdateFailing take increase() of them, which misses the
// first event of a series that appears only at its first Inc().
func TestAlertedCountersExistAtZero(t *testing.T) {
	got := fresh(t)
	for _, want := range []string{
		`node_resized_uevents_dropped_total{reason="overflow"}`,
		`node_resized_uevents_dropped_total{reason="queue_full"}`,
		`node_resized_resize_errors_total{subsystem="cgroup_update"}`,
	} {
		if v, ok := got[want]; !ok || v != 0 {
			t.Errorf("a fresh registry has no %s at 0 (present %v, value %v)", want, ok, v)
		}
	}
	b, err := os.ReadFile(filepath.FromSlash(alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			for _, u := range exprMetric.FindAllStringSubmatch(r.Expr, -1) {
				if !strings.HasSuffix(u[1], "_total") {
					continue // a gauge: == 1 sees its first sample
				}
				for _, mm := range valueMatcher.FindAllStringSubmatch(u[2], -1) {
					for _, v := range strings.Split(mm[2], "|") {
						key := seriesKey(u[1], map[string]string{mm[1]: v})
						if val, ok := got[key]; !ok || val != 0 {
							t.Errorf("%s reads %s, which a fresh registry does not expose at 0", r.Alert, key)
						}
					}
				}
			}
		}
	}
}

// promtool's tests model the daemon's series from its start: each counter
// they give a value at the first sample is one the daemon exposes then,
// at that value. So the tests cannot pass on series the daemon does not
// export.
func TestAlertTestInputsMatchRegistry(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(alertsTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			Name        string `json:"name"`
			InputSeries []struct {
				Series string `json:"series"`
				Values string `json:"values"`
			} `json:"input_series"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsTestFile, err)
	}
	known := registered(t)
	got := fresh(t)
	n := 0
	for _, tc := range f.Tests {
		for _, in := range tc.InputSeries {
			sel := seriesSel.FindStringSubmatch(in.Series)
			if sel == nil {
				t.Errorf("%s: cannot read the series %q", tc.Name, in.Series)
				continue
			}
			labels := map[string]string{}
			for _, l := range seriesLabel.FindAllStringSubmatch(sel[2], -1) {
				labels[l[1]] = l[2]
			}
			names, ok := known[sel[1]]
			if !ok {
				t.Errorf("%s: input series %s, which the daemon does not register", tc.Name, sel[1])
				continue
			}
			for l := range labels {
				if l != "instance" && l != "job" && !slices.Contains(names, l) {
					t.Errorf("%s: input series %s has a label %q the daemon does not give it", tc.Name, sel[1], l)
				}
			}
			first := strings.Fields(in.Values)
			if !strings.HasSuffix(sel[1], "_total") || len(first) == 0 || strings.HasPrefix(first[0], "_") {
				continue
			}
			start, err := strconv.ParseFloat(regexp.MustCompile(`^[0-9.e-]+`).FindString(first[0]), 64)
			if err != nil {
				t.Errorf("%s: cannot read the first value of %s: %q", tc.Name, in.Series, in.Values)
				continue
			}
			if start != 0 {
				continue // a daemon that has run for a while
			}
			n++
			key := seriesKey(sel[1], labels)
			if v, ok := got[key]; !ok || v != 0 {
				t.Errorf("%s: the input series %s is 0 from the start, but a fresh registry does not expose it at 0", tc.Name, key)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no counter input series at 0 from the start", alertsTestFile)
	}
}
