package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedDependencies guards the daemon's size and layering as make
// build ships it (-tags grpcnotrace): no html/template (its reflection
// keeps every exported method alive, about 20 MB), no gRPC tracing, and
// client-go reached only through kube/.
func TestShippedDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		switch d {
		case "html/template", "golang.org/x/net/trace":
			t.Errorf("the daemon links %s", d)
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/node-resized/node-resized/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if strings.HasSuffix(pkg, "/kube") || strings.Contains(pkg, "/cmd/") {
			continue
		}
		if strings.Contains(imports, "k8s.io/client-go") {
			t.Errorf("%s imports client-go, which lives only in kube/", pkg)
		}
	}
}
