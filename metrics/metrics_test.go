package metrics

import (
	"runtime"
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
