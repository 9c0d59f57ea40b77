package main

// The Containerfile at the top of the repository builds the image with
// docker buildx or buildah; image-pack builds it without them. Neither
// engine can run here (no registry, no daemon), so TestContainerfile reads
// the Containerfile itself, works out what its instructions make of each
// platform (the files COPY adds with their modes and owner, and the
// config ENV, USER, ENTRYPOINT, CMD, WORKDIR and LABEL set), as those
// engines do, and compares that with the layer and the config image-pack
// built. It knows the instructions the Containerfile uses and fails on any
// other, so that a new one is taught here (and to image-pack) rather than
// passed over.

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An instruction is one Containerfile line, continuations joined.
type instruction struct {
	line int
	cmd  string // upper case
	rest string
}

func parseContainerfile(text string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), rest: strings.TrimSpace(rest)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: a continuation with no end", start)
	}
	return out, nil
}

// expand replaces $NAME and ${NAME} with args[NAME]; an undeclared name is
// an error.
func expand(s string, args map[string]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		var name string
		if i+1 < len(s) && s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("%q: no closing }", s)
			}
			name = s[i+2 : i+end]
			i += end
		} else {
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			name = s[i+1 : j]
			i = j - 1
		}
		v, ok := args[name]
		if !ok {
			return "", fmt.Errorf("%q: $%s is not an ARG", s, name)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// pairs splits `k=v k2="v 2"` into its pairs, unquoting double-quoted
// values and expanding variables in them.
func pairs(s string, args map[string]string) ([][2]string, error) {
	var out [][2]string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("%q: want KEY=VALUE", s)
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			end := 1
			for end < len(s) && (s[end] != '"' || s[end-1] == '\\') {
				end++
			}
			if end == len(s) {
				return nil, fmt.Errorf("%q: no closing quote", s)
			}
			val = strings.ReplaceAll(s[1:end], `\"`, `"`)
			s = s[end+1:]
		} else {
			sp := strings.IndexAny(s, " \t")
			if sp < 0 {
				sp = len(s)
			}
			val, s = s[:sp], s[sp:]
		}
		v, err := expand(val, args)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{key, v})
	}
	return out, nil
}

// built is what a Containerfile makes of one platform.
type built struct {
	files      map[string]layerEntry // every path of the layer, folders too
	entrypoint []string
	cmd        []string
	env        []string
	user       string
	workdir    string
	labels     map[string]string
	copySrcs   []string // the build context's files COPY reads
}

