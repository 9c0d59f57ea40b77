package node

import (
	"strings"
	"testing"
)

// TestGuestSees: a path under a folder the guest mounts over is refused,
// with what to do; its neighbours are not.
func TestGuestSees(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/root/.cache/node-resized/node/bin", true},
		{"/var/tmp/cache/node/bin/kubelet", true},
		{"/tmpfoo/bin", true},
		{"/home/ci/run/kubelet", true},
		{"/tmp", false},
		{"/tmp/home/.cache/node-resized/node/bin", false},
		{"/run/user/0/kubelet", false},
		{"/dev/shm/kubelet", false},
		{"/tmp/../var/tmp/kubelet", true},
	} {
		err := guestSees(tc.path, "the kubelet", "move it")
		if (err == nil) != tc.ok {
			t.Errorf("guestSees(%q): %v, want ok %v", tc.path, err, tc.ok)
		}
		if err != nil && !strings.HasSuffix(err.Error(), ": move it") {
			t.Errorf("guestSees(%q): %v does not say what to do", tc.path, err)
		}
	}
}
