package main

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestManPages reads the pages the deb ships: each names every flag the
// binary's --help lists (the daemon's, each node-resizectl command's) and
// has a section for each subcommand, and man renders them without a
// warning.
func TestManPages(t *testing.T) {
	need(t, "dpkg-deb")
	p := packages(t)
	data := t.TempDir()
	output(t, "", "dpkg-deb", "-x", p.deb, data)
	page := func(path string) string {
		f, err := os.Open(filepath.Join(data, path))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(z)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return string(b)
	}
	has := func(path, page, flag string) {
		t.Helper()
		if !strings.Contains(page, `\fB`+strings.ReplaceAll(flagName(flag), "-", `\-`)+`\fR`) {
			t.Errorf("%s does not document %s", path, flagName(flag))
		}
	}

	daemon := page("usr/share/man/man8/node-resized.8.gz")
	bin := filepath.Join(p.bin, "node-resized")
	for _, f := range flagNames(helpText(t, bin)) {
		has("node-resized(8)", daemon, f)
	}
	for _, want := range []string{".TH NODE-RESIZED 8 ", ".SH SYNOPSIS", ".SH OPTIONS", ".SS kubelet\\-prestart", ".SS kubelet\\-recover", ".SH EXAMPLES"} {
		if !strings.Contains(daemon, want) {
			t.Errorf("node-resized(8) has no %q", want)
		}
	}

	ctl := page("usr/share/man/man1/node-resizectl.1.gz")
	ctlBin := filepath.Join(p.bin, "node-resizectl")
	for _, cmd := range []string{"status", "topology", "events", "resync", "version", "resize"} {
		if !strings.Contains(ctl, ".SS "+cmd+"\n") {
			t.Errorf("node-resizectl(1) has no section for %s", cmd)
		}
		for _, f := range flagNames(helpText(t, ctlBin, cmd)) {
			has("node-resizectl(1)", ctl, f)
		}
	}
	if strings.Contains(ctl, `(default "`+hostname()+`")`) {
		t.Error("node-resizectl(1) shows this machine's hostname as a default")
	}

	if _, err := exec.LookPath("man"); err == nil {
		for _, path := range []string{"usr/share/man/man8/node-resized.8.gz", "usr/share/man/man1/node-resizectl.1.gz"} {
			cmd := exec.Command("man", "--warnings", "-l", filepath.Join(data, path))
			cmd.Env = append(os.Environ(), "MANWIDTH=80", "LC_ALL=C.UTF-8", "MANPAGER=cat", "PAGER=cat")
			cmd.Stdout = io.Discard
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			warn, _ := io.ReadAll(stderr)
			if err := cmd.Wait(); err != nil || len(warn) > 0 {
				t.Errorf("man --warnings %s: %v\n%s", path, err, warn)
			}
		}
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return strings.ToLower(h)
}
