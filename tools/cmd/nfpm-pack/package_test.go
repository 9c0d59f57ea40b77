package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	rpmutils "github.com/sassoftware/go-rpmutils"
)

// The packages are built once per test binary, by the real command, into a
// directory removed when the tests end.
const testVersion = "v1.2.3-4-gabc1234" // package version 1.2.3+git4.abc1234

type built struct {
	dir  string // everything the tests build
	root string // the repository root
	bin  string // static binaries that run here
	tool string // nfpm-pack
	// deb and rpm are the packages of this machine's architecture (the
	// ones the tests install and run); arch has every architecture's.
	deb  string
	rpm  string
	arch map[string]archPackages
	err  error
}

// archPackages are one architecture's binaries and packages.
type archPackages struct {
	bin, deb, rpm string
}

var (
	fixtureOnce sync.Once
	fixture     built
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// need fails the test when a program the packaging tests use is missing.
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is needed (on Debian: apt-get install dpkg-dev rpm): %v", p, err)
		}
	}
}

// needRoot skips a test that installs into a temporary root: dpkg and rpm
// refuse to install without root, and rpm runs its scriptlets in a chroot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing into a temporary root needs root (dpkg --root, rpm --root with a chroot); run make package-test as root")
	}
}

// output runs a command and returns its standard output; a failure is fatal
// and shows the standard error.
func output(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

func packages(t *testing.T) *built {
	t.Helper()
	need(t, "go")
	fixtureOnce.Do(func() { fixture.err = build() })
	if fixture.err != nil {
		t.Fatal(fixture.err)
	}
	return &fixture
}

func build() error {
	dir, err := os.MkdirTemp("", "nfpm-pack-test-")
	if err != nil {
		return err
	}
	fixture.dir = dir
	root, err := filepath.Abs("../../..")
	if err != nil {
		return err
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(mod, []byte("module github.com/node-resized/node-resized\n")) {
		return fmt.Errorf("%s is not the repository root (go.mod: %v)", root, err)
	}
	fixture.root = root

	// make package-test passes the binaries make build wrote, and make
	// build-cross's in linux_<arch> below them; alone, the test builds
	// every architecture's as make build-cross does.
	fixture.bin = os.Getenv("NODE_RESIZED_BIN")
	crossBin := filepath.Join(fixture.bin, "linux_{arch}")
	if fixture.bin == "" {
		crossBin = filepath.Join(dir, "bin", "linux_{arch}")
		fixture.bin = archBin(crossBin, runtime.GOARCH)
		for _, a := range testArches {
			for _, cmd := range packagedBinaries {
				b := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+testVersion,
					"-o", filepath.Join(archBin(crossBin, a.goarch), cmd), "./cmd/"+cmd)
				b.Dir = root
				b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+a.goarch)
				if out, err := b.CombinedOutput(); err != nil {
					return fmt.Errorf("build %s for %s: %v\n%s", cmd, a.goarch, err, out)
				}
			}
		}
	}

	tool := filepath.Join(dir, "nfpm-pack")
	fixture.tool = tool
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("build nfpm-pack: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "dist")
	var goarches []string
	for _, a := range testArches {
		goarches = append(goarches, a.goarch)
	}
	cmd := exec.Command(tool, "-root", root, "-arch", strings.Join(goarches, ","), "-bin", crossBin,
		"-help-bin", fixture.bin, "-out", out, "-version", testVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	list, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("nfpm-pack: %v\n%s", err, stderr.Bytes())
	}
	// nfpm's conventional names with the version dpkg and rpm accept and
	// each format's name of the architecture, one architecture after the
	// other.
	fixture.arch = map[string]archPackages{}
	var want []string
	for _, a := range testArches {
		p := archPackages{
			bin: archBin(crossBin, a.goarch),
			deb: filepath.Join(out, "node-resized_1.2.3+git4.abc1234_"+a.deb+".deb"),
			rpm: filepath.Join(out, "node-resized-1.2.3+git4.abc1234-1."+a.rpm+".rpm"),
		}
		fixture.arch[a.goarch] = p
		want = append(want, p.deb, p.rpm)
	}
	if got := strings.Fields(string(list)); !slices.Equal(got, want) {
		return fmt.Errorf("nfpm-pack wrote %q, want %q", got, want)
	}
	host, ok := fixture.arch[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("no package is built for this machine's architecture, %s", runtime.GOARCH)
	}
	fixture.deb, fixture.rpm = host.deb, host.rpm
	return nil
}

// shippedFile is a file the packages hold: path, mode and whether it is a
// configuration file kept across upgrades.
// only is "deb" or "rpm" for a file of one package.
type shippedFile struct {
	path   string
	mode   fs.FileMode
	config bool
	only   string
}

var shippedAll = []shippedFile{
	{"/etc/default/node-resized", 0o644, true, ""},
	{"/usr/bin/node-resized", 0o755, false, ""},
	{"/usr/bin/node-resizectl", 0o755, false, ""},
	{"/usr/lib/systemd/system/node-resized.service", 0o644, false, ""},
	{"/usr/lib/systemd/system/kubelet.service.d/90-node-resized.conf", 0o644, false, ""},
	{"/usr/share/bash-completion/completions/node-resizectl", 0o644, false, ""},
	{"/usr/share/man/man8/node-resized.8.gz", 0o644, false, ""},
	{"/usr/share/man/man1/node-resizectl.1.gz", 0o644, false, ""},
	{"/usr/share/node-resized/prometheus/node-resized-alerts.yaml", 0o644, false, ""},
	{"/usr/share/node-resized/grafana/node-resized-dashboard.json", 0o644, false, ""},
	{"/usr/share/doc/node-resized/copyright", 0o644, false, "deb"},
	{"/usr/share/doc/node-resized/changelog.gz", 0o644, false, "deb"},
	{"/usr/share/lintian/overrides/node-resized", 0o644, false, "deb"},
	{"/usr/share/licenses/node-resized/LICENSE", 0o644, false, "rpm"},
}

// shipped lists the files of one package.
func shipped(format string) []shippedFile {
	var out []shippedFile
	for _, f := range shippedAll {
		if f.only == "" || f.only == format {
			out = append(out, f)
		}
	}
	return out
}

// The directories the deb holds (dpkg removes them when they empty).
var debDirs = []string{
	"/etc/", "/etc/default/",
	"/usr/", "/usr/bin/", "/usr/lib/", "/usr/lib/systemd/", "/usr/lib/systemd/system/", "/usr/lib/systemd/system/kubelet.service.d/",
	"/usr/share/", "/usr/share/bash-completion/", "/usr/share/bash-completion/completions/",
	"/usr/share/man/", "/usr/share/man/man1/", "/usr/share/man/man8/",
	"/usr/share/node-resized/", "/usr/share/node-resized/prometheus/", "/usr/share/node-resized/grafana/",
	"/usr/share/doc/", "/usr/share/doc/node-resized/", "/usr/share/lintian/", "/usr/share/lintian/overrides/",
}

// TestDebContents checks each architecture's deb: its files and their
// modes, its control fields and scripts, and the files it unpacks.
func TestDebContents(t *testing.T) {
	need(t, "dpkg-deb")
	p := packages(t)
	for _, a := range testArches {
		t.Run(a.goarch, func(t *testing.T) { checkDeb(t, p, a) })
	}
}

func checkDeb(t *testing.T, p *built, a testArch) {
	deb := p.arch[a.goarch].deb
	want := map[string]string{}
	for _, d := range debDirs {
		want["."+d] = "drwxr-xr-x root/root"
	}
	for _, f := range shipped("deb") {
		want["."+f.path] = f.mode.String() + " root/root"
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(output(t, "", "dpkg-deb", "-c", deb)), "\n") {
		// drwxr-xr-x root/root 0 2026-01-01 00:00 ./etc/
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("dpkg-deb -c: unexpected line %q", line)
		}
		got[f[5]] = f[0] + " " + f[1]
	}
	for path, mode := range want {
		if got[path] != mode {
			t.Errorf("%s: %q, want %q", path, got[path], mode)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("unexpected file in the deb: %s", path)
		}
	}

	fields := map[string]string{}
	for _, name := range []string{"Package", "Version", "Architecture", "Section", "Priority", "Maintainer", "Depends", "Pre-Depends", "Suggests", "Description"} {
		fields[name] = strings.TrimSpace(output(t, "", "dpkg-deb", "-f", deb, name))
	}
	for name, want := range map[string]string{
		"Package":      "node-resized",
		"Version":      "1.2.3+git4.abc1234",
		"Architecture": a.deb,
		"Section":      "admin",
		"Priority":     "optional",
		"Depends":      "", // static binaries: nothing
		"Pre-Depends":  "",
		"Suggests":     "bash-completion",
	} {
		if fields[name] != want {
			t.Errorf("control field %s = %q, want %q", name, fields[name], want)
		}
	}
	if !regexp.MustCompile(`^[^<>]+ <[^@<>]+@[^@<>]+>$`).MatchString(fields["Maintainer"]) {
		t.Errorf("Maintainer = %q, want a name and an address", fields["Maintainer"])
	}
	if !strings.HasPrefix(fields["Description"], "Follow CPU and memory hotplug") {
		t.Errorf("Description = %q", fields["Description"])
	}

	// The control archive: conffiles and the maintainer scripts as written.
	ctrl := t.TempDir()
	output(t, "", "dpkg-deb", "-e", deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	if err != nil {
		t.Fatal(err)
	}
	if string(conffiles) != "/etc/default/node-resized\n" {
		t.Errorf("conffiles = %q, want /etc/default/node-resized alone", conffiles)
	}
	info := output(t, "", "dpkg-deb", "-I", deb)
	for script, src := range map[string]string{"postinst": "deb/postinst", "prerm": "deb/prerm", "postrm": "deb/postrm"} {
		assertSame(t, filepath.Join(ctrl, script), filepath.Join(p.root, "packaging/scripts", src))
		if st, err := os.Stat(filepath.Join(ctrl, script)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v (%v), want 0755", script, st.Mode(), err)
		}
		if !regexp.MustCompile(`(?m)^\s+\d+ bytes,\s+\d+ lines\s+\*\s+` + script + `\s`).MatchString(info) {
			t.Errorf("dpkg-deb -I does not list %s as an executable script:\n%s", script, info)
		}
	}
	if _, err := os.Stat(filepath.Join(ctrl, "preinst")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deb has a preinst (%v); none was written", err)
	}

	data := t.TempDir()
	output(t, "", "dpkg-deb", "-x", deb, data)
	checkTree(t, p.root, data, a)
	assertSame(t, filepath.Join(data, "usr/share/doc/node-resized/copyright"), filepath.Join(p.root, "packaging/debian/copyright"))
	assertSame(t, filepath.Join(data, "usr/share/lintian/overrides/node-resized"), filepath.Join(p.root, "packaging/debian/lintian-overrides"))
	// A native package's changelog, newest entry the package's version.
	cl := output(t, "", "dpkg-parsechangelog", "-l", filepath.Join(data, "usr/share/doc/node-resized/changelog.gz"), "-S", "Version")
	if got := strings.TrimSpace(cl); got != "1.2.3+git4.abc1234" {
		t.Errorf("the changelog's newest version is %q, want the package's", got)
	}
}

// checkTree checks the files of an unpacked package of architecture a
// against the sources.
func checkTree(t *testing.T, repo, tree string, a testArch) {
	t.Helper()
	unit := filepath.Join(tree, "usr/lib/systemd/system/node-resized.service")
	assertSame(t, unit, filepath.Join(repo, "systemd/node-resized.service"))
	checkUnit(t, unit, "/usr/bin")
	assertSame(t, filepath.Join(tree, "etc/default/node-resized"), filepath.Join(repo, "packaging/default/node-resized"))
	assertSame(t, filepath.Join(tree, "usr/share/bash-completion/completions/node-resizectl"), filepath.Join(repo, "packaging/completion/node-resizectl.bash"))
	for _, b := range packagedBinaries {
		checkStatic(t, filepath.Join(tree, "usr/bin", b))
		checkELFArch(t, filepath.Join(tree, "usr/bin", b), a)
	}
}

func assertSame(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Error(err)
		return
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// checkUnit checks the lines a node agent's unit needs, each in its section.
func checkUnit(t *testing.T, path, bindir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	have := map[string]bool{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		default:
			have[section+line] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"[Unit]StartLimitIntervalSec=0",
		"[Service]Type=notify",
		"[Service]EnvironmentFile=-/etc/default/node-resized",
		"[Service]ExecStart=" + bindir + "/node-resized $NODE_RESIZED_ARGS",
		"[Service]ExecStopPost=-" + bindir + "/node-resized kubelet-recover $NODE_RESIZED_ARGS",
		"[Service]Restart=always",
		"[Service]WatchdogSec=30s",
		"[Service]NoNewPrivileges=yes",
		"[Install]WantedBy=multi-user.target",
	} {
		if !have[want] {
			t.Errorf("%s: no %q", path, want)
		}
	}
}

// checkStatic checks that a binary needs no dynamic loader and no library.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader: not static", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs %v: not static", path, libs)
	}
}

