package metrics

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// node_resized_build_info carries the daemon's version and the Go it was
// built with.
func TestBuildInfo(t *testing.T) {
	m := New()
	m.RegisterBuildInfo("v1.2.3-test")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "node_resized_build_info" {
			continue
		}
		if len(mf.Metric) != 1 || mf.Metric[0].GetGauge().GetValue() != 1 {
			t.Fatalf("build_info: %v, want one series of value 1", mf.Metric)
		}
		labels := map[string]string{}
		for _, l := range mf.Metric[0].Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != "v1.2.3-test" || labels["goversion"] != runtime.Version() {
			t.Errorf("build_info labels %v, want version v1.2.3-test and goversion %s", labels, runtime.Version())
		}
		return
	}
	t.Fatal("no node_resized_build_info")
}

var (
	// a label value the daemon's code passes to one of the two counters
	labelUse = regexp.MustCompile(`\.(UeventsDropped|ResizeErrors)\.WithLabelValues\("([^"]*)"\)`)
	// the uevent listener's drop reasons
	dropReason = regexp.MustCompile(`\bDrop[A-Za-z]+\s+DropReason\s*=\s*"([^"]*)"`)
)

// UeventDropReasons and ErrorSubsystems, the label values New exposes at
// 0, hold every value the daemon's code counts under: a value missing
// from them would again appear only at its first event.
func TestKnownLabelValuesCoverTheCode(t *testing.T) {
	uses := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "test" || d.Name() == "tools" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, u := range labelUse.FindAllStringSubmatch(string(b), -1) {
			uses[u[1]] = append(uses[u[1]], u[2])
		}
		if filepath.Base(filepath.Dir(path)) == "uevent" {
			for _, r := range dropReason.FindAllStringSubmatch(string(b), -1) {
				uses["UeventsDropped"] = append(uses["UeventsDropped"], r[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	known := map[string][]string{"UeventsDropped": UeventDropReasons, "ResizeErrors": ErrorSubsystems}
	for counter, want := range map[string][]string{
		"UeventsDropped": {"queue_full", "overflow", "seqnum_gap"},
		"ResizeErrors":   {"cgroup_update", "api_patch"},
	} {
		for _, w := range want {
			if !slices.Contains(uses[counter], w) {
				t.Fatalf("the scan of the code found no %s label %q (found %v): the scan is broken", counter, w, uses[counter])
			}
		}
	}
	for counter, values := range uses {
		for _, v := range values {
			if !slices.Contains(known[counter], v) {
				t.Errorf("the code counts %s under %q, which metrics does not list (so it is not exposed at 0 from the start)", counter, v)
			}
		}
	}
}
