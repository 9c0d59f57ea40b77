package resources

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kernelNames are the string literals outside the readers that equal a
// resource name but are not one: the kernel's own names for a subsystem, a
// cgroup v1 controller or a sysfs device, which happen to be spelled the
// same. By file (slash-separated, from the module root), then literal.
var kernelNames = map[string][]string{
	"cgroup/detect.go":     {"cpu", "memory"}, // cgroup v1 controller directories
	"cgroup/enforcer.go":   {"memory"},        // the cgroup v1 memory controller's hierarchy
	"cgroup/workingset.go": {"memory"},        // the same
	"hotplug/writer.go":    {"cpu", "memory"}, // the sysfs device names (cpuN, memoryN) and kinds
	"uevent/listener.go":   {"cpu", "memory"}, // kernel uevent subsystems
}

// readers may spell resource names: this package, which holds the table,
// and topology, which reads the resources from the machine (and whose
// sysfs names, "cpu", "memory", "hugepages-2048kB", are the kernel's).
var readers = []string{"resources", "topology"}

// constants are this package's names for the table's resources, and
// k8s.io/api/core/v1's, by identifier: a list of them is a list of
// resources as much as a list of literals is.
var constants = map[string]map[string]string{
	"github.com/node-resized/node-resized/resources": {
		"CPU": CPU, "Memory": Memory, "EphemeralStorage": EphemeralStorage, "PID": PID, "HugePagesPrefix": HugePagesPrefix,
	},
	"k8s.io/api/core/v1": {
		"ResourceCPU": CPU, "ResourceMemory": Memory, "ResourceEphemeralStorage": EphemeralStorage, "ResourceHugePagesPrefix": HugePagesPrefix,
	},
}

// TestConstantsCoverTable: every row of the table has its constant among
// constants, so that a list of the new resource's constant is found too.
func TestConstantsCoverTable(t *testing.T) {
	ours := slices.Collect(maps.Values(constants["github.com/node-resized/node-resized/resources"]))
	for _, k := range table {
		if !slices.Contains(ours, k.name) {
			t.Errorf("%s has no constant in constants", k.name)
		}
	}
}

// TestNothingElseSpellsAResource makes the package comment true: no
// production file of the module outside the readers spells a resource name
// of the table (or a huge page name) as a string literal; they take the
// names and the facts from here.
func TestNothingElseSpellsAResource(t *testing.T) {
	used := map[string]bool{}
	walk(t, func(rel string, fset *token.FileSet, f *ast.File) {
		for _, s := range literals(fset, f) {
			if !spellsResource(s.lit) {
				continue
			}
			if slices.Contains(kernelNames[rel], s.lit) {
				used[rel+" "+s.lit] = true
				continue
			}
			t.Errorf("%s:%d:%d spells the resource %q: take it (or the fact it stands for) from package resources",
				rel, s.pos.Line, s.pos.Column, s.lit)
		}
	})
	for file, lits := range kernelNames {
		for _, lit := range lits {
			if !used[file+" "+lit] {
				t.Errorf("kernelNames allows %q in %s, which no longer spells it: drop the entry", lit, file)
			}
		}
	}
}

// TestNoResourceLists: outside the readers, no composite literal, case or
// chain of && and || names two resources or more, by literal or by
// constant. Such a list is a fact of the table kept somewhere else
// ("cpu, memory and ephemeral-storage may be reserved"); one resource named
// for what is its own (memory's swap, cpu's reserved CPUs) is not.
func TestNoResourceLists(t *testing.T) {
	walk(t, func(rel string, fset *token.FileSet, f *ast.File) {
		names := importNames(f)
		ast.Inspect(f, func(n ast.Node) bool {
			var parts []ast.Expr
			switch n := n.(type) {
			case *ast.CompositeLit:
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						e = kv.Key
					}
					parts = append(parts, e)
				}
			case *ast.CaseClause:
				parts = n.List
			case *ast.BinaryExpr:
				if n.Op != token.LOR && n.Op != token.LAND {
					return true
				}
				parts = []ast.Expr{n}
			default:
				return true
			}
			var named []string
			for _, p := range parts {
				ast.Inspect(p, func(m ast.Node) bool {
					if r, ok := resourceRef(rel, m, names); ok && !slices.Contains(named, r) {
						named = append(named, r)
					}
					return true
				})
			}
			if len(named) >= 2 {
				pos := fset.Position(n.Pos())
				t.Errorf("%s:%d:%d lists the resources %q: ask package resources for the fact instead", rel, pos.Line, pos.Column, named)
				return false
			}
			return true
		})
	})
}

// walk calls fn with every production .go file of the module outside the
// readers, by its slash-separated path from the module root. Other modules
// (test/, tools/) and testdata are not this module's production code.
func walk(t *testing.T, fn func(rel string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/node-resized/node-resized\n") {
		t.Fatalf("%s is not the module root: %v", root, err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if isReader(rel) || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		fn(rel, fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d production files under %s: the walk misses the module", files, root)
	}
}

// spelling is one string literal, unquoted.
type spelling struct {
	pos token.Position
	lit string
}

// literals returns f's string literals, without struct tags and import
// paths.
func literals(fset *token.FileSet, f *ast.File) []spelling {
	tags := map[*ast.BasicLit]bool{}
	var out []spelling
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false
		case *ast.Field:
			if n.Tag != nil {
				tags[n.Tag] = true
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || tags[n] {
				return true
			}
			if s, err := strconv.Unquote(n.Value); err == nil {
				out = append(out, spelling{pos: fset.Position(n.Pos()), lit: s})
			}
		}
		return true
	})
	return out
}

// spellsResource reports whether s is the name of a resource of the table,
// or starts as the names of a family of them do ("hugepages-").
func spellsResource(s string) bool {
	for _, k := range table {
		if s == k.name || (k.family && strings.HasPrefix(s, k.name)) {
			return true
		}
	}
	return false
}

// importNames maps the names f imports the packages of constants under to
// their paths.
func importNames(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil || constants[path] == nil {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if path == "k8s.io/api/core/v1" {
			name = "v1"
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		out[name] = path
	}
	return out
}

// resourceRef returns the resource n names in the file rel: a string
// literal of one (not a kernel name), or a constant of constants.
func resourceRef(rel string, n ast.Node, imports map[string]string) (string, bool) {
	switch n := n.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(n.Value)
		if err == nil && n.Kind == token.STRING && spellsResource(s) && !slices.Contains(kernelNames[rel], s) {
			return s, true
		}
	case *ast.SelectorExpr:
		x, ok := n.X.(*ast.Ident)
		if !ok {
			return "", false
		}
		if v, ok := constants[imports[x.Name]][n.Sel.Name]; ok {
			return v, true
		}
	}
	return "", false
}

func isReader(rel string) bool {
	for _, r := range readers {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return true
		}
	}
	return false
}
