package vm

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// AgentPortName is the name of the virtio-serial port the guest agent
// listens on; in the guest it is also linked at /dev/virtio-ports/<name>.
const AgentPortName = "node-resized.agent"

// Guest paths written by the harness.
const (
	// GuestUeventLog gets one line per kernel uevent seen by the guest, in
	// the form "SEQNUM ACTION DEVPATH SUBSYSTEM", read from
	// NETLINK_KOBJECT_UEVENT by busybox's uevent applet.
	GuestUeventLog = "/run/uevents.log"
	// GuestSetupStatus holds the exit status of InitramfsConfig.Setup.
	GuestSetupStatus = "/run/vm-setup.status"
)

// InitramfsConfig describes the guest's initramfs.
type InitramfsConfig struct {
	// Kernel supplies the modules; required.
	Kernel Kernel
	// Arch is the guest's architecture ("" is AMD64): the agent is built
	// for it, and Busybox and Modules default to its own.
	Arch Arch
	// Output is the file to write; "" creates a new file in os.TempDir
	// that the caller removes.
	Output string
	// Busybox is a statically linked busybox; "" means Arch.Busybox():
	// /bin/busybox (Debian's busybox-static) for this machine's own
	// architecture, the one test/vm/fetch unpacked for a foreign one.
	Busybox string
	// Modules to load at boot, dependencies added and built-ins skipped;
	// nil means Arch.DefaultModules() (DefaultModules on amd64).
	Modules []string
	// Files are extra files, e.g. static binaries built with
	// CGO_ENABLED=0. They win over files of the same path.
	Files []File
	// Setup, when not empty, is a shell script that /init runs after the
	// mounts and module loads and before the agent starts. Its output goes
	// to the serial console; its exit status to GuestSetupStatus.
	Setup string
	// Init, when not empty, replaces the harness's /init (and with it the
	// mounts, Setup and busybox init): a shell script run by busybox as
	// PID 1, e.g. one that mounts another root and switch_roots to its
	// init. The archive still holds everything else: the modules and their
	// order in GuestModuleDir/load-order, the agent at GuestAgent (a static
	// binary, test/vm/guestagent, which runs each command with /bin/sh -c;
	// the new init must keep one copy running for Boot and Exec to work) and
	// Setup at /etc/vm/setup.
	Init string
}

// Paths in the initramfs for a custom InitramfsConfig.Init.
const (
	// GuestModuleDir holds the modules as NAME.ko and the file load-order,
	// one name a line, dependencies first.
	GuestModuleDir = "/lib/modules/vm"
	// GuestAgent is the command agent (test/vm/guestagent).
	GuestAgent = "/etc/vm/agent"
)

// File is one extra file of the initramfs: the contents of Source on the
// host, or Data when Source is empty.
type File struct {
	Path   string      // absolute path in the guest
	Source string      // host file to copy
	Data   []byte      // contents when Source is ""
	Mode   fs.FileMode // 0: Source's permissions, or 0644 for Data
}