// TestRPMContents checks each architecture's rpm: its files with their
// modes and flags, its header, requirements and scriptlets, and the files
// it unpacks.
func TestRPMContents(t *testing.T) {
	need(t, "rpm")
	p := packages(t)
	for _, a := range testArches {
		t.Run(a.goarch, func(t *testing.T) { checkRPM(t, p, a) })
	}
}

func checkRPM(t *testing.T, p *built, a testArch) {
	rpm := p.arch[a.goarch].rpm

	got := map[string]string{}
	list := output(t, "", "rpm", "-qp", "--qf", `[%{FILENAMES}\t%{FILEMODES:perms}\t%{FILEUSERNAME}:%{FILEGROUPNAME}\t%{FILEFLAGS:fflags}\n]`, rpm)
	for _, line := range strings.Split(list, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 2)
		got[f[0]] = f[1]
	}
	want := map[string]string{}
	for _, f := range shipped("rpm") {
		flags := ""
		if f.config {
			flags = "cn" // %config(noreplace)
		}
		if strings.HasPrefix(f.path, "/usr/share/licenses/") {
			flags = "l" // %license
		}
		if strings.HasPrefix(f.path, "/usr/share/man/") {
			flags = "d" // %doc
		}
		want[f.path] = f.mode.String() + "\troot:root\t" + flags
	}
	for path, w := range want {
		if got[path] != w {
			t.Errorf("%s: %q, want %q", path, got[path], w)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("unexpected file in the rpm: %s", path)
		}
	}
	if l := strings.Fields(output(t, "", "rpm", "-qlp", rpm)); len(l) != len(shipped("rpm")) {
		t.Errorf("rpm -qlp lists %d files, want %d: %v", len(l), len(shipped("rpm")), l)
	}
	if got := output(t, "", "rpm", "-qp", "--qf", "%{LICENSE}", rpm); got != "Apache-2.0" {
		t.Errorf("rpm License: %q, want Apache-2.0", got)
	}
	// The %changelog's newest entry is this version-release.
	if got := output(t, "", "rpm", "-qp", "--qf", "%{CHANGELOGNAME}", rpm); !strings.HasSuffix(got, " - 1.2.3+git4.abc1234-1") {
		t.Errorf("rpm %%changelog's newest entry: %q, want one for 1.2.3+git4.abc1234-1", got)
	}

	if got, want := output(t, "", "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}", rpm), "node-resized 1.2.3+git4.abc1234 1 "+a.rpm; got != want {
		t.Errorf("rpm header: %q, want %q", got, want)
	}
	// The scriptlets' shell and systemd, and what rpm may add itself
	// (rpmlib features).
	var reqs []string
	for _, req := range strings.Split(output(t, "", "rpm", "-qpR", rpm), "\n") {
		if req != "" && !strings.HasPrefix(req, "rpmlib(") {
			reqs = append(reqs, req)
		}
	}
	if want := []string{"/bin/sh", "systemd"}; !slices.Equal(reqs, want) {
		t.Errorf("rpm requires %q, want %q", reqs, want)
	}
	// Each scriptlet is the script written for rpm.
	for tag, src := range map[string]string{"POSTIN": "rpm/post", "PREUN": "rpm/preun", "POSTUN": "rpm/postun", "PREIN": ""} {
		got := output(t, "", "rpm", "-qp", "--qf", "%{"+tag+"}", rpm)
		want := "(none)"
		if src != "" {
			b, err := os.ReadFile(filepath.Join(p.root, "packaging/scripts", src))
			if err != nil {
				t.Fatal(err)
			}
			want = strings.TrimRight(string(b), "\n")
		}
		if strings.TrimRight(got, "\n") != want {
			t.Errorf("%s scriptlet:\n%s\nwant %s", tag, got, want)
		}
	}

	data := t.TempDir()
	// Unpacked in Go, with the paths kept under data (the payload's names
	// are absolute).
	f, err := os.Open(rpm)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := rpmutils.ReadRpm(f)
	if err != nil {
		t.Fatalf("read %s: %v", rpm, err)
	}
	if err := r.ExpandPayload(data); err != nil {
		t.Fatalf("unpack %s: %v", rpm, err)
	}
	checkTree(t, p.root, data, a)
}

