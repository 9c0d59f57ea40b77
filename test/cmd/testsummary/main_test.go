package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun runs a real go test -json stream through run: a package with a
// passing test, a test whose subtest fails with t.Errorf in the middle of
// its logs, and one that fails with t.Fatalf.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a package's tests")
	}
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\n\ngo 1.22\n")
	write("x_test.go", `package x

import "testing"

func TestOK(t *testing.T) { t.Log("fine") }

func TestParent(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		t.Log("before")
		t.Errorf("the first error")
		for i := 0; i < 3; i++ {
			t.Logf("after %d", i)
		}
	})
	t.Run("ok", func(t *testing.T) {})
}

func TestFatal(t *testing.T) { t.Fatalf("the end") }
`)
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	stream, _ := cmd.Output()
	var out bytes.Buffer
	if code := run(bytes.NewReader(stream), &out, 3, 400); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	got := out.String()
	_, summary, ok := strings.Cut(got, "=== what each failed test said last")
	if !ok {
		t.Fatalf("no summary:\n%s", got)
	}
	for _, want := range []string{"--- FAIL: TestFatal\n", "the end", "--- FAIL: TestParent/sub\n", "after 2"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	for _, not := range []string{"--- FAIL: TestParent\n", "TestOK", "before"} {
		if strings.Contains(summary, not) {
			t.Errorf("the summary has %q:\n%s", not, summary)
		}
	}
	if !strings.Contains(got, "--- PASS: TestOK") || !strings.Contains(got, "the first error") {
		t.Errorf("the stream was not copied as go test -v prints it:\n%s", got)
	}
}

func TestRunStatus(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		want         int
	}{
		{"pass", `{"Action":"pass","Package":"p"}`, 0},
		{"package failed alone", `{"Action":"fail","Package":"p"}`, 1},
		{"no result", "build error\n", 1},
		{"empty", "", 1},
	} {
		var out bytes.Buffer
		if got := run(strings.NewReader(c.stream), &out, 8, 400); got != c.want {
			t.Errorf("%s: exit status %d, want %d:\n%s", c.name, got, c.want, out.String())
		}
	}
}
