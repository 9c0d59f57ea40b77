package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeCommands checks that README.md names every command of
// node-resizectl --help, and no command it does not have: each inline
// code span or code line that starts with node-resizectl names commands,
// several of them when they are separated by " | ".
func TestReadmeCommands(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("--help: exit %d: %s", code, errOut.String())
	}
	_, after, ok := strings.Cut(out.String(), "\nCommands:\n")
	if !ok {
		t.Fatalf("no Commands: section in --help:\n%s", out.String())
	}
	section, _, _ := strings.Cut(after, "\n\n")
	have := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			have[f[0]] = true
		}
	}
	if len(have) < 5 {
		t.Fatalf("read only %v from --help; the help format changed?", slices.Sorted(maps.Keys(have)))
	}

	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// A code span, or a line of a code block, that starts with the CLI.
	use := regexp.MustCompile("(?m)(?:`|^)(?:bin/)?node-resizectl ([^`\n]*)")
	named := map[string]bool{}
	for _, m := range use.FindAllStringSubmatch(string(b), -1) {
		for _, alt := range strings.Split(m[1], " | ") {
			f := strings.Fields(alt)
			if len(f) == 0 || strings.HasPrefix(f[0], "-") || strings.HasPrefix(f[0], "[") {
				continue // global flags
			}
			named[f[0]] = true
			if !have[f[0]] {
				t.Errorf("README.md names `node-resizectl %s`, but node-resizectl has no command %q", alt, f[0])
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(have)) {
		if !named[c] {
			t.Errorf("README.md does not name node-resizectl's command %q", c)
		}
	}
}