// TestDebInstallPurge installs the deb into a temporary root, upgrades it in
// place, removes and purges it. dpkg runs the maintainer scripts outside the
// root with DPKG_ROOT set, as for any installation into another root.
func TestDebInstallPurge(t *testing.T) {
	need(t, "dpkg")
	needRoot(t)
	p := packages(t)

	root := t.TempDir()
	admin := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		mkdir(t, filepath.Join(admin, d))
	}
	for _, f := range []string{"status", "available"} {
		write(t, filepath.Join(admin, f), "")
	}
	dpkg := func(args ...string) string {
		return output(t, "", "dpkg", append([]string{"--root=" + root, "--force-script-chrootless"}, args...)...)
	}

	dpkg("--install", p.deb)
	checkInstalled(t, root, "deb")
	listed := strings.Fields(dpkg("--listfiles", "node-resized"))
	for _, f := range shipped("deb") {
		if !slices.Contains(listed, f.path) {
			t.Errorf("dpkg -L does not list %s: %v", f.path, listed)
		}
	}
	if st := dpkg("--status", "node-resized"); !strings.Contains(st, "Status: install ok installed") {
		t.Errorf("dpkg -s:\n%s", st)
	}

	// What a running daemon and an administrator leave behind.
	made := pretendUsed(t, root)

	// An upgrade (the same version again takes the same path: prerm and
	// postrm upgrade) keeps the state and the edited configuration.
	dpkg("--install", p.deb)
	checkInstalled(t, root, "deb")
	for _, f := range made {
		mustExist(t, filepath.Join(root, f))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/default/node-resized")); !strings.Contains(string(b), `NODE_RESIZED_ARGS="--standalone"`) {
		t.Error("an upgrade lost the edited /etc/default/node-resized")
	}

	// Remove: the programs go, the configuration and the state stay.
	dpkg("--remove", "node-resized")
	for _, f := range shipped("deb") {
		if _, err := os.Lstat(filepath.Join(root, f.path)); f.config != (err == nil) {
			t.Errorf("after dpkg --remove: %s: %v", f.path, err)
		}
	}
	for _, f := range made {
		mustExist(t, filepath.Join(root, f))
	}

	// Purge: nothing of the package is left, only the dpkg database and the
	// directories the test made.
	dpkg("--purge", "node-resized")
	if st, err := os.ReadFile(filepath.Join(admin, "status")); err != nil || strings.Contains(string(st), "Package: node-resized") {
		t.Errorf("after dpkg --purge, the dpkg database still knows the package (%v):\n%s", err, st)
	}
	left := leftovers(t, root, func(rel string, d fs.DirEntry) bool {
		// deb-systemd-helper's state directories (emptied by the purge)
		// are there on any Debian system.
		return rel == "var/lib/dpkg" || strings.HasPrefix(rel, "var/lib/dpkg/") ||
			(d.IsDir() && (rel == "var/lib/systemd" || strings.HasPrefix(rel, "var/lib/systemd/"))) ||
			(d.IsDir() && slices.Contains([]string{"var", "var/lib", "run", "etc", "etc/systemd", "etc/systemd/system", "etc/systemd/system/multi-user.target.wants"}, rel))
	})
	if len(left) > 0 {
		t.Errorf("dpkg --purge left %v", left)
	}
}

