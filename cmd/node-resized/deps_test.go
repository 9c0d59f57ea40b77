package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedDependencies guards the daemon's size and layering as make
// build ships it (-tags grpcnotrace): no html/template (its reflection
// keeps every exported method alive, about 20 MB), no gRPC tracing, and
// client-go reached only through kube/ and the packages below it.
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
		if strings.HasSuffix(pkg, "/kube") || strings.Contains(pkg, "/kube/") || strings.Contains(pkg, "/cmd/") {
			continue
		}
		if strings.Contains(imports, "k8s.io/client-go") {
			t.Errorf("%s imports client-go, which lives only in kube/ and below", pkg)
		}
	}
}

// TestNoTypedClientset keeps client-go's typed clientset out of both
// binaries: the scheme it registers (every built-in API group) costs
// the daemon about 8 MiB of resident memory at start, before it does
// anything. Package kube speaks to the API server through the dynamic
// client and writes its events itself.
func TestNoTypedClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", ".", "../node-resizectl").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		switch d {
		// Every typed client imports the scheme.
		case "k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme",
			"k8s.io/client-go/tools/events", "k8s.io/client-go/tools/record":
			t.Errorf("node-resized or node-resizectl links %s", d)
		}
	}
}
