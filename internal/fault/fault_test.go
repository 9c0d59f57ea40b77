package fault

import "testing"

func TestOffByDefault(t *testing.T) {
	t.Setenv("NODE_RESIZED_FAULT", "x=on")
	t.Setenv("NODE_RESIZED_FAULT_DIR", t.TempDir())
	if Enabled {
		if !Active("x") || Active("x") {
			t.Error("a fault set acts exactly once")
		}
		if Active("y") {
			t.Error("a fault not set is not active")
		}
		return
	}
	if Active("x") {
		t.Error("a build without faultinject injects a fault")
	}
	Point("x")
}
