package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientGoOnlyThroughKube keeps the CLI thin: its API calls are in
// package kube, the only package that speaks client-go.
func TestClientGoOnlyThroughKube(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}} {{join .TestImports " "}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, "k8s.io/client-go") {
			t.Errorf("node-resizectl imports %s; API calls belong in package kube", imp)
		}
	}
}
