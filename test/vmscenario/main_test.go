package vmscenario

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

// The guest's CLI and tools, from read-only shares but for vmtool (the
// daemon's files are package guesttest's).
const (
	guestCtlDir   = "/opt/ctl"
	guestCtl      = guestCtlDir + "/node-resizectl"
	guestTool     = "/bin/vmtool"
	guestToolsDir = "/opt/tools"
	guestHotplug  = guestToolsDir + "/hotplugtool"
)

// setup is the guest's setup script: it mounts the shares of the CLI and
// the tools, lays out kubepods with the QoS cgroups' controllers and
// starts the daemon (see guesttest.Setup).
var setup = guesttest.Setup{
	Name: "vmscenario",
	Prepare: `mkdir -p ` + guestCtlDir + ` && mount -t 9p -o trans=virtio,version=9p2000.L,ro ctl ` + guestCtlDir + ` ||
	fail "mount the CLI's share"
mkdir -p ` + guestToolsDir + ` && mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose tools ` + guestToolsDir + ` ||
	fail "mount the tools' share"`,
	QoS: true,
}

// env is what TestMain prepared for the tests.
var env struct {
	kernel    vm.Kernel
	initramfs string
	dir       string
	ctlDir    string // the host folder of node-resizectl, the guest's guestCtlDir
	toolsDir  string // the host folder of hotplugtool, the guest's guestToolsDir
	prepTime  time.Duration
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	k, err := findKernel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	env.kernel = k
	dir, err := os.MkdirTemp("", "vmscenario-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	env.dir = dir
	// The daemon lives in the initramfs, in the guest's RAM, as the
	// thing whose footprint the OOM scenario's room measures; the CLI is
	// only the test's tool and comes from a read-only share, as from a
	// disk.
	bin := os.Getenv("NODE_RESIZED_VM_BINDIR")
	env.ctlDir = bin
	if bin == "" {
		bin = dir
		env.ctlDir = filepath.Join(dir, "ctl")
		if err := os.Mkdir(env.ctlDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "vmscenario:", err)
			return 1
		}
		if err := guesttest.GoBuild("", filepath.Join(dir, "node-resized"), "./cmd/node-resized", "../.."); err != nil {
			fmt.Fprintln(os.Stderr, "vmscenario:", err)
			return 1
		}
		if err := guesttest.GoBuild("", filepath.Join(env.ctlDir, "node-resizectl"), "./cmd/node-resizectl", "../.."); err != nil {
			fmt.Fprintln(os.Stderr, "vmscenario:", err)
			return 1
		}
	}
	// hotplugtool is the tests' own, built from this tree whatever
	// NODE_RESIZED_VM_BINDIR says; it comes from a share too (it is
	// 9 MB, the guest's RAM is counted).
	env.toolsDir = filepath.Join(dir, "tools")
	if err := os.Mkdir(env.toolsDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	if err := guesttest.GoBuild("", filepath.Join(env.toolsDir, "hotplugtool"), "./testdata/hotplugtool", "."); err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	tool := filepath.Join(dir, "vmtool")
	if err := guesttest.GoBuild("", tool, "./testdata/vmtool", "."); err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	env.initramfs, err = vm.BuildInitramfs(vm.InitramfsConfig{
		Kernel: k,
		Output: filepath.Join(dir, "initramfs.cpio"),
		Files: []vm.File{
			{Path: guesttest.DaemonBin, Source: filepath.Join(bin, "node-resized"), Mode: 0o755},
			{Path: guestTool, Source: tool, Mode: 0o755},
			{Path: guesttest.KubeletConfigFile, Data: []byte(guesttest.KubeletConfig)},
		},
		Setup:   setup.Script(),
		Modules: append(append([]string{}, vm.DefaultModules...), vm.ShareModules...),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario: initramfs:", err)
		return 1
	}
	env.prepTime = time.Since(start)
	return m.Run()
}

// findKernel finds qemu and the kernel test/vm/fetch unpacks; with
// NODE_RESIZED_VM_FETCH=1 it runs fetch itself when either is missing.
func findKernel() (vm.Kernel, error) {
	_, qerr := exec.LookPath("qemu-system-x86_64")
	k, kerr := vm.FindKernel("")
	if qerr == nil && kerr == nil {
		return k, nil
	}
	if os.Getenv("NODE_RESIZED_VM_FETCH") != "1" {
		what := "no cached guest kernel in " + vm.DefaultCacheDir()
		if qerr != nil {
			what = "no qemu-system-x86_64"
		}
		return vm.Kernel{}, fmt.Errorf("%s: run test/vm/fetch first (or set NODE_RESIZED_VM_FETCH=1)", what)
	}
	if out, err := exec.Command("../vm/fetch").CombinedOutput(); err != nil {
		return vm.Kernel{}, fmt.Errorf("test/vm/fetch: %v\n%s", err, out)
	}
	return vm.FindKernel("")
}
