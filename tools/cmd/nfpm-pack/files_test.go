package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// helpText runs a binary with --help and returns what it printed.
func helpText(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		// flag.ErrHelp: some commands exit non-zero after the usage.
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("%s --help: %v", bin, err)
		}
	}
	return string(out)
}

// flagNames lists the flags in the output of Go's flag.PrintDefaults.
func flagNames(usage string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-zA-Z0-9-]*)`).FindAllStringSubmatch(usage, -1) {
		names = append(names, m[1])
	}
	return names
}

// complete runs the bash completion for the words on the command line, the
// last being the one completed, and returns the candidates.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	const prog = `source "$1"; shift
complete -p node-resizectl >/dev/null || exit 1
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
_node_resizectl
printf '%s\n' "${COMPREPLY[@]}"`
	out := output(t, "", "bash", append([]string{"-c", prog, "bash", script, "node-resizectl"}, words...)...)
	got := strings.Fields(out)
	sort.Strings(got)
	return got
}

func TestCompletion(t *testing.T) {
	need(t, "bash")
	p := packages(t)
	script := filepath.Join(p.root, "packaging/completion/node-resizectl.bash")
	ctl := filepath.Join(p.bin, "node-resizectl")

	// The commands are those node-resizectl --help lists, and help.
	usage := helpText(t, ctl)
	_, commandsText, ok := strings.Cut(usage, "\nCommands:\n")
	if !ok {
		t.Fatalf("node-resizectl --help has no Commands section:\n%s", usage)
	}
	commandsText, _, _ = strings.Cut(commandsText, "\n\n")
	commands := []string{"help"}
	for _, line := range strings.Split(commandsText, "\n") {
		commands = append(commands, strings.Fields(line)[0])
	}
	sort.Strings(commands)
	if got := complete(t, script, ""); !slices.Equal(got, commands) {
		t.Errorf("commands: %v, want %v (node-resizectl --help)", got, commands)
	}

	// The flags are those each command's flag set has.
	dashed := func(names []string) []string {
		var out []string
		for _, n := range names {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, cmd := range []string{"status", "events", "resize"} {
		want := dashed(append(flagNames(helpText(t, ctl, cmd)), "help"))
		if got := complete(t, script, cmd, "-"); !slices.Equal(got, want) {
			t.Errorf("flags of %s: %v, want %v (node-resizectl %s --help)", cmd, got, want, cmd)
		}
	}

	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	write(t, sock, "")
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"st"}, []string{"status"}},
		{[]string{"-o", ""}, []string{"json", "table"}},
		{[]string{"--output", "j"}, []string{"json"}},
		{[]string{"--output", "=", ""}, []string{"json", "table"}},
		{[]string{"-o", "json", "e"}, []string{"events"}},
		{[]string{"--socket", sock, "e"}, []string{"events"}},
		{[]string{"--socket", "=", sock, "r"}, []string{"resize", "resync"}},
		{[]string{"--socket", filepath.Join(dir, "api")}, []string{sock}},
		{[]string{"--socket", "=", filepath.Join(dir, "a")}, []string{sock}},
		{[]string{"status", ""}, nil},
		{[]string{"events", "--f"}, []string{"--follow"}},
		{[]string{"status", "--f"}, nil},
		{[]string{"resi"}, []string{"resize"}},
		{[]string{"resize", "--c"}, []string{"--clear", "--cpu"}},
		{[]string{"resize", "--hu"}, []string{"--hugepages-1Gi", "--hugepages-2Mi"}},
		{[]string{"resize", "--cpu", ""}, nil},
		{[]string{"resize", "--set", "h"}, []string{"hugepages-1Gi=", "hugepages-2Mi="}},
		{[]string{"resize", "--kubeconfig", filepath.Join(dir, "api")}, []string{sock}},
		{[]string{"status", "--cl"}, nil},
	} {
		if got := complete(t, script, c.words...); !slices.Equal(got, c.want) {
			t.Errorf("node-resizectl %s<TAB>: %v, want %v", strings.Join(c.words, " "), got, c.want)
		}
	}
}

func TestDefaultFile(t *testing.T) {
	need(t, "sh")
	p := packages(t)
	path := filepath.Join(p.root, "packaging/default/node-resized")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// One setting, empty: the daemon's defaults.
	var settings []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			settings = append(settings, line)
		}
	}
	if want := []string{`NODE_RESIZED_ARGS=""`}; !slices.Equal(settings, want) {
		t.Errorf("settings %q, want %q", settings, want)
	}
	if got := output(t, "", "sh", "-c", `. "$1" && printf %s "$NODE_RESIZED_ARGS"`, "sh", path); got != "" {
		t.Errorf("NODE_RESIZED_ARGS = %q, want empty", got)
	}

	// The examples use flags the daemon has, and show the usual ones.
	daemonFlags := flagNames(helpText(t, filepath.Join(p.bin, "node-resized")))
	var used []string
	for _, m := range regexp.MustCompile(`(?m)^#\s+NODE_RESIZED_ARGS="([^"]*)"$`).FindAllStringSubmatch(string(b), -1) {
		for _, w := range strings.Fields(m[1]) {
			if name, ok := strings.CutPrefix(w, "--"); ok {
				used = append(used, name)
				if !slices.Contains(daemonFlags, name) {
					t.Errorf("the example flag --%s is not one of node-resized's: %v", name, daemonFlags)
				}
			}
		}
	}
	for _, want := range []string{"standalone", "kubeconfig", "node-name", "log-level", "auto-online"} {
		if !slices.Contains(used, want) {
			t.Errorf("no example with --%s", want)
		}
	}
}

