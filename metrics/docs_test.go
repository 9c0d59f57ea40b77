package metrics

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// opsFile is the operator's reference, whose Metrics section lists every
// metric the daemon exports.
const opsFile = "../docs/operating.md"

// a row of the metrics table: | `node_resized_x` | type | labels |
var docRow = regexp.MustCompile("(?m)^\\| `(node_resized_[a-z0-9_]+)` \\| ([a-z]+) \\|")

// docs/operating.md's metrics table names every metric of the daemon's
// own (node_resized_*) the registry holds, and nothing else: a metric
// added without its row, or a row left after its metric went, fails here.
func TestOperatingDocListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(opsFile))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Metrics\n")
	if start < 0 {
		t.Fatalf("%s has no Metrics section", opsFile)
	}
	doc = doc[start+1:]
	if end := strings.Index(doc[1:], "\n## "); end >= 0 {
		doc = doc[:end+1]
	}
	documented := map[string]bool{}
	for _, m := range docRow.FindAllStringSubmatch(doc, -1) {
		if documented[m[1]] {
			t.Errorf("%s lists %s twice", opsFile, m[1])
		}
		documented[m[1]] = true
	}
	if len(documented) < 10 {
		t.Fatalf("%s: only %d metrics read from the Metrics section: the table's format changed?", opsFile, len(documented))
	}
	known := registered(t)
	for _, name := range slices.Sorted(maps.Keys(known)) {
		if !strings.HasPrefix(name, namespace+"_") || documented[name] {
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if _, ok := known[base]; base != name && ok {
			continue // a histogram's series: its base is looked at itself
		}
		t.Errorf("%s is registered but not in %s's metrics table", name, opsFile)
	}
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := known[name]; !ok {
			t.Errorf("%s's metrics table lists %s, which the daemon does not register", opsFile, name)
		}
	}
}