// evaluate runs the Containerfile's instructions for the platform
// linux/arch with buildArgs, as docker buildx and buildah do, reading the
// COPY sources from the build context root.
func evaluate(ins []instruction, root, arch string, buildArgs map[string]string) (*built, error) {
	b := &built{files: map[string]layerEntry{}, labels: map[string]string{}}
	args := map[string]string{}
	for i, in := range ins {
		fail := func(format string, a ...any) error {
			return fmt.Errorf("Containerfile line %d (%s): %s", in.line, in.cmd, fmt.Sprintf(format, a...))
		}
		switch in.cmd {
		case "FROM":
			if i != 0 || in.rest != "scratch" {
				return nil, fail("image-pack builds FROM scratch, and only that, first")
			}
		case "ARG":
			k, def, hasDef := strings.Cut(in.rest, "=")
			switch v, given := buildArgs[k]; {
			case k == "TARGETARCH":
				args[k] = arch // the engines' automatic platform ARG
			case given:
				args[k] = v
			case hasDef:
				args[k] = def
			default:
				args[k] = ""
			}
		case "COPY":
			words := strings.Fields(in.rest)
			mode := int64(-1)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				flag, val, _ := strings.Cut(words[0], "=")
				if flag != "--chmod" {
					return nil, fail("%s: image-pack's files are root's with a fixed mode; teach this test and image-pack the flag", flag)
				}
				m, err := strconv.ParseInt(val, 8, 32)
				if err != nil {
					return nil, fail("--chmod=%s: %v", val, err)
				}
				mode = m
				words = words[1:]
			}
			if len(words) < 2 {
				return nil, fail("want SRC... DEST")
			}
			dest, err := expand(words[len(words)-1], args)
			if err != nil {
				return nil, fail("%v", err)
			}
			srcs := words[:len(words)-1]
			if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
				return nil, fail("several sources need a DEST folder ending in /")
			}
			for _, s := range srcs {
				src, err := expand(s, args)
				if err != nil {
					return nil, fail("%v", err)
				}
				if strings.ContainsAny(src, "*?[") {
					return nil, fail("%s: no wildcards", src)
				}
				b.copySrcs = append(b.copySrcs, src)
				p := filepath.Join(root, filepath.FromSlash(src))
				fi, err := os.Stat(p)
				if err != nil {
					return nil, fail("%v", err)
				}
				if !fi.Mode().IsRegular() {
					return nil, fail("%s: only files", src)
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return nil, err
				}
				target := dest
				if strings.HasSuffix(dest, "/") {
					target = dest + path.Base(src)
				}
				target = strings.TrimPrefix(path.Clean(target), "/")
				m := mode
				if m < 0 {
					m = int64(fi.Mode().Perm())
				}
				b.files[target] = layerEntry{typ: tar.TypeReg, mode: m, sum: sum(data)}
				// COPY makes the missing parents, root's, 0755.
				for d := path.Dir(target); d != "."; d = path.Dir(d) {
					b.files[d] = layerEntry{typ: tar.TypeDir, mode: 0o755}
				}
			}
		case "ENV":
			ps, err := pairs(in.rest, args)
			if err != nil {
				return nil, fail("%v", err)
			}
			for _, p := range ps {
				kv := p[0] + "=" + p[1]
				replaced := false
				for j, e := range b.env {
					if strings.HasPrefix(e, p[0]+"=") {
						b.env[j], replaced = kv, true
					}
				}
				if !replaced {
					b.env = append(b.env, kv)
				}
				args[p[0]] = p[1] // ENV values expand in later instructions too
			}
		case "LABEL":
			ps, err := pairs(in.rest, args)
			if err != nil {
				return nil, fail("%v", err)
			}
			for _, p := range ps {
				b.labels[p[0]] = p[1]
			}
		case "USER":
			u, err := expand(in.rest, args)
			if err != nil {
				return nil, fail("%v", err)
			}
			b.user = u
		case "WORKDIR":
			w, err := expand(in.rest, args)
			if err != nil {
				return nil, fail("%v", err)
			}
			b.workdir = w
		case "ENTRYPOINT", "CMD":
			var words []string
			if err := json.Unmarshal([]byte(in.rest), &words); err != nil {
				return nil, fail("the exec form (a JSON array) only: %v", err)
			}
			if in.cmd == "ENTRYPOINT" {
				b.entrypoint = words
				b.cmd = nil // as the engines do: an ENTRYPOINT resets CMD
			} else {
				b.cmd = words
			}
		default:
			return nil, fail("an instruction this test does not know: teach it, and image-pack")
		}
	}
	return b, nil
}