func TestMakeInstall(t *testing.T) {
	need(t, "make", "sed", "install")
	p := packages(t)
	dest := t.TempDir()
	install := func() {
		t.Helper()
		cmd := exec.Command("make", "-s", "-C", p.root, "install", "DESTDIR="+dest, "BIN="+p.bin)
		// Not the jobserver of a make that runs this test.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
			return strings.HasPrefix(e, "MAKEFLAGS=") || strings.HasPrefix(e, "MFLAGS=") || strings.HasPrefix(e, "MAKELEVEL=")
		})
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
	}
	install()

	for path, mode := range map[string]os.FileMode{
		"usr/local/bin/node-resized":                                 0o755,
		"usr/local/bin/node-resizectl":                               0o755,
		"usr/local/share/bash-completion/completions/node-resizectl": 0o644,
		"etc/systemd/system/node-resized.service":                    0o644,
		"etc/systemd/system/kubelet.service.d/90-node-resized.conf":  0o644,
		"etc/default/node-resized":                                   0o644,
	} {
		st, err := os.Stat(filepath.Join(dest, path))
		if err != nil {
			t.Error(err)
		} else if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), mode)
		}
	}
	// The unit starts the binary where make install put it.
	checkUnit(t, filepath.Join(dest, "etc/systemd/system/node-resized.service"), "/usr/local/bin")
	checkDropIn(t, filepath.Join(dest, "etc/systemd/system/kubelet.service.d/90-node-resized.conf"), "/usr/local/bin")
	assertSame(t, filepath.Join(dest, "etc/default/node-resized"), filepath.Join(p.root, "packaging/default/node-resized"))

	// An edited /etc/default/node-resized survives the next make install.
	conf := filepath.Join(dest, "etc/default/node-resized")
	write(t, conf, "NODE_RESIZED_ARGS=\"--standalone\"\n")
	install()
	if b, _ := os.ReadFile(conf); string(b) != "NODE_RESIZED_ARGS=\"--standalone\"\n" {
		t.Errorf("make install replaced an existing /etc/default/node-resized (now %d bytes)", len(b))
	}
}
