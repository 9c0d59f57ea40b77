package vm

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Arch is a guest architecture the harness can boot, by Go's name for it
// (GOARCH): the binaries built for the guest are built for it.
type Arch string

// The architectures test/vm/fetch can fetch a kernel for and Boot can
// boot.
const (
	// AMD64 is the host's own: a q35 machine with ACPI CPU and memory
	// hotplug.
	AMD64 Arch = "amd64"
	// PPC64LE is a pseries machine (IBM POWER, little-endian): its CPUs
	// are cores hot-plugged as a PAPR hypervisor does it (a hotplug
	// interrupt, then the guest kernel's DLPAR code attaches, and itself
	// onlines, the new CPUs and memory blocks).
	PPC64LE Arch = "ppc64le"
)

// archInfo is what the harness needs to know of an architecture.
type archInfo struct {
	debian string // Debian's name for it: the packages' architecture
	qemu   string // the QEMU binary
	// machine is -M's value; it must support CPU and memory hotplug.
	machine string
	cpu     string // default -cpu
	// coresHotplug says that the machine hot-plugs cores rather than
	// sockets: -smp then puts every CPU slot in one socket.
	coresHotplug bool
	// console is the kernel's console= device for -serial's first port.
	console string
	// modules are the guest's modules when InitramfsConfig.Modules is
	// nil (DefaultModules for amd64).
	modules []string
	// memAlign is the granularity of boot memory and DIMMs.
	memAlign uint64
}

var archs = map[Arch]archInfo{
	AMD64: {
		debian:   "amd64",
		qemu:     "qemu-system-x86_64",
		machine:  "q35",
		cpu:      "qemu64",
		console:  "ttyS0",
		modules:  DefaultModules,
		memAlign: mib,
	},
	PPC64LE: {
		debian: "ppc64el",
		qemu:   "qemu-system-ppc64",
		// x-vof=on: QEMU's Virtual Open Firmware instead of SLOF. It
		// loads the kernel straight away: the guest reached its /init
		// 4.2 s after QEMU started against 16.4 s with SLOF (QEMU 7.2,
		// TCG). The cap-*=broken and cap-ccf-assist=off are the
		// Spectre mitigations TCG does not emulate: the defaults ask
		// for them and QEMU warns once for each.
		machine:      "pseries,x-vof=on,cap-cfpc=broken,cap-sbbc=broken,cap-ibs=broken,cap-ccf-assist=off",
		cpu:          "power9",
		coresHotplug: true,
		console:      "hvc0",
		// Debian's powerpc64le kernel has no virtio_mem.
		modules: []string{"virtio_pci", "virtio_console", "virtio_balloon"},
		// pseries hot-plugs memory in LMBs of 256 MiB, and its boot
		// memory and DIMMs must be multiples of that.
		memAlign: 256 * mib,
	},
}

// Arches lists the architectures the harness knows.
func Arches() []Arch {
	var out []Arch
	for a := range archs {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// ParseArch returns the architecture of a GOARCH name; "" is AMD64.
func ParseArch(s string) (Arch, error) {
	if s == "" {
		return AMD64, nil
	}
	if _, ok := archs[Arch(s)]; !ok {
		names := make([]string, 0, len(archs))
		for _, a := range Arches() {
			names = append(names, string(a))
		}
		return "", fmt.Errorf("unknown guest architecture %q (known: %s)", s, strings.Join(names, ", "))
	}
	return Arch(s), nil
}

func (a Arch) info() archInfo {
	if a == "" {
		a = AMD64
	}
	info, ok := archs[a]
	if !ok {
		panic(fmt.Sprintf("vm: unknown guest architecture %q", string(a)))
	}
	return info
}

// Debian is Debian's name for the architecture ("ppc64el" for ppc64le).
func (a Arch) Debian() string { return a.info().debian }

// QEMU is the binary that emulates the architecture.
func (a Arch) QEMU() string { return a.info().qemu }

// DefaultModules are the modules a guest of this architecture loads when
// InitramfsConfig.Modules is nil.
func (a Arch) DefaultModules() []string { return a.info().modules }

// Foreign says whether the architecture differs from the one this test
// binary runs on: its binaries cannot run here.
func (a Arch) Foreign() bool {
	if a == "" {
		a = AMD64
	}
	return string(a) != runtime.GOARCH
}

// CacheDir is where test/vm/fetch puts the architecture's kernel (and, for
// a foreign architecture, its busybox): DefaultCacheDir itself for amd64,
// as it always was, and a folder named after the architecture in it for
// the others.
func (a Arch) CacheDir() string {
	if a == "" || a == AMD64 {
		return DefaultCacheDir()
	}
	return filepath.Join(DefaultCacheDir(), string(a))
}

// Busybox is the static busybox for a guest of this architecture: Debian's
// busybox-static installed on this machine for its own architecture, the
// one test/vm/fetch unpacked into CacheDir for a foreign one.
func (a Arch) Busybox() string {
	if !a.Foreign() {
		return "/bin/busybox"
	}
	return filepath.Join(a.CacheDir(), "busybox", "bin", "busybox")
}