// TestContainerfile: for each platform, the Containerfile (with the build
// arguments that image-pack got as flags) makes the same files, with the
// same modes and owner, and the same entrypoint, command, environment,
// user, working folder and labels as image-pack's image.
func TestContainerfile(t *testing.T) {
	o, res := fixture(t)
	text, err := os.ReadFile(filepath.Join(o.root, "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ins, err := parseContainerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	// The build context is the repository with the binaries where make
	// build-cross puts them (bin/linux_<arch>/): o.bin stands for bin/.
	ctx := filepath.Join(workDir, "context")
	if err := os.MkdirAll(ctx, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"LICENSE"} {
		if err := os.Symlink(filepath.Join(o.root, f), filepath.Join(ctx, f)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(o.bin, filepath.Join(ctx, "bin")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	buildArgs := map[string]string{
		"VERSION":  o.version,
		"REVISION": o.revision,
		"CREATED":  o.created.Format(time.RFC3339),
	}
	for _, arch := range o.arches {
		want, err := evaluate(ins, ctx, arch, buildArgs)
		if err != nil {
			t.Fatal(err)
		}
		img := platformImageOf(t, res.layout, arch)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		for _, f := range []struct {
			what      string
			got, want any
		}{
			{"ENTRYPOINT", c.Entrypoint, want.entrypoint},
			{"CMD", c.Cmd, want.cmd},
			{"ENV", c.Env, want.env},
			{"USER", c.User, want.user},
			{"WORKDIR", c.WorkingDir, want.workdir},
			{"LABEL", c.Labels, want.labels},
		} {
			if !reflect.DeepEqual(f.got, f.want) {
				t.Errorf("linux/%s: %s: image-pack's %#v, the Containerfile's %#v", arch, f.what, f.got, f.want)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]layerEntry{}
		for _, l := range layers {
			for _, e := range readLayer(t, l) {
				if e.uid != 0 || e.gid != 0 {
					t.Errorf("linux/%s: %s owned by %d:%d; COPY without --chown gives 0:0", arch, e.name, e.uid, e.gid)
				}
				got[e.name] = layerEntry{typ: e.typ, mode: e.mode, sum: e.sum}
			}
		}
		if !reflect.DeepEqual(got, want.files) {
			t.Errorf("linux/%s: image-pack's layer\n%v\nthe Containerfile's\n%v", arch, got, want.files)
		}
		if arch == o.arches[0] {
			checkIgnore(t, filepath.Join(o.root, ".dockerignore"), want.copySrcs)
		}
	}
}

// checkIgnore: the build context that .dockerignore leaves holds every
// file COPY reads, and not the rest of the repository. Its patterns are
// matched as the engines match them: a pattern matches a path or a folder
// above it, the last pattern that matches decides, and ! keeps the path.
func checkIgnore(t *testing.T, file string, copySrcs []string) {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(text), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(p string) bool {
		out := false
		for _, pat := range patterns {
			neg := strings.HasPrefix(pat, "!")
			pat = strings.TrimPrefix(pat, "!")
			// A pattern that matches a folder matches what is in it.
			for q := p; q != "."; q = path.Dir(q) {
				if ok, err := path.Match(pat, q); err != nil {
					t.Fatalf(".dockerignore: %q: %v", pat, err)
				} else if ok {
					out = !neg
					break
				}
			}
		}
		return out
	}
	for _, s := range copySrcs {
		if ignored(s) {
			t.Errorf(".dockerignore leaves %s, which COPY reads, out of the build context", s)
		}
	}
	for _, s := range []string{"bin/node-resized", "dist", "go.mod", ".git", "Containerfile", "bin/linux_amd64/node-resized.debug"} {
		if !ignored(s) {
			t.Errorf(".dockerignore sends %s with the build context", s)
		}
	}
}

func TestParseContainerfile(t *testing.T) {
	ins, err := parseContainerfile("# c\nFROM scratch\nLABEL a=\"x y\" \\\n  # inside\n  b=$V\nENTRYPOINT [\"/e\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 3 || ins[1].cmd != "LABEL" || ins[1].line != 3 {
		t.Fatalf("%+v", ins)
	}
	b, err := evaluate(append([]instruction{ins[0], {cmd: "ARG", rest: "V=1"}}, ins[1:]...), t.TempDir(), "amd64", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.labels, map[string]string{"a": "x y", "b": "1"}) || !reflect.DeepEqual(b.entrypoint, []string{"/e"}) {
		t.Errorf("%+v", b)
	}
	for _, bad := range []string{"FROM debian\n", "FROM scratch\nRUN true\n", "FROM scratch\nENTRYPOINT /e\n", "FROM scratch\nLABEL a=$NOPE\n", "FROM scratch\nCOPY --chown=1 a /b\n"} {
		ins, err := parseContainerfile(bad)
		if err != nil {
			continue
		}
		if _, err := evaluate(ins, t.TempDir(), "amd64", nil); err == nil {
			t.Errorf("%q: evaluated without an error", bad)
		}
	}
}
