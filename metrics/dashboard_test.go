package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard the packaging ships beside the
// daemon.
const dashboardFile = "../packaging/grafana/node-resized-dashboard.json"

// panel is the part of a Grafana panel the test reads.
type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

var (
	// PromQL's pieces the test takes apart: string literals, range and
	// subquery brackets, label lists of grouping and matching modifiers,
	// selectors' matchers, and identifiers (metric names, functions,
	// keywords).
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	legendLabel  = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelValues  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
	// labels the scrape adds to every series
	scrapeLabels = []string{"instance", "job"}
)

// exprUses is what one PromQL expression names: each metric with the
// label names its matchers use, and the label names its grouping and
// matching modifiers use.
type exprUses struct {
	metrics  map[string][]string
	grouping []string
}

// parseExpr takes a PromQL expression apart, far enough for the
// dashboard's expressions: a selector is a metric name with optional
// matchers, a function is an identifier followed by "(".
func parseExpr(expr string) exprUses {
	u := exprUses{metrics: map[string][]string{}}
	// Matchers first, with their selector's name: name{a="x",b=~"y"}.
	sel := promSelector
	rest := sel.ReplaceAllStringFunc(expr, func(m string) string {
		p := sel.FindStringSubmatch(m)
		var labels []string
		for _, mm := range matcher.FindAllStringSubmatch(promString.ReplaceAllString(p[2], `""`), -1) {
			labels = append(labels, mm[1])
		}
		name := p[1]
		if name == "" { // {__name__="x"} is not used here
			name = "{}"
		}
		u.metrics[name] = append(u.metrics[name], labels...)
		return " "
	})
	rest = promString.ReplaceAllString(rest, " ")
	rest = promRange.ReplaceAllString(rest, " ")
	rest = promGrouping.ReplaceAllStringFunc(rest, func(m string) string {
		for _, l := range strings.Split(promGrouping.FindStringSubmatch(m)[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				u.grouping = append(u.grouping, l)
			}
		}
		return " "
	})
	for _, loc := range promIdent.FindAllStringIndex(rest, -1) {
		id := rest[loc[0]:loc[1]]
		if loc[0] > 0 && (rest[loc[0]-1] >= '0' && rest[loc[0]-1] <= '9' || rest[loc[0]-1] == '.') {
			continue // the exponent or unit of a number: 1e3
		}
		if strings.HasPrefix(strings.TrimSpace(rest[loc[1]:]), "(") || slices.Contains(promKeywords, strings.ToLower(id)) {
			continue // a function or an aggregation
		}
		if _, ok := u.metrics[id]; !ok {
			u.metrics[id] = nil
		}
	}
	return u
}

func walkPanels(ps []panel, f func(panel)) {
	for _, p := range ps {
		f(p)
		walkPanels(p.Panels, f)
	}
}

// Every panel of the dashboard names metrics and labels the daemon
// registers, so a renamed metric or label breaks this test, not the
// dashboard in production; and the dashboard shows what an operator
// watches.
func TestDashboardUsesRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has no title or uid")
	}
	known := registered(t)
	used := map[string]bool{}
	check := func(where, expr, legend string) {
		u := parseExpr(expr)
		if len(u.metrics) == 0 {
			t.Errorf("%s: expr %q names no metric", where, expr)
		}
		carried := slices.Clone(scrapeLabels)
		for name, matchers := range u.metrics {
			labels, ok := known[name]
			if !ok {
				t.Errorf("%s: expr %q names %s, which the daemon does not register", where, expr, name)
				continue
			}
			used[name] = true
			carried = append(carried, labels...)
			for _, l := range matchers {
				if !slices.Contains(labels, l) && !slices.Contains(scrapeLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %v)", where, name, l, labels)
				}
			}
		}
		for _, l := range u.grouping {
			if !slices.Contains(carried, l) {
				t.Errorf("%s: expr %q groups by %q, which none of its metrics has", where, expr, l)
			}
		}
		for _, l := range legendLabel.FindAllStringSubmatch(legend, -1) {
			if !slices.Contains(carried, l[1]) {
				t.Errorf("%s: the legend %q uses %q, which none of its metrics has", where, legend, l[1])
			}
		}
	}
	targets := 0
	walkPanels(d.Panels, func(p panel) {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			targets++
			check("panel "+p.Title, tg.Expr, tg.LegendFormat)
		}
	})
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: cannot read %q", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1]+m[2], "{{"+m[3]+"}}")
	}
	if targets < 10 {
		t.Fatalf("%s: only %d queries", dashboardFile, targets)
	}
	// What the dashboard is for: capacity and allocatable over time,
	// changes and their causes, detection and clamp latency, the
	// kubelet's staleness and restarts, lost events, the condition, and
	// what a planned release holds offline and may be unplugged.
	for _, want := range []string{
		"node_resized_physical_capacity", "node_resized_target_capacity", "node_resized_allocatable",
		"node_resized_resize_requests_total", "node_resized_model_changes_total",
		"node_resized_detection_latency_seconds_bucket", "node_resized_clamp_latency_seconds_bucket",
		"node_resized_kubelet_stale", "node_resized_kubelet_restarts_total",
		"node_resized_uevents_dropped_total", "node_resized_capacity_condition",
		"node_resized_released_cpus", "node_resized_released_memory_bytes", "node_resized_memory_device_safe_to_unplug",
	} {
		if !used[want] {
			t.Errorf("no panel of %s shows %s", dashboardFile, want)
		}
	}
}

// parseExpr finds what a test of the dashboard must see, so that a
// broken parser cannot pass every expression.
func TestParseExpr(t *testing.T) {
	u := parseExpr(`histogram_quantile(0.99, sum by (le, instance) (rate(node_resized_x_bucket{job=~"$job",reason!="a"}[5m]))) / on (instance) group_left (version) node_resized_build_info * 1e3 > bool 0`)
	want := map[string][]string{"node_resized_x_bucket": {"job", "reason"}, "node_resized_build_info": nil}
	if len(u.metrics) != len(want) {
		t.Fatalf("metrics %v, want %v", u.metrics, want)
	}
	for name, labels := range want {
		if got, ok := u.metrics[name]; !ok || !slices.Equal(got, labels) {
			t.Errorf("metric %s: labels %v (present %v), want %v", name, got, ok, labels)
		}
	}
	if !slices.Equal(u.grouping, []string{"le", "instance", "instance", "version"}) {
		t.Errorf("grouping %v", u.grouping)
	}
}
