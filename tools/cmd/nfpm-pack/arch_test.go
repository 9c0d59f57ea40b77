package main

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// testArch is an architecture the packages are built for: its names in Go
// (and nfpm), in a deb, in an rpm and in qemu-user, and what the ELF
// header of its binaries says.
type testArch struct {
	goarch, deb, rpm, qemu string
	machine                elf.Machine
	order                  binary.ByteOrder
}

// testArches are every architecture make package builds for. ppc64le's
// binaries say EM_PPC64 (the little-endian ABI is the byte order, not the
// machine), s390x's are the only big-endian ones.
var testArches = []testArch{
	{"amd64", "amd64", "x86_64", "x86_64", elf.EM_X86_64, binary.LittleEndian},
	{"arm64", "arm64", "aarch64", "aarch64", elf.EM_AARCH64, binary.LittleEndian},
	{"ppc64le", "ppc64el", "ppc64le", "ppc64le", elf.EM_PPC64, binary.LittleEndian},
	{"s390x", "s390x", "s390x", "s390x", elf.EM_S390, binary.BigEndian},
}

// checkELFArch checks that the binary at path is a 64-bit executable of a's.
func checkELFArch(t *testing.T, path string, a testArch) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != a.machine || f.ByteOrder != a.order {
		t.Errorf("%s: %v %v %v, want %s's: %v %v %v", path, f.Class, f.Machine, f.ByteOrder, a.goarch, elf.ELFCLASS64, a.machine, a.order)
	}
}

// TestForeignPackages installs each architecture's deb that is not this
// machine's with dpkg --root into an empty root whose dpkg knows that
// architecture (dpkg --add-architecture, as on a multiarch system; no
// --force-architecture), unpacks its rpm with rpm2cpio | cpio, checks that
// the binaries of both are static and that architecture's, runs them
// under qemu-user (their --version and --help are those of this machine's
// binaries, whose --help made the manual pages every package ships), and
// purges the deb.
func TestForeignPackages(t *testing.T) {
	need(t, "dpkg", "rpm2cpio", "cpio")
	needRoot(t)
	p := packages(t)
	for _, a := range testArches {
		if a.goarch == runtime.GOARCH {
			continue
		}
		qemu := "qemu-" + a.qemu + "-static"
		if _, err := exec.LookPath(qemu); err != nil {
			t.Fatalf("%s is needed to run the %s binaries (on Debian: apt-get install qemu-user-static): %v", qemu, a.goarch, err)
		}
		t.Run(a.goarch, func(t *testing.T) {
			t.Parallel()
			pkgs := p.arch[a.goarch]

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
			dpkg("--add-architecture", a.deb)
			dpkg("--install", pkgs.deb)
			checkInstalled(t, root, "deb")
			if st := dpkg("--status", "node-resized"); !strings.Contains(st, "\nArchitecture: "+a.deb+"\n") || !strings.Contains(st, "Status: install ok installed") {
				t.Errorf("dpkg --status, want installed for %s:\n%s", a.deb, st)
			}

			unpacked := t.TempDir()
			cmd := exec.Command("sh", "-c", `rpm2cpio "$1" | cpio -idm --quiet`, "sh", pkgs.rpm)
			cmd.Dir = unpacked
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("rpm2cpio | cpio -idm: %v\n%s", err, out)
			}

			for _, tree := range []string{root, unpacked} {
				for _, b := range packagedBinaries {
					path := filepath.Join(tree, "usr/bin", b)
					checkStatic(t, path)
					checkELFArch(t, path, a)
				}
			}
			want := output(t, "", filepath.Join(p.bin, "node-resized"), "--version")
			if got := output(t, "", qemu, filepath.Join(root, "usr/bin/node-resized"), "--version"); got != want || !strings.HasPrefix(got, "node-resized ") {
				t.Errorf("%s node-resized --version: %q, want %q", qemu, got, want)
			}
			for _, c := range []struct {
				bin  string
				args []string
			}{
				{"node-resized", nil},
				{"node-resized", []string{"kubelet-prestart"}},
				{"node-resizectl", nil},
				{"node-resizectl", []string{"resize"}},
			} {
				host := helpText(t, filepath.Join(p.bin, c.bin), c.args...)
				foreign := helpText(t, qemu, append([]string{filepath.Join(root, "usr/bin", c.bin)}, c.args...)...)
				if foreign != host {
					t.Errorf("%s %s --help under %s differs from this machine's, which made the manual pages:\n%s\nthis machine's:\n%s", c.bin, strings.Join(c.args, " "), qemu, foreign, host)
				}
			}

			dpkg("--purge", "node-resized")
			for _, f := range shipped("deb") {
				if _, err := os.Lstat(filepath.Join(root, f.path)); err == nil {
					t.Errorf("dpkg --purge left %s", f.path)
				}
			}
		})
	}
}

// TestPackRefusesOtherArchitectures asks nfpm-pack for an arm64 package of
// this machine's binaries, and for two architectures from one directory:
// it refuses both and writes nothing.
func TestPackRefusesOtherArchitectures(t *testing.T) {
	p := packages(t)
	other := "arm64"
	if runtime.GOARCH == other {
		other = "amd64"
	}
	for _, c := range []struct {
		arch, bin, want string
	}{
		{other, p.bin, "executable for " + other + ": build it with GOARCH=" + other},
		{runtime.GOARCH + "," + other, p.bin, "needs {arch} in it"},
		{"aarch64", p.bin, `unknown architecture "aarch64"`},
	} {
		out := t.TempDir()
		cmd := exec.Command(p.tool, "-root", p.root, "-arch", c.arch, "-bin", c.bin, "-out", out, "-version", testVersion)
		msg, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(msg), c.want) {
			t.Errorf("nfpm-pack -arch %s -bin %s: %v, %q; want a failure saying %q", c.arch, c.bin, err, msg, c.want)
		}
		if left, _ := os.ReadDir(out); len(left) > 0 {
			t.Errorf("nfpm-pack -arch %s wrote %v", c.arch, left)
		}
	}
}
