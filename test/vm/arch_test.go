package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPPC64LEArgs(t *testing.T) {
	c := Config{Arch: PPC64LE, Kernel: "k", Initramfs: "i", Append: "movable_node"}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.QEMU != "qemu-system-ppc64" || c.CPUModel != "power9" {
		t.Errorf("QEMU %q, CPU %q; want qemu-system-ppc64 and power9", c.QEMU, c.CPUModel)
	}
	args := strings.Join(qemuArgs(c, "/d/console.log", "/s/qmp.sock", "/s/agent.sock"), " ")
	for _, want := range []string{
		"-M pseries,x-vof=on,",
		"-accel tcg,thread=single -cpu power9",
		// pseries hot-plugs cores: one socket of single-thread cores.
		"-smp 1,maxcpus=4,sockets=1,cores=4,threads=1",
		"-m 512M,slots=4,maxmem=4096M",
		"-numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3 ",
		"-append console=hvc0 panic=-1 ",
		"cgroup_no_v1=all movable_node",
		"-device virtserialport,bus=vser0.0,chardev=agent,name=node-resized.agent",
		"-serial file:/d/console.log",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	// amd64's workarounds for its APIC and delay loop are amd64's.
	for _, not := range []string{"ttyS0", "possible_cpus", "lpj=", "q35"} {
		if strings.Contains(args, not) {
			t.Errorf("args have %q:\n%s", not, args)
		}
	}

	for _, bad := range []Config{
		// pseries' memory comes in 256 MiB LMBs.
		{Arch: PPC64LE, Kernel: "k", Initramfs: "i", Mem: 384 << 20},
		{Arch: PPC64LE, Kernel: "k", Initramfs: "i", MaxMem: 4<<30 + 128<<20},
		{Arch: PPC64LE, Kernel: "k", Initramfs: "i", VirtioMem: []VirtioMemDevice{{ID: "v", Size: 1 << 30}}},
		{Arch: "riscv64", Kernel: "k", Initramfs: "i"},
	} {
		if err := bad.setDefaults(); err == nil {
			t.Errorf("setDefaults(%+v) accepted a bad config", bad)
		}
	}
}

func TestParseArch(t *testing.T) {
	for in, want := range map[string]Arch{"": AMD64, "amd64": AMD64, "ppc64le": PPC64LE} {
		if got, err := ParseArch(in); err != nil || got != want {
			t.Errorf("ParseArch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseArch("ppc64el"); err == nil || !strings.Contains(err.Error(), "amd64, ppc64le") {
		t.Errorf("ParseArch of Debian's name: %v, want an error naming the known ones", err)
	}
	if PPC64LE.Debian() != "ppc64el" || PPC64LE.CacheDir() != filepath.Join(DefaultCacheDir(), "ppc64le") || AMD64.CacheDir() != DefaultCacheDir() {
		t.Errorf("ppc64le: Debian %q, cache %q; amd64 cache %q", PPC64LE.Debian(), PPC64LE.CacheDir(), AMD64.CacheDir())
	}
	if !PPC64LE.Foreign() || PPC64LE.Busybox() != filepath.Join(PPC64LE.CacheDir(), "busybox", "bin", "busybox") {
		t.Errorf("ppc64le's busybox %q", PPC64LE.Busybox())
	}
}

// A package without a compressed image (Debian's powerpc64le) has its
// ELF vmlinux found.
func TestFindKernelVmlinux(t *testing.T) {
	dir := t.TempDir()
	const ver = "6.1.0-57-powerpc64le"
	root := filepath.Join(dir, "linux-image-"+ver)
	for _, f := range []string{".complete", "boot/vmlinux-" + ver, "boot/config-" + ver} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "current"), []byte("linux-image-"+ver+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := FindKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k.Version != ver || k.Image != filepath.Join(root, "boot", "vmlinux-"+ver) {
		t.Errorf("FindKernel = %+v", k)
	}
}