// TestRPMInstallErase installs the rpm into a temporary root, reinstalls it
// (the upgrade path) and erases it. rpm runs the scriptlets chrooted in the
// root, so the root gets a shell and rm copied from this machine, and
// /run/systemd/system as on a machine booted with systemd (but no
// systemctl).
func TestRPMInstallErase(t *testing.T) {
	need(t, "rpm", "ldd")
	needRoot(t)
	p := packages(t)

	root := t.TempDir()
	scaffold := chrootShell(t, root)
	mkdir(t, filepath.Join(root, "run/systemd/system"))
	rpm := func(args ...string) string {
		return output(t, "", "rpm", append([]string{"--root", root, "--dbpath", "/var/lib/rpm"}, args...)...)
	}
	rpm("--initdb")
	// --nodeps: the empty root's database has no /bin/sh and no systemd.
	rpm("--install", "--nodeps", p.rpm)
	checkInstalled(t, root, "rpm")
	if got := strings.Fields(rpm("-ql", "node-resized")); len(got) != len(shipped("rpm")) {
		t.Errorf("rpm -ql: %v", got)
	}

	made := pretendUsed(t, root)
	rpm("--reinstall", "--nodeps", p.rpm)
	checkInstalled(t, root, "rpm")
	for _, f := range made {
		mustExist(t, filepath.Join(root, f))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/default/node-resized")); !strings.Contains(string(b), `NODE_RESIZED_ARGS="--standalone"`) {
		t.Error("a reinstall lost the edited /etc/default/node-resized")
	}

	// Erase: rpm removes what it packaged and keeps the edited
	// configuration as .rpmsave. Nothing else is deleted by a scriptlet:
	// with systemctl, %preun disables the service (its links) and
	// node-resized --uninstall removes the state file
	// (TestScriptsWithSystemd); this root has no systemctl, so what the
	// daemon and the administrator made is left as it was.
	rpm("--erase", "node-resized")
	left := leftovers(t, root, func(rel string, d fs.DirEntry) bool {
		return d.IsDir() || scaffold[rel] || strings.HasPrefix(rel, "var/lib/rpm/") ||
			rel == "etc/default/node-resized.rpmsave" || slices.Contains(made, rel)
	})
	if len(left) > 0 {
		t.Errorf("rpm --erase left %v", left)
	}
	for _, f := range shipped("rpm") {
		if _, err := os.Lstat(filepath.Join(root, f.path)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("rpm --erase left %s (%v)", f.path, err)
		}
	}
}

