//go:build linux

package cgroup

import (
	"testing"

	"github.com/opencontainers/cgroups/systemd"
)

// TestExpandSliceMatchesLibcontainer holds expandSlice to the function the
// kubelet itself calls.
func TestExpandSliceMatchesLibcontainer(t *testing.T) {
	for _, in := range []string{"-.slice", "kubepods.slice", "a-b-c.slice", "kubepods-burstable-pod0b1e6f7a_1111.slice",
		"", ".slice", "a--b.slice", "-a.slice", "a.scope", "a/b.slice", "a-.slice"} {
		want, werr := systemd.ExpandSlice(in)
		got, err := expandSlice(in)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("expandSlice(%q) = %q, %v; libcontainer says %q, %v", in, got, err, want, werr)
		}
	}
}
