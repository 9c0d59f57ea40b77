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
	guestCtl        = "/bin/node-resizectl"
	guestProbe      = "/bin/cadvisorprobe"
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

// daemonArgs is the daemon's command line in the guest: test/vmscenario's.
// --auto-online is on as there; on pseries the kernel brings what it
// attaches online itself, and the daemon's write races it (the test
// requires no error either way).
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
// cgroupfs driver on this machine (memory.max = MemTotal - reservations,
// cpu.weight from the CPU count, cpuset.cpus = the online CPUs) and starts
// the daemon: test/vmscenario's setup, without its shares.
func setupScript() string {
	args := ""
	for _, a := range daemonArgs {
		args += " " + a
	}
	return `#!/bin/sh
cg=` + guestCgroupRoot + `
kp=` + guestKubepods + `
ctrls="+cpu +cpuset +memory +pids"
fail() { echo "vmarch setup: $*" >&2; exit 1; }

echo "$ctrls" >$cg/cgroup.subtree_control || fail "root subtree_control"
mkdir -p $kp || fail "mkdir kubepods"
echo "$ctrls" >$kp/cgroup.subtree_control || fail "kubepods subtree_control"
for q in burstable besteffort; do
	mkdir -p $kp/$q || fail "mkdir $q"
done

memkb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo)
[ -n "$memkb" ] || fail "no MemTotal"
echo $((memkb * 1024 - ` + fmt.Sprint(reserved) + `)) >$kp/memory.max || fail "memory.max"

online=$(cat /sys/devices/system/cpu/online)
ncpu=0
for part in $(echo "$online" | tr , ' '); do
	lo=${part%-*}; hi=${part#*-}
	ncpu=$((ncpu + hi - lo + 1))
done
shares=$((ncpu * 1024))
echo $((1 + ((shares - 2) * 9999) / 262142)) >$kp/cpu.weight || fail "cpu.weight"
echo "$online" >$kp/cpuset.cpus || fail "cpuset.cpus"

mkdir -p /var/lib/node-resized
setsid ` + guestDaemon + args + ` >` + guestLog + ` 2>&1 </dev/null &
echo $! >` + guestPIDFile + `
echo "vmarch setup: kubepods memory.max=$(cat $kp/memory.max) cpu.weight=$(cat $kp/cpu.weight) cpuset.cpus=$(cat $kp/cpuset.cpus); daemon pid $(cat ` + guestPIDFile + `)"
`
}

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
		if err := goBuild(arch, filepath.Join(dir, b.out), b.pkg, b.dir); err != nil {
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
			{Path: guestDaemon, Source: filepath.Join(dir, "node-resized"), Mode: 0o755},
			{Path: guestCtl, Source: filepath.Join(dir, "node-resizectl"), Mode: 0o755},
			{Path: guestProbe, Source: filepath.Join(dir, "cadvisorprobe"), Mode: 0o755},
			{Path: guestKubeletCfg, Data: []byte(kubeletConfig)},
		},
		Setup: setupScript(),
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

// goBuild builds a static binary of pkg, relative to dir, for the guest's
// architecture, stripped and with the tags of make build.
func goBuild(arch vm.Arch, out, pkg, dir string) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+string(arch))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for %s: %v\n%s", pkg, arch, err, b)
	}
	return nil
}