// BuildInitramfs writes a newc cpio archive with busybox and its applet
// links, the requested kernel modules, the harness's /init and agent, and
// cfg.Files. It returns the archive's path.
func BuildInitramfs(cfg InitramfsConfig) (string, error) {
	if cfg.Kernel.ModulesDir == "" {
		return "", errors.New("build initramfs: no kernel given")
	}
	if cfg.Arch == "" {
		cfg.Arch = AMD64
	}
	if _, err := ParseArch(string(cfg.Arch)); err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	if cfg.Busybox == "" {
		cfg.Busybox = cfg.Arch.Busybox()
	}
	if cfg.Modules == nil {
		cfg.Modules = cfg.Arch.DefaultModules()
	}

	type entry struct {
		data    []byte
		mode    fs.FileMode
		symlink string
	}
	entries := map[string]entry{}
	add := func(p string, mode fs.FileMode, data []byte) {
		entries[cleanArchivePath(p)] = entry{data: data, mode: mode}
	}

	// busybox and its applets.
	bb, err := os.ReadFile(cfg.Busybox)
	if err != nil {
		return "", fmt.Errorf("build initramfs: read busybox: %w", err)
	}
	if err := checkStatic(cfg.Busybox); err != nil {
		return "", fmt.Errorf("build initramfs: %w (install busybox-static)", err)
	}
	add("bin/busybox", 0o755, bb)
	// A foreign busybox cannot run here to list its applets: take the
	// list of this machine's busybox-static, the same Debian release's
	// build (the same configuration on every architecture). An applet
	// it lacks would only answer "applet not found".
	lister := cfg.Busybox
	if cfg.Arch.Foreign() {
		lister = "/bin/busybox"
	}
	list, err := exec.Command(lister, "--list-full").Output()
	if err != nil {
		return "", fmt.Errorf("build initramfs: %s --list-full (the list of applets to link): %w", lister, err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if p := cleanArchivePath(applet); p != "bin/busybox" {
			entries[p] = entry{symlink: "/bin/busybox"}
		}
	}

	// Kernel modules, dependencies first.
	ix, err := loadModuleIndex(cfg.Kernel.ModulesDir)
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	mods, _, err := ix.resolve(cfg.Modules)
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	var order strings.Builder
	for _, m := range mods {
		data, err := os.ReadFile(m.Path)
		if err != nil {
			return "", fmt.Errorf("build initramfs: %w", err)
		}
		add("lib/modules/vm/"+m.Name+".ko", 0o644, data)
		order.WriteString(m.Name + "\n")
	}
	add("lib/modules/vm/load-order", 0o644, []byte(order.String()))

	// The harness's own files.
	if cfg.Init != "" {
		add("init", 0o755, []byte(cfg.Init))
	} else {
		add("init", 0o755, []byte(initScript))
	}
	add("etc/inittab", 0o644, []byte(inittab))
	agent, err := guestAgentBinary(cfg.Arch)
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	add("etc/vm/agent", 0o755, agent)
	add("etc/vm/uevent-hook", 0o755, []byte(ueventHook))
	add("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	add("etc/group", 0o644, []byte("root:x:0:\n"))
	if cfg.Setup != "" {
		add("etc/vm/setup", 0o755, []byte(cfg.Setup))
	}

	// Caller's files.
	for _, f := range cfg.Files {
		if !path.IsAbs(f.Path) {
			return "", fmt.Errorf("build initramfs: file %q: guest path must be absolute", f.Path)
		}
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			st, err := os.Stat(f.Source)
			if err != nil {
				return "", fmt.Errorf("build initramfs: file %s: %w", f.Path, err)
			}
			if data, err = os.ReadFile(f.Source); err != nil {
				return "", fmt.Errorf("build initramfs: file %s: %w", f.Path, err)
			}
			if mode == 0 {
				mode = st.Mode().Perm()
			}
			if err := checkStatic(f.Source); err != nil && !errors.Is(err, errNotELF) {
				return "", fmt.Errorf("build initramfs: file %s: %w (build Go binaries with CGO_ENABLED=0)", f.Path, err)
			}
		} else if mode == 0 {
			mode = 0o644
		}
		add(f.Path, mode, data)
	}

	out := cfg.Output
	var fh *os.File
	if out == "" {
		fh, err = os.CreateTemp("", "node-resized-vm-*.cpio")
	} else {
		fh, err = os.Create(out)
	}
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	out = fh.Name()
	w := newCPIOWriter(fh)
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "root", "mnt", "etc/vm"} {
		w.Dir(d, 0o755)
	}
	for _, p := range sortedKeys(entries) {
		e := entries[p]
		if e.symlink != "" {
			w.Symlink(p, e.symlink)
		} else {
			w.File(p, e.mode, e.data)
		}
	}
	err = w.Close()
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return "", fmt.Errorf("build initramfs %s: %w", out, err)
	}
	return out, nil
}

var errNotELF = errors.New("not an ELF file")

// checkStatic fails when path is a dynamically linked ELF executable: the
// guest has no libc.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, errNotELF)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", filepath.Base(p))
		}
	}
	return nil
}

// initScript is the guest's /init: mounts, cgroup v2 controllers, modules,
// the caller's setup, then busybox init, which runs the agent (inittab).
const initScript = `#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "vm-init: $*" >/dev/console 2>/dev/null || echo "vm-init: $*"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
if mount -t cgroup2 cgroup2 /sys/fs/cgroup; then
	ctrls=
	for c in cpu cpuset memory pids; do
		grep -qw "$c" /sys/fs/cgroup/cgroup.controllers && ctrls="$ctrls +$c"
	done
	echo "$ctrls" >/sys/fs/cgroup/cgroup.subtree_control || say "cannot enable controllers:$ctrls"
else
	say "cannot mount cgroup2 at /sys/fs/cgroup"
fi
while read -r m; do
	insmod "/lib/modules/vm/$m.ko" || say "insmod $m failed"
done </lib/modules/vm/load-order
hostname node-resized-vm
if [ -x /etc/vm/setup ]; then
	/etc/vm/setup
	echo $? >/run/vm-setup.status
fi
say "starting init"
exec /sbin/init
`

const inittab = `::respawn:/bin/busybox uevent /etc/vm/uevent-hook
::respawn:/etc/vm/agent
`

// ueventHook runs once per uevent with the kernel's variables in its
// environment.
const ueventHook = `#!/bin/sh
echo "$SEQNUM $ACTION $DEVPATH $SUBSYSTEM" >>/run/uevents.log
`
