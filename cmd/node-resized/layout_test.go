package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLayoutMatchesTheTree holds docs/layout.md to the tree: every package
// of the root module (a directory with a non-test .go file, outside the
// test and tools modules and testdata) has a row of its own, and every
// row names a directory that exists.
func TestLayoutMatchesTheTree(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)`")
	rows := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		p := strings.TrimSuffix(m[1], "/")
		if rows[p] {
			t.Errorf("docs/layout.md has two rows for %s", p)
		}
		rows[p] = true
		if fi, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p))); err != nil || !fi.IsDir() {
			t.Errorf("docs/layout.md has a row for %s, which is not a directory of the tree", p)
		}
	}
	var pkgs []string
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case rel == "test" || rel == "tools" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s: %v", len(pkgs), repoRoot, pkgs)
	}
	for _, p := range pkgs {
		if !rows[p] {
			t.Errorf("package %s has no row in docs/layout.md: say what its job is", p)
		}
	}
}
