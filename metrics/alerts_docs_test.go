package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

var (
	// a rule of the alerts file: - alert: NodeResizedX
	ruleAlert = regexp.MustCompile(`(?m)^\s*- alert: (NodeResized[A-Za-z]+)\s*$`)
	// a row of an alert table: | `NodeResizedX` | ...
	docAlert = regexp.MustCompile("(?m)^\\| `(NodeResized[A-Za-z]+)` \\|")
)

// The alert tables of README.md and docs/operating.md list exactly the
// alerts the rules file ships, in its order: an alert added without its
// row, or a row left after its alert went, fails here.
func TestAlertTablesListEveryAlert(t *testing.T) {
	rules, err := os.ReadFile(filepath.FromSlash(alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range ruleAlert.FindAllStringSubmatch(string(rules), -1) {
		want = append(want, m[1])
	}
	if len(want) < 5 {
		t.Fatalf("%s: only %d alerts read: its format changed?", alertsFile, len(want))
	}
	for _, doc := range []string{"../README.md", opsFile} {
		b, err := os.ReadFile(filepath.FromSlash(doc))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range docAlert.FindAllStringSubmatch(string(b), -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's alert table lists %v; the rules file ships %v", doc, got, want)
		}
	}
}
