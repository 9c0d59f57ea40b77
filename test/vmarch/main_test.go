package vmarch

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// The CLI and cadvisorprobe in the guest's initramfs, beside the daemon
// (whose files are package guesttest's).
const (
	guestCtl   = "/bin/node-resizectl"
	guestProbe = "/bin/cadvisorprobe"
)

// env is what TestMain prepared for the tests.
var env struct {
	arch      vm.Arch
	kernel    vm.Kernel
	initramfs string
	skip      string // why the tests cannot run here; "" when they can
	prepTime  time.Duration
	buildTime time.Duration
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	name := os.Getenv("NODE_RESIZED_VM_ARCH")
	if name == "" {
		name = string(vm.PPC64LE)
	}
	arch, err := vm.ParseArch(name)
	if err == nil && arch == vm.AMD64 {
		err = fmt.Errorf("%s: its guest's hotplug is ACPI's, which test/vmscenario covers", arch)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmarch: NODE_RESIZED_VM_ARCH:", err)
		return 1
	}
	env.arch = arch
	k, skip, err := findKernel(arch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmarch:", err)
		return 1
	}
	if skip != "" {
		env.skip = skip
		return m.Run()
	}
	env.kernel = k
	dir, err := os.MkdirTemp("", "vmarch-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmarch:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bstart := time.Now()
	for _, b := range []struct{ out, pkg, dir string }{
		{"node-resized", "./cmd/node-resized", "../.."},
		{"node-resizectl", "./cmd/node-resizectl", "../.."},
		{"cadvisorprobe", "./testdata/cadvisorprobe", "."},
	} {
		if err := guesttest.GoBuild(arch, filepath.Join(dir, b.out), b.pkg, b.dir); err != nil {
			fmt.Fprintln(os.Stderr, "vmarch:", err)
			return 1
		}
	}
	env.buildTime = time.Since(bstart)
	env.initramfs, err = vm.BuildInitramfs(vm.InitramfsConfig{
		Kernel: k,
		Arch:   arch,
		Output: filepath.Join(dir, "initramfs.cpio"),
		Files: []vm.File{
			{Path: guesttest.DaemonBin, Source: filepath.Join(dir, "node-resized"), Mode: 0o755},
			{Path: guestCtl, Source: filepath.Join(dir, "node-resizectl"), Mode: 0o755},
			{Path: guestProbe, Source: filepath.Join(dir, "cadvisorprobe"), Mode: 0o755},
			{Path: guesttest.KubeletConfigFile, Data: []byte(guesttest.KubeletConfig)},
		},
		// The kubepods layout and the daemon of test/vmscenario's guest,
		// without its shares and its QoS cgroups' controllers.
		Setup: guesttest.Setup{Name: "vmarch"}.Script(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmarch: initramfs:", err)
		return 1
	}
	env.prepTime = time.Since(start)
	return m.Run()
}

// findKernel finds QEMU for arch and the kernel test/vm/fetch unpacked for
// it; with NODE_RESIZED_VM_FETCH=1 it runs fetch itself when either is
// missing. No QEMU at all, even after fetch, is a reason to skip; no
// kernel is an error.
func findKernel(arch vm.Arch) (vm.Kernel, string, error) {
	_, qerr := exec.LookPath(arch.QEMU())
	k, kerr := vm.FindKernel(arch.CacheDir())
	if qerr == nil && kerr == nil {
		return k, "", nil
	}
	if os.Getenv("NODE_RESIZED_VM_FETCH") == "1" {
		if out, err := exec.Command("../vm/fetch", string(arch)).CombinedOutput(); err != nil {
			return vm.Kernel{}, "", fmt.Errorf("test/vm/fetch %s: %v\n%s", arch, err, out)
		}
		_, qerr = exec.LookPath(arch.QEMU())
		k, kerr = vm.FindKernel(arch.CacheDir())
	}
	if qerr != nil {
		return vm.Kernel{}, fmt.Sprintf("no %s on this machine (test/vm/fetch %s installs it)", arch.QEMU(), arch), nil
	}
	if kerr != nil {
		return vm.Kernel{}, "", fmt.Errorf("no %s guest kernel in %s: run test/vm/fetch %s first (or set NODE_RESIZED_VM_FETCH=1): %w",
			arch, arch.CacheDir(), arch, kerr)
	}
	return k, "", nil
}
