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
)

// Guest paths.
const (
	guestSocket     = "/run/nr.sock"
	guestLog        = "/run/nr.log"
	guestPIDFile    = "/run/nr.pid"
	guestKubeletCfg = "/etc/kubelet/config.yaml"
	guestStateFile  = "/var/lib/node-resized/state.json"
	guestCgroupRoot = "/sys/fs/cgroup"
	guestKubepods   = guestCgroupRoot + "/kubepods"
	guestDaemon     = "/bin/node-resized"
	guestCtlDir     = "/opt/ctl"
	guestCtl        = guestCtlDir + "/node-resizectl"
	guestTool       = "/bin/vmtool"
	guestToolsDir   = "/opt/tools"
	guestHotplug    = guestToolsDir + "/hotplugtool"
)

// The kubelet's reservations in the guest's KubeletConfiguration.
const (
	systemReserved = 64 << 20
	kubeReserved   = 32 << 20
	reserved       = systemReserved + kubeReserved
)

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
systemReserved:
  memory: 64Mi
kubeReserved:
  memory: 32Mi
`

// daemonArgs is the daemon's command line in the guest.
var daemonArgs = []string{
	"--standalone",
	"--socket", guestSocket,
	"--log-format", "json",
	"--state-file", guestStateFile,
	"--kubelet-config", guestKubeletCfg,
	"--kubelet-root-dir", `""`,
	"--auto-online",
	"--cgroup-root", guestCgroupRoot,
}

// setupScript lays out the kubepods hierarchy as the kubelet does with the
// cgroupfs driver when it starts on this machine (memory.max = capacity -
// systemReserved - kubeReserved, cpu.weight from the CPU count, the QoS
// cgroups below it), pins kubepods' cpuset.cpus to the online CPUs (as a
// node whose kubepods carries its own CPU list), and starts the daemon.
func setupScript() string {
	args := ""
	for _, a := range daemonArgs {
		args += " " + a
	}
	return `#!/bin/sh
cg=` + guestCgroupRoot + `
kp=` + guestKubepods + `
ctrls="+cpu +cpuset +memory +pids"
fail() { echo "vmscenario setup: $*" >&2; exit 1; }

mkdir -p ` + guestCtlDir + ` && mount -t 9p -o trans=virtio,version=9p2000.L,ro ctl ` + guestCtlDir + ` ||
	fail "mount the CLI's share"
mkdir -p ` + guestToolsDir + ` && mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose tools ` + guestToolsDir + ` ||
	fail "mount the tools' share"

echo "$ctrls" >$cg/cgroup.subtree_control || fail "root subtree_control"
mkdir -p $kp || fail "mkdir kubepods"
echo "$ctrls" >$kp/cgroup.subtree_control || fail "kubepods subtree_control"
for q in burstable besteffort; do
	mkdir -p $kp/$q || fail "mkdir $q"
	echo "$ctrls" >$kp/$q/cgroup.subtree_control || fail "$q subtree_control"
done

# memory.max = MemTotal - systemReserved - kubeReserved
memkb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo)
[ -n "$memkb" ] || fail "no MemTotal"
echo $((memkb * 1024 - ` + fmt.Sprint(reserved) + `)) >$kp/memory.max || fail "memory.max"

# cpu.weight from the online CPU count, as the kubelet converts shares
online=$(cat /sys/devices/system/cpu/online)
ncpu=0
for part in $(echo "$online" | tr , ' '); do
	lo=${part%-*}; hi=${part#*-}
	ncpu=$((ncpu + hi - lo + 1))
done
shares=$((ncpu * 1000 * 1024 / 1000))
[ $shares -lt 2 ] && shares=2
[ $shares -gt 262144 ] && shares=262144
echo $((1 + ((shares - 2) * 9999) / 262142)) >$kp/cpu.weight || fail "cpu.weight"
# the QoS cgroups start at the minimum: no pods yet
echo 1 >$kp/besteffort/cpu.weight || fail "besteffort cpu.weight"
echo 1 >$kp/burstable/cpu.weight || fail "burstable cpu.weight"

echo "$online" >$kp/cpuset.cpus || fail "cpuset.cpus"

mkdir -p /var/lib/node-resized
setsid ` + guestDaemon + args + ` >` + guestLog + ` 2>&1 </dev/null &
echo $! >` + guestPIDFile + `
echo "vmscenario setup: kubepods memory.max=$(cat $kp/memory.max) cpu.weight=$(cat $kp/cpu.weight) cpuset.cpus=$(cat $kp/cpuset.cpus); daemon pid $(cat ` + guestPIDFile + `)"
`
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
		if err := goBuild(filepath.Join(dir, "node-resized"), "./cmd/node-resized", "../.."); err != nil {
			fmt.Fprintln(os.Stderr, "vmscenario:", err)
			return 1
		}
		if err := goBuild(filepath.Join(env.ctlDir, "node-resizectl"), "./cmd/node-resizectl", "../.."); err != nil {
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
	if err := goBuild(filepath.Join(env.toolsDir, "hotplugtool"), "./testdata/hotplugtool", "."); err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	tool := filepath.Join(dir, "vmtool")
	if err := goBuild(tool, "./testdata/vmtool", "."); err != nil {
		fmt.Fprintln(os.Stderr, "vmscenario:", err)
		return 1
	}
	env.initramfs, err = vm.BuildInitramfs(vm.InitramfsConfig{
		Kernel: k,
		Output: filepath.Join(dir, "initramfs.cpio"),
		Files: []vm.File{
			{Path: guestDaemon, Source: filepath.Join(bin, "node-resized"), Mode: 0o755},
			{Path: guestTool, Source: tool, Mode: 0o755},
			{Path: guestKubeletCfg, Data: []byte(kubeletConfig)},
		},
		Setup:   setupScript(),
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

// goBuild builds a static binary of pkg, relative to dir, stripped as
// make build strips the binaries it installs. Stripping also matters here:
// the guest's root is a tmpfs, so every byte of the binaries stays in RAM,
// out of the 96Mi the kubelet configuration reserves for the system (see
// oomInKubepods).
func goBuild(out, pkg, dir string) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	// The tags of make build: the daemon must fit the guest as shipped.
	// go test puts the go command of its own GOROOT first on $PATH.
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
