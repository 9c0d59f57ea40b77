package main

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README and docs/operating.md are what an operator reads: the flag
// reference (docs/operating.md) must be the daemon's flag set, and their
// links must lead somewhere.

// repoRoot is the module's root, two directories up from this package.
const repoRoot = "../.."

// readmeMaxBytes is the README's budget: an operator's guide, with room
// for the workflows an operator runs from end to end (the planned
// release's unplug), not a design document (that is docs/).
const readmeMaxBytes = 14000

// helpFlag is one flag as node-resized --help prints it.
type helpFlag struct {
	kind string // "bool", "string", "int", "float", "duration"
	def  string // as printed after "(default ", unquoted; "" when the zero value
}

// flagsFromHelp reads the flag names, kinds and defaults out of the help
// text the daemon prints: the flag package's PrintDefaults format, lines
// "  -name kind" followed by indented usage that ends in "(default X)"
// unless the default is the zero value.
func flagsFromHelp(t *testing.T, help string) map[string]helpFlag {
	t.Helper()
	_, after, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		t.Fatalf("no Flags: section in --help:\n%s", help)
	}
	head := regexp.MustCompile(`^  -([a-z0-9-]+)(?: ([a-z]+))?$`)
	def := regexp.MustCompile(`\(default (.*)\)$`)
	flags := map[string]helpFlag{}
	var name string
	for _, line := range strings.Split(after, "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			name = m[1]
			kind := m[2]
			if kind == "" {
				kind = "bool"
			}
			flags[name] = helpFlag{kind: kind}
			continue
		}
		if name == "" || strings.TrimSpace(line) == "" {
			continue
		}
		if m := def.FindStringSubmatch(line); m != nil {
			f := flags[name]
			f.def = m[1]
			if f.kind == "string" {
				s, err := strconv.Unquote(m[1])
				if err != nil {
					t.Fatalf("--%s: default %s is not a quoted string: %v", name, m[1], err)
				}
				f.def = s
			}
			flags[name] = f
		}
	}
	return flags
}

// readmeFlag is one row of the flag reference.
type readmeFlag struct {
	def  string // the default cell, without its backquotes
	file string
	line int
}

// flagsFromDoc adds to flags the flag rows of the tables in the section
// of doc (named file) that starts with the heading section.
func flagsFromDoc(t *testing.T, file, doc, section string, flags map[string]readmeFlag) map[string]readmeFlag {
	t.Helper()
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| `([^`]*)` \\|")
	in := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == section
			continue
		}
		if !in || !strings.HasPrefix(line, "| `--") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s:%d: a flag row must read | `--name` | `default` | meaning |: %s", file, i+1, line)
			continue
		}
		if prev, dup := flags[m[1]]; dup {
			t.Errorf("%s:%d: --%s is documented twice (also %s:%d)", file, i+1, m[1], prev.file, prev.line)
		}
		flags[m[1]] = readmeFlag{def: m[2], file: file, line: i + 1}
	}
	if len(flags) == 0 {
		t.Fatalf("%s has no flag reference under %s", file, section)
	}
	return flags
}

// sameDefault reports whether the README's default cell says the flag's
// default: durations and numbers by value, strings as written ("" for
// the empty string), booleans as true or false.
func sameDefault(f helpFlag, cell string) bool {
	switch f.kind {
	case "bool":
		want := f.def
		if want == "" {
			want = "false"
		}
		return cell == want
	case "duration":
		want := time.Duration(0)
		if f.def != "" {
			d, err := time.ParseDuration(f.def)
			if err != nil {
				return false
			}
			want = d
		}
		got, err := time.ParseDuration(cell)
		return err == nil && got == want
	case "int", "float":
		want := 0.0
		if f.def != "" {
			v, err := strconv.ParseFloat(f.def, 64)
			if err != nil {
				return false
			}
			want = v
		}
		got, err := strconv.ParseFloat(cell, 64)
		return err == nil && got == want
	default: // string
		if cell == `""` {
			return f.def == ""
		}
		return cell == f.def
	}
}

func TestReadmeFlagReference(t *testing.T) {
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags(--help): %v, want flag.ErrHelp", err)
	}
	have := flagsFromHelp(t, help.String())
	if len(have) < 30 {
		t.Fatalf("read only %d flags from --help; the help format changed?\n%s", len(have), help.String())
	}
	// The flag reference is docs/operating.md's Flags, and the local API's
	// limits in its own section there.
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := flagsFromDoc(t, "docs/operating.md", string(ops), "## Flags", map[string]readmeFlag{})
	doc = flagsFromDoc(t, "docs/operating.md", string(ops), "## The local API", doc)
	for _, name := range slices.Sorted(maps.Keys(have)) {
		d, ok := doc[name]
		if !ok {
			t.Errorf("--%s is a flag of node-resized but not in docs/operating.md's flag reference", name)
			continue
		}
		if f := have[name]; !sameDefault(f, d.def) {
			shown := f.def
			if shown == "" {
				shown = "the zero value"
			}
			t.Errorf("%s:%d: --%s default `%s`, but the daemon's is %s (%s)", d.file, d.line, name, d.def, shown, f.kind)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		if _, ok := have[name]; !ok {
			t.Errorf("%s:%d: --%s is documented but node-resized has no such flag", doc[name].file, doc[name].line, name)
		}
	}
}

func TestReadmeSize(t *testing.T) {
	fi, err := os.Stat(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > readmeMaxBytes {
		t.Errorf("README.md is %d bytes, more than %d: move the detail to docs/", fi.Size(), readmeMaxBytes)
	}
}

// TestDocLinks checks that every relative link in README.md and docs/*.md
// names a file or directory that exists and, for a Markdown file with a
// #fragment, a heading in it.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(repoRoot, "README.md")}, files...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, file)
		for i, line := range strings.Split(stripCode(string(b)), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if u, err := url.Parse(target); err == nil && u.Scheme != "" {
					continue // http(s), mailto: not checked here
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %s: %v", rel, i+1, target, err)
					continue
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				anchors, err := headingAnchors(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors[frag] {
					t.Errorf("%s:%d: link %s: no heading #%s in %s", rel, i+1, target, frag, path)
				}
			}
		}
	}
}

// stripFences blanks fenced code blocks, keeping the lines, so that a
// comment line in a shell example is not taken for a heading.
func stripFences(s string) string {
	lines := strings.Split(s, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// stripCode blanks fenced code blocks and inline code spans, keeping the
// lines, so that a link written as code is not taken for a link.
func stripCode(s string) string {
	return codeSpan.ReplaceAllString(stripFences(s), "``")
}

var codeSpan = regexp.MustCompile("`[^`\n]*`")

// headingAnchors are the fragments GitHub gives the headings of a Markdown
// file: lower case, punctuation other than - and _ dropped, spaces turned
// into -, and -1, -2 ... for repeats.
func headingAnchors(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(stripFences(string(b)), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

var heading = regexp.MustCompile(`^#{1,6} +(.+?) *$`)

func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
