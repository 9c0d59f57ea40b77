package kubelet

import (
	"fmt"
	"strconv"
	"strings"
)

// The kubelet minor versions whose checkpoint layouts node-resized knows
// and plans for (the CPU manager's v2, v3 and v4, the memory manager's v1,
// v2 and v3). A kubelet outside them gets a warning; a checkpoint in a
// layout no known version writes is never rewritten, whatever the version
// (checkpoint.ErrUnknownLayout).
const (
	OldestKnownMinor = 34
	NewestKnownMinor = 37
)

// KnownVersions names the range for messages: "v1.34 to v1.37".
var KnownVersions = fmt.Sprintf("v1.%d to v1.%d", OldestKnownMinor, NewestKnownMinor)

// VersionNote says what an operator should know of a kubelet reporting
// version v (status.nodeInfo.kubeletVersion, "v1.37.2"): empty within the
// known versions or when v is empty, otherwise why it is outside them.
func VersionNote(v string) string {
	if v == "" {
		return ""
	}
	minor, ok := parseMinor(v)
	switch {
	case !ok:
		return fmt.Sprintf("kubelet version %q is not a Kubernetes version node-resized can read; it knows the checkpoints of %s", v, KnownVersions)
	case minor < OldestKnownMinor:
		return fmt.Sprintf("kubelet %s is older than the versions whose checkpoints node-resized knows (%s)", v, KnownVersions)
	case minor > NewestKnownMinor:
		return fmt.Sprintf("kubelet %s is newer than the versions whose checkpoints node-resized knows (%s): "+
			"a checkpoint in a layout it does not know is never rewritten, and the kubelet is then not restarted", v, KnownVersions)
	}
	return ""
}

// parseMinor reads the minor version of "v1.37.2" (also "1.37",
// "v1.37.2-gke.100", "v1.38.0-alpha.1+abc"); ok is false for anything not
// a Kubernetes 1.x version.
func parseMinor(v string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(v, "v"), "1.")
	if !ok {
		return 0, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	if end == 0 || (end < len(rest) && rest[end] != '.' && rest[end] != '-' && rest[end] != '+') {
		return 0, false
	}
	n, err := strconv.Atoi(rest[:end])
	return n, err == nil
}