// chrootShell copies /bin/sh and rm with the libraries they load into root
// and returns the paths it made, relative to root.
func chrootShell(t *testing.T, root string) map[string]bool {
	t.Helper()
	made := map[string]bool{}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src) // through symlinks
		if err != nil {
			t.Fatal(err)
		}
		mkdir(t, filepath.Dir(filepath.Join(root, dst)))
		if err := os.WriteFile(filepath.Join(root, dst), b, 0o755); err != nil {
			t.Fatal(err)
		}
		made[strings.TrimPrefix(dst, "/")] = true
	}
	for _, prog := range []string{"/bin/sh", "/bin/rm"} {
		copyFile(prog, prog)
		// libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
		// /lib64/ld-linux-x86-64.so.2 (0x...)
		for _, line := range strings.Split(output(t, "", "ldd", prog), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/") {
				copyFile(f[2], f[2])
			} else if len(f) >= 1 && strings.HasPrefix(f[0], "/") {
				copyFile(f[0], f[0])
			}
		}
	}
	if out, err := exec.Command("chroot", root, "/bin/sh", "-c", "rm -f /nothing && echo ok").CombinedOutput(); err != nil || string(out) != "ok\n" {
		t.Fatalf("the shell does not run in the chroot: %v\n%s", err, out)
	}
	return made
}

