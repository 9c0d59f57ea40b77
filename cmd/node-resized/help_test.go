package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/api"
)

// The help's examples use the paths the daemon really uses: an example
// with the socket in /tmp would be copied into units.
func TestHelpExamplesUseTheRealSocket(t *testing.T) {
	sockets := regexp.MustCompile(`--socket (\S+)`).FindAllStringSubmatch(usageHead, -1)
	if len(sockets) == 0 {
		t.Fatal("the help has no --socket example")
	}
	for _, m := range sockets {
		if m[1] != api.DefaultSocket {
			t.Errorf("the help's example --socket %s, want the default %s", m[1], api.DefaultSocket)
		}
	}
	if !strings.Contains(usageHead, "SIGHUP") {
		t.Error("the help does not say what SIGHUP does")
	}
}
