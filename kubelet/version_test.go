package kubelet

import (
	"strings"
	"testing"
)

func TestVersionNote(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want string // in the note; "" for none
	}{
		{"", ""},
		{"v1.34.4", ""},
		{"v1.35.4", ""},
		{"v1.36.3", ""},
		{"v1.37.2", ""},
		{"v1.37.2-gke.100", ""},
		{"1.37", ""},
		{"v1.33.9", "older than"},
		{"v1.38.0-alpha.1+abc", "newer than"},
		{"v1.40.1", "newer than"},
		{"v2.0.0", "not a Kubernetes version"},
		{"v1.x", "not a Kubernetes version"},
		{"v1.3a", "not a Kubernetes version"},
		{"garbage", "not a Kubernetes version"},
	} {
		got := VersionNote(tc.v)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("VersionNote(%q) = %q, want one saying %q", tc.v, got, tc.want)
		}
		if got != "" && !strings.Contains(got, "v1.34 to v1.37") {
			t.Errorf("VersionNote(%q) = %q: does not name the known versions", tc.v, got)
		}
	}
}