// checkInstalled checks the packaged files in root and their modes.
func checkInstalled(t *testing.T, root, format string) {
	t.Helper()
	for _, f := range shipped(format) {
		st, err := os.Lstat(filepath.Join(root, f.path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if st.Mode() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, st.Mode(), f.mode)
		}
	}
	checkUnit(t, filepath.Join(root, "usr/lib/systemd/system/node-resized.service"), "/usr/bin")
	checkDropIn(t, filepath.Join(root, "usr/lib/systemd/system/kubelet.service.d/90-node-resized.conf"), "/usr/bin")
}

// checkDropIn checks the kubelet's drop-in at path: it runs the pre-start
// from bindir with the daemon's flags, its failure ignored.
func checkDropIn(t *testing.T, path, bindir string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	want := []string{"[Service]", "EnvironmentFile=-/etc/default/node-resized",
		"ExecStartPre=-" + bindir + "/node-resized kubelet-prestart $NODE_RESIZED_ARGS"}
	if !slices.Equal(lines, want) {
		t.Errorf("%s: %q, want %q", path, lines, want)
	}
}

// pretendUsed makes in root what the daemon makes while it runs (its state,
// one moved aside as unreadable, its socket), what `systemctl enable` makes,
// and edits the configuration. It returns the files, relative to root.
func pretendUsed(t *testing.T, root string) []string {
	t.Helper()
	files := []string{
		"var/lib/node-resized/state.json",
		"var/lib/node-resized/state.json.corrupt-20260101T000000",
		"run/node-resized/node-resized.sock",
	}
	for _, f := range files {
		mkdir(t, filepath.Dir(filepath.Join(root, f)))
		write(t, filepath.Join(root, f), "{}\n")
	}
	link := "etc/systemd/system/multi-user.target.wants/node-resized.service"
	mkdir(t, filepath.Dir(filepath.Join(root, link)))
	if err := os.Symlink("/usr/lib/systemd/system/node-resized.service", filepath.Join(root, link)); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc/default/node-resized")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	write(t, conf, string(b)+"NODE_RESIZED_ARGS=\"--standalone\"\n")
	return append(files, link)
}

// leftovers lists what is in root, relative to it, except what keep accepts.
func leftovers(t *testing.T, root string, keep func(rel string, d fs.DirEntry) bool) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		if !keep(rel, d) {
			left = append(left, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	return left
}

func mustExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Error(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
