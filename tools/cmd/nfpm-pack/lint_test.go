package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLintian runs Debian's lintian on every architecture's deb, in one
// run (lintian loads its checks once; four runs take longer, in parallel
// too, on two CPUs): no error and no warning. What is left is in
// packaging/debian/lintian-overrides (shipped in the package, where
// lintian reads it), each override under a comment that says why.
func TestLintian(t *testing.T) {
	need(t, "lintian")
	p := packages(t)
	var debs []string
	for _, a := range testArches {
		debs = append(debs, p.arch[a.goarch].deb)
	}
	if problems := lintian(t, debs...); problems > 0 {
		// Which architecture's: lintian names the package, not the file.
		for _, deb := range debs {
			lintian(t, deb)
		}
	}
	checkReasons(t, filepath.Join(p.root, "packaging/debian/lintian-overrides"), regexp.MustCompile(`^node-resized: `))
}

// lintian runs lintian on debs and fails the test for every error and
// warning it prints, which it counts.
func lintian(t *testing.T, debs ...string) (problems int) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("lintian", append([]string{"--fail-on", "error,warning", "--tag-display-limit", "0"}, debs...)...)
	out, err := cmd.CombinedOutput()
	names := make([]string, len(debs))
	for i, d := range debs {
		names[i] = filepath.Base(d)
	}
	t.Logf("lintian %s (%v):\n%s", strings.Join(names, " "), time.Since(start).Round(100*time.Millisecond), out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
			t.Errorf("lintian %s: %s", strings.Join(names, " "), line)
			problems++
		}
	}
	if err != nil {
		t.Errorf("lintian: %v", err)
		problems++
	}
	return problems
}

// TestRpmlint runs rpmlint on every architecture's rpm with
// packaging/rpmlint.toml, whose filters each say why: no error and no
// warning.
func TestRpmlint(t *testing.T) {
	need(t, "rpmlint", "cpio")
	p := packages(t)
	var rpms []string
	for _, a := range testArches {
		rpms = append(rpms, p.arch[a.goarch].rpm)
	}
	// rpmlint unpacks the payload itself (rpm2cpio | cpio -id in a
	// temporary directory): plain, as a packager runs it.
	config := filepath.Join(p.root, "packaging/rpmlint.toml")
	cmd := exec.Command("rpmlint", append([]string{"--config", config}, rpms...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	t.Logf("rpmlint:\n%s", out)
	if m := regexp.MustCompile(`(\d+) packages and \d+ specfiles checked; (\d+) errors, (\d+) warnings`).FindStringSubmatch(string(out)); m == nil {
		t.Errorf("rpmlint printed no summary")
	} else if m[1] != strconv.Itoa(len(rpms)) || m[2] != "0" || m[3] != "0" {
		t.Errorf("rpmlint: %s packages checked (want %d), %s errors, %s warnings", m[1], len(rpms), m[2], m[3])
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

// maxExposure is the most `systemd-analyze security` may score the shipped
// unit, in tenths (0 is the most confined, 100 the least, printed as 0.0 to
// 10.0; it scores 29, printed 2.9): a change that loosens the sandbox makes
// this test fail, and must say why here.
const maxExposure = 29

// TestSystemdAnalyze runs systemd's own checks on the unit and the
// kubelet's drop-in as shipped, their /usr/bin/node-resized pointed at the
// binaries packaged (systemd-analyze verify checks that every command
// exists): verify prints nothing, for the unit and for a kubelet.service
// with the drop-in beside it; security --offline scores the sandbox at most
// maxExposure.
func TestSystemdAnalyze(t *testing.T) {
	need(t, "systemd-analyze")
	p := packages(t)
	dir := t.TempDir()
	copyUnit := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(p.root, from))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/usr/bin/node-resized ", filepath.Join(p.bin, "node-resized")+" ")
		if s == string(b) {
			t.Fatalf("%s starts no /usr/bin/node-resized", from)
		}
		write(t, filepath.Join(dir, to), s)
	}
	copyUnit("systemd/node-resized.service", "node-resized.service")
	if err := os.Mkdir(filepath.Join(dir, "kubelet.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyUnit("packaging/kubelet/90-node-resized.conf", "kubelet.service.d/90-node-resized.conf")
	// A kubelet unit as the kubelet's packages ship it, in outline.
	write(t, filepath.Join(dir, "kubelet.service"), "[Unit]\nDescription=kubelet\n\n[Service]\nExecStart=/bin/sleep infinity\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n")

	unit := filepath.Join(dir, "node-resized.service")
	// The folder first in the unit path (the trailing colon keeps
	// systemd's own), so that the drop-in is found.
	cmd := exec.Command("systemd-analyze", "verify", unit, filepath.Join(dir, "kubelet.service"))
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":", "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	cmd = exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", "--threshold="+strconv.Itoa(maxExposure), unit)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0")
	out, err = cmd.CombinedOutput()
	t.Logf("systemd-analyze security --offline=true node-resized.service:\n%s", out)
	m := regexp.MustCompile(`exposure level for node-resized\.service: ([0-9.]+)`).FindSubmatch(out)
	switch {
	case m == nil:
		t.Errorf("systemd-analyze security printed no exposure level (%v)", err)
	case err != nil:
		t.Errorf("systemd-analyze security: exposure %s is above %.1f: the sandbox was loosened (%v)", m[1], float64(maxExposure)/10, err)
	}
}

// TestRpmPayloadUnpacksWhereAsked unpacks the rpm's payload as a packager
// would, plain `rpm2cpio | cpio -idm` in a temporary directory: every
// member name is relative (./usr/bin/node-resized, as rpmbuild writes
// them), so the files land under that directory and nothing outside it.
func TestRpmPayloadUnpacksWhereAsked(t *testing.T) {
	need(t, "rpm2cpio", "cpio")
	p := packages(t)
	list, err := exec.Command("sh", "-c", `rpm2cpio "$1" | cpio -t --quiet`, "sh", p.rpm).Output()
	if err != nil {
		t.Fatalf("rpm2cpio | cpio -t: %v", err)
	}
	names := strings.Fields(string(list))
	if len(names) < 5 {
		t.Fatalf("the payload lists %d names: %q", len(names), names)
	}
	for _, n := range names {
		if filepath.IsAbs(n) || n == ".." || strings.HasPrefix(n, "../") || strings.Contains(n, "/../") {
			t.Errorf("payload member %q is not under the directory it is unpacked in", n)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `rpm2cpio "$1" | cpio -idm --quiet`, "sh", p.rpm)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rpm2cpio | cpio -idm: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/bin/node-resized", "usr/bin/node-resizectl", "usr/lib/systemd/system/node-resized.service"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s not unpacked under %s: %v", f, dir, err)
		}
	}
	t.Logf("%d payload members, all relative; unpacked under %s", len(names), dir)
}
