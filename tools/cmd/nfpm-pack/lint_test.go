package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLintian runs Debian's lintian on the deb: no error and no warning.
// What is left is in packaging/debian/lintian-overrides (shipped in the
// package, where lintian reads it), each override under a comment that
// says why.
func TestLintian(t *testing.T) {
	need(t, "lintian")
	p := packages(t)
	cmd := exec.Command("lintian", "--fail-on", "error,warning", "--tag-display-limit", "0", p.deb)
	out, err := cmd.CombinedOutput()
	t.Logf("lintian %s:\n%s", filepath.Base(p.deb), out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
			t.Errorf("lintian: %s", line)
		}
	}
	if err != nil {
		t.Errorf("lintian: %v", err)
	}
	checkReasons(t, filepath.Join(p.root, "packaging/debian/lintian-overrides"), regexp.MustCompile(`^node-resized: `))
}

// TestRpmlint runs rpmlint on the rpm with packaging/rpmlint.toml, whose
// filters each say why: no error and no warning.
func TestRpmlint(t *testing.T) {
	need(t, "rpmlint", "cpio")
	p := packages(t)
	// rpmlint unpacks the payload with `rpm2cpio | cpio -id` in a
	// temporary directory, and nfpm's payload names are absolute
	// (/usr/bin/node-resized, where rpmbuild writes ./usr/bin/...): GNU
	// cpio would write them into this machine's / and rpmlint would check
	// no file's content. This cpio keeps them under the directory.
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	write(t, filepath.Join(bin, "cpio"), "#!/bin/sh\nexec "+cpio+" --no-absolute-filenames \"$@\"\n")
	if err := os.Chmod(filepath.Join(bin, "cpio"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(p.root, "packaging/rpmlint.toml")
	cmd := exec.Command("rpmlint", "--config", config, p.rpm)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	t.Logf("rpmlint %s:\n%s", filepath.Base(p.rpm), out)
	if m := regexp.MustCompile(`(\d+) errors, (\d+) warnings`).FindStringSubmatch(string(out)); m == nil {
		t.Errorf("rpmlint printed no summary")
	} else if m[1] != "0" || m[2] != "0" {
		t.Errorf("rpmlint: %s errors, %s warnings", m[1], m[2])
	}
	if err != nil {
		t.Errorf("rpmlint: %v", err)
	}
	// rpmlint saw the binaries (their magic from the unpacked files).
	if strings.Contains(string(out), "no-binary") {
		t.Error("rpmlint did not see the binaries")
	}
	checkReasons(t, config, regexp.MustCompile(`^\s*'`))
}

// checkReasons fails for an override or filter line (entry) that has no
// comment line right above it, or above the run of entries it is in.
func checkReasons(t *testing.T, path string, entry *regexp.Regexp) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	reason, n := false, 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "#"):
			reason = true
		case line == "":
			reason = false
		case entry.MatchString(sc.Text()):
			n++
			if !reason {
				t.Errorf("%s: %q has no comment that says why", path, line)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: no entry found", path)
	}
}
