package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// Default timeouts, used when the caller's context has no deadline.
const (
	DefaultBootTimeout = 3 * time.Minute
	DefaultExecTimeout = 2 * time.Minute
	DefaultQMPTimeout  = 30 * time.Second
	DefaultDelTimeout  = 2 * time.Minute
)

// NUMANode is one guest NUMA node.
type NUMANode struct {
	// CPUs is a CPU index range for QEMU's -numa cpus=, e.g. "0-1".
	// Hot-added CPUs join the node their slot belongs to.
	CPUs string
	// Mem is the node's boot memory in bytes (a multiple of 1 MiB); 0
	// makes a memoryless node, to which DIMMs can still be hot-added.
	Mem uint64
}

// Config describes the guest machine. Zero fields take the defaults
// noted, which give a machine with room to grow: one boot CPU of four,
// 512 MiB of 4 GiB in four DIMM slots, node 0 with CPUs 0-1 and all boot
// memory, node 1 with CPUs 2-3 and no memory.
type Config struct {
	Kernel    string // kernel image (Kernel.Image); required
	Initramfs string // from BuildInitramfs; required
	// Arch is the guest's architecture; "" is AMD64. The kernel and the
	// initramfs must be built for it (FindKernel in Arch.CacheDir,
	// InitramfsConfig.Arch).
	Arch Arch
	QEMU string // default Arch.QEMU() from PATH, "qemu-system-x86_64" for amd64
	// Accel is QEMU's -accel value (nested KVM hangs during boot on the
	// hosts we run on). The default is single-threaded TCG,
	// "tcg,thread=single": with two guests of 2 to 4 vCPUs on a 2-core
	// host, one thread per guest boots it to systemd's first unit in
	// about 60% of the time one thread per vCPU takes (22 s against
	// 36 s, two node guests side by side), and their tests run 6 – 31%
	// faster. With UnplugCPUs it is multi-threaded TCG, "tcg".
	Accel string
	// CPUModel is QEMU's -cpu; default "qemu64" (amd64), "power9"
	// (ppc64le). Under TCG, "max" (every
	// feature TCG emulates: AVX2, which glibc's string functions and Go's
	// memmove then use, and more) made a node test cost 17% more host CPU
	// (test/vm's README, "The CPU model").
	CPUModel string
	// UnplugCPUs says that the guest will have a CPU unplugged
	// (DeviceDel of a HotAddCPU device): QEMU 7.2's single-threaded TCG
	// aborts on a vCPU unplug ("qemu_thread_join: Resource deadlock
	// avoided"), so Accel defaults to multi-threaded TCG, and DeviceDel
	// refuses a CPU's unplug without it rather than lose the guest.
	UnplugCPUs bool
	// Dir receives console.log (the guest's serial console) and qemu.log
	// (QEMU's own output). "" uses a temporary folder that Close removes.
	Dir     string
	CPUs    int // CPUs at boot; default 1
	MaxCPUs int // CPU slots; default 4
	// Mem is the boot memory in bytes, a multiple of 1 MiB (of 256 MiB
	// on ppc64le, its memory hotplug unit); default 512 MiB.
	Mem    uint64
	Slots  int    // DIMM slots; default 4
	MaxMem uint64 // boot plus hot-pluggable memory; default 4 GiB
	// NUMA lists the nodes; nil means two nodes that split the CPU slots,
	// node 0 holding all boot memory; an empty non-nil slice means no
	// NUMA options at all.
	NUMA []NUMANode
	// Append is added to the kernel command line.
	Append string
	// Shares are host folders exported to the guest over virtio-9p; the
	// guest mounts one with "mount -t 9p -o trans=virtio,version=9p2000.L
	// TAG DIR" once the 9p modules (ShareModules) are loaded.
	Shares []Share
	// UserNet gives the guest a virtio-net card on QEMU's user-mode network
	// (slirp): the guest is 10.0.2.15/24 by convention and reaches this
	// machine's loopback at 10.0.2.2 (GuestHostIP); nothing outside can
	// reach the guest. The guest configures the card itself (the virtio_net
	// module, an address and a default route).
	UserNet bool
	// VirtioMem are virtio-mem devices the guest boots with (see
	// VirtioMemDevice). QEMU counts each one's Size against MaxMem, in the
	// same area as the DIMMs: Mem plus the sizes must fit in MaxMem. A zero
	// MaxMem is then 4 GiB plus the sizes, leaving the DIMMs the room they
	// have without virtio-mem. The guest needs the virtio_mem module
	// (DefaultModules has it).
	VirtioMem []VirtioMemDevice
	// Disks are raw image files the guest sees as virtio-blk disks, in
	// order (see Disk).
	Disks []Disk
	// ExtraArgs are added to QEMU's arguments.
	ExtraArgs []string
	// EarlyStall bounds the boot's early stage, the kernel's and the
	// initramfs's: until the console shows EarlyDone, a console that has
	// printed nothing new for EarlyStall ends the boot with
	// ErrEarlyStall, so that a caller can boot again rather than wait out
	// the whole boot timeout. Zero (or an empty EarlyDone) turns it off.
	// The early stage prints steadily: the kernel as it probes, and an
	// initramfs that says each step before it takes it.
	EarlyStall time.Duration
	EarlyDone  string
}

// ErrEarlyStall is the cause of a boot whose early stage stopped printing
// (Config.EarlyStall).
var ErrEarlyStall = errors.New("the guest's console stopped before the early stage ended")

// Share is one host folder exported to the guest (QEMU -virtfs, local
// backend, security_model=none: the guest sees the files with their host
// owners and modes, and writes as the user QEMU runs as).
type Share struct {
	Tag      string // mount tag the guest mounts by
	Path     string // host folder
	ReadOnly bool
}

// GuestHostIP is the address at which a guest with Config.UserNet reaches
// this machine's loopback interface.
const GuestHostIP = "10.0.2.2"

// ShareModules are the modules a guest needs to mount Config.Shares and to
// put an overlay on them; NetModules are those Config.UserNet needs. Pass
// them in InitramfsConfig.Modules with DefaultModules.
var (
	ShareModules = []string{"9pnet_virtio", "9p", "overlay"}
	NetModules   = []string{"virtio_net"}
)

// VM is a running QEMU guest. Its methods are safe for concurrent use;
// Exec requests run in the guest one at a time.
type VM struct {
	cfg       Config
	dir       string
	removeDir bool
	sockDir   string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when QEMU has exited and been reaped
	waitErr   error         // QEMU's exit status; read after exited is closed
	listener  net.Listener
	agent     *agentClient
	qmp       *QMP
	bootTime  time.Duration
	started   time.Time // when QEMU was started

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards nextDev, backends and execs
	nextDev int
	// execs counts Exec's commands by program (the command's first
	// word), for ExecStats.
	execs map[string]*execStat
	// backends maps a hot-added DIMM's device id to its memory backend.
	backends map[string]string
}

// KernelCmdline is the kernel command line every guest gets after its
// console= (the architecture's first serial port: ttyS0, or hvc0 on
// ppc64le), followed on amd64 by a preset "lpj=" (see presetLPJ) and
// "possible_cpus=9" when MaxCPUs <= 8 (see physflatPossibleCPUs), then by
// Config.Append: reboot (hence QEMU exit) on panic, hot-added memory left
// offline (the ACPI path; pseries' DLPAR onlines what it adds in the
// kernel, whatever this says), cgroup v2 only.
const KernelCmdline = "panic=-1 memhp_default_state=offline " +
	"systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all"

func (c *Config) setDefaults() error {
	if c.Kernel == "" || c.Initramfs == "" {
		return errors.New("config: Kernel and Initramfs are required")
	}
	if c.Arch == "" {
		c.Arch = AMD64
	}
	if _, err := ParseArch(string(c.Arch)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	arch := c.Arch.info()
	if c.QEMU == "" {
		c.QEMU = arch.qemu
	}
	if c.Accel == "" {
		c.Accel = "tcg,thread=single"
		if c.UnplugCPUs {
			c.Accel = "tcg"
		}
	}
	if c.CPUModel == "" {
		c.CPUModel = arch.cpu
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if c.MaxCPUs == 0 {
		c.MaxCPUs = 4
	}
	if c.Mem == 0 {
		c.Mem = 512 * mib
	}
	if c.Slots == 0 {
		c.Slots = 4
	}
	if c.MaxMem == 0 {
		c.MaxMem = 4*gib + virtioMemTotal(c.VirtioMem)
	}
	if c.NUMA == nil {
		if c.MaxCPUs < 2 {
			c.NUMA = []NUMANode{}
		} else {
			half := c.MaxCPUs / 2
			c.NUMA = []NUMANode{
				{CPUs: cpuRange(0, half-1), Mem: c.Mem},
				{CPUs: cpuRange(half, c.MaxCPUs-1)},
			}
		}
	}
	for _, sh := range c.Shares {
		if sh.Tag == "" || sh.Path == "" || strings.ContainsAny(sh.Tag+sh.Path, ",") {
			return fmt.Errorf("config: share %+v needs a tag and a path, without commas", sh)
		}
	}
	if c.CPUs > c.MaxCPUs {
		return fmt.Errorf("config: CPUs %d > MaxCPUs %d", c.CPUs, c.MaxCPUs)
	}
	if c.Mem%arch.memAlign != 0 || c.MaxMem%arch.memAlign != 0 || c.Mem > c.MaxMem {
		return fmt.Errorf("config: Mem %d and MaxMem %d must be multiples of %d MiB (%s), Mem <= MaxMem", c.Mem, c.MaxMem, arch.memAlign/mib, c.Arch)
	}
	if len(c.NUMA) > 0 {
		var sum uint64
		for _, n := range c.NUMA {
			if n.Mem%arch.memAlign != 0 {
				return fmt.Errorf("config: NUMA node memory %d is not a multiple of %d MiB (%s)", n.Mem, arch.memAlign/mib, c.Arch)
			}
			sum += n.Mem
		}
		if sum != c.Mem {
			return fmt.Errorf("config: NUMA node memory adds up to %d, Mem is %d", sum, c.Mem)
		}
	}
	if err := c.checkDisks(); err != nil {
		return err
	}
	return c.checkVirtioMem()
}

func cpuRange(lo, hi int) string {
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// qemuArgs returns QEMU's command line for a configured machine.
func qemuArgs(c Config, consoleLog, qmpSock, agentSock string) []string {
	arch := c.Arch.info()
	// One CPU per socket: NUMA nodes then never split a socket (which
	// makes Linux warn that LLC siblings sit on different nodes). A
	// machine that hot-plugs cores (pseries) gets one socket of
	// single-thread cores instead: a core is its unit of hotplug.
	smp := fmt.Sprintf("%d,maxcpus=%d,sockets=%d,cores=1,threads=1", c.CPUs, c.MaxCPUs, c.MaxCPUs)
	if arch.coresHotplug {
		smp = fmt.Sprintf("%d,maxcpus=%d,sockets=1,cores=%d,threads=1", c.CPUs, c.MaxCPUs, c.MaxCPUs)
	}
	args := []string{
		"-M", arch.machine, "-accel", c.Accel, "-cpu", c.CPUModel,
		"-smp", smp,
		"-m", fmt.Sprintf("%dM,slots=%d,maxmem=%dM", c.Mem/mib, c.Slots, c.MaxMem/mib),
	}
	for i, n := range c.NUMA {
		node := fmt.Sprintf("node,nodeid=%d", i)
		if n.CPUs != "" {
			node += ",cpus=" + n.CPUs
		}
		if n.Mem > 0 {
			args = append(args, "-object", fmt.Sprintf("memory-backend-ram,id=m%d,size=%dM", i, n.Mem/mib))
			node += fmt.Sprintf(",memdev=m%d", i)
		}
		args = append(args, "-numa", node)
	}
	args = append(args, virtioMemArgs(c.VirtioMem)...)
	args = append(args, diskArgs(c.Disks)...)
	cmdline := "console=" + arch.console + " " + KernelCmdline
	if c.Arch == AMD64 {
		if !strings.Contains(c.Append, "lpj=") {
			cmdline += " " + presetLPJ()
		}
		if c.MaxCPUs <= 8 && !strings.Contains(c.Append, "possible_cpus=") {
			cmdline += " " + physflatPossibleCPUs
		}
	}
	if c.Append != "" {
		cmdline += " " + c.Append
	}
	args = append(args,
		"-kernel", c.Kernel, "-initrd", c.Initramfs, "-append", cmdline,
		"-nodefaults", "-nographic", "-no-reboot",
		"-serial", "file:"+consoleLog,
		"-qmp", "unix:"+qmpSock+",server=on,wait=off",
		"-chardev", "socket,id=agent,path="+agentSock,
		"-device", "virtio-serial-pci,id=vser0",
		"-device", "virtserialport,bus=vser0.0,chardev=agent,name="+AgentPortName,
	)
	for i, sh := range c.Shares {
		// multidevs=remap: a share that spans several host file systems
		// (such as /) keeps inode numbers unique in the guest.
		fs := fmt.Sprintf("local,id=fs%d,path=%s,security_model=none,multidevs=remap", i, sh.Path)
		if sh.ReadOnly {
			fs += ",readonly=on"
		}
		args = append(args, "-fsdev", fs, "-device", fmt.Sprintf("virtio-9p-pci,fsdev=fs%d,mount_tag=%s", i, sh.Tag))
	}
	if c.UserNet {
		args = append(args, "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0")
	}
	return append(args, c.ExtraArgs...)
}

// physflatPossibleCPUs makes Linux route APIC interrupts in physical
// rather than logical flat mode, which it does when more than 8 CPUs are
// possible. With 8 or fewer, the Debian 6.1 guest under QEMU 7.2 TCG
// never delivers IPIs to a hot-added CPU: it wakes only on its own timer,
// so memory offlining (which flushes per-CPU work) took 10-30 s and a
// process placed on that CPU stalled. The cost: the guest's
// /sys/devices/system/cpu/possible reads 0-8 instead of 0-(MaxCPUs-1);
// present and online are unchanged. Config.Append with its own
// possible_cpus= overrides it.
const physflatPossibleCPUs = "possible_cpus=9"

// presetLPJ returns a "lpj=" kernel option. Under TCG a hot-added CPU's
// delay-loop calibration fails and falls back to a slow convergence loop
// that can stall onlining for minutes (seen: "calibrate_delay_direct()
// failed", then "echo 1 >online" hung in D state). A preset value skips
// calibration on every CPU. The guest's TSC runs at the host's rate, so
// the value is the host's MHz over HZ (250 in Debian kernels); it only
// scales udelay.
func presetLPJ() string {
	mhz := 2000.0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, val, ok := strings.Cut(line, ":")
			if ok && strings.TrimSpace(k) == "cpu MHz" {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && f > 0 {
					mhz = f
				}
				break
			}
		}
	}
	return fmt.Sprintf("lpj=%d", int64(mhz*1e6/250))
}

// Boot starts QEMU and waits until the guest's agent answers. ctx bounds
// the boot only (DefaultBootTimeout when it has no deadline); the VM runs
// until Close. On error nothing is left running.
func Boot(ctx context.Context, cfg Config) (*VM, error) {
	return boot(ctx, cfg)
}

func boot(ctx context.Context, cfg Config) (_ *VM, err error) {
	start := time.Now()
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("boot vm: %w", err)
	}
	ctx, cancel := withDefaultTimeout(ctx, DefaultBootTimeout)
	defer cancel()

	v := &VM{cfg: cfg, dir: cfg.Dir, exited: make(chan struct{}), backends: map[string]string{}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("boot vm: %w%s", err, v.diagnostics())
			v.Close()
		}
	}()
	if v.dir == "" {
		if v.dir, err = os.MkdirTemp("", "node-resized-vm-"); err != nil {
			return nil, err
		}
		v.removeDir = true
	}
	// Unix socket paths are limited to 108 bytes: keep them short.
	if v.sockDir, err = os.MkdirTemp("", "nrvm"); err != nil {
		return nil, err
	}
	qmpSock := filepath.Join(v.sockDir, "qmp.sock")
	agentSock := filepath.Join(v.sockDir, "agent.sock")
	if v.listener, err = net.Listen("unix", agentSock); err != nil {
		return nil, err
	}

	qlog, err := os.Create(filepath.Join(v.dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer qlog.Close()
	v.cmd = exec.Command(cfg.QEMU, qemuArgs(cfg, v.ConsoleLog(), qmpSock, agentSock)...)
	v.cmd.Stdout, v.cmd.Stderr = qlog, qlog
	v.cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(qlog, "+ %s\n", shellQuote(v.cmd.Args))
	if err := v.cmd.Start(); err != nil {
		close(v.exited)
		return nil, fmt.Errorf("start %s: %w", cfg.QEMU, err)
	}
	v.started = time.Now()
	go func() {
		v.waitErr = v.cmd.Wait()
		close(v.exited)
	}()

	// From here on, give up as soon as QEMU exits.
	ctx, cancelExit := context.WithCancelCause(ctx)
	defer cancelExit(nil)
	go func() {
		select {
		case <-v.exited:
			cancelExit(fmt.Errorf("qemu exited: %v", v.waitErr))
		case <-ctx.Done():
		}
	}()
	cause := func(err error) error {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", err, c)
		}
		return err
	}
	if cfg.EarlyStall > 0 && cfg.EarlyDone != "" {
		go v.watchEarlyStage(ctx, cancelExit)
	}

	// QEMU connects to the agent socket at startup, long before the guest
	// opens its end of the port.
	conn, err := acceptContext(ctx, v.listener)
	if err != nil {
		return nil, cause(fmt.Errorf("wait for qemu to connect the agent socket: %w", err))
	}
	v.agent = newAgentClient(conn)
	if v.qmp, err = DialQMP(ctx, qmpSock); err != nil {
		return nil, cause(err)
	}

	// The first request waits in the socket until the guest opens the
	// port; ask again now and then in case one is lost.
	for {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		out, code, err := v.agent.exec(actx, "echo ready")
		acancel()
		if err == nil && code == 0 && strings.TrimSpace(out) == "ready" {
			break
		}
		if ctx.Err() != nil {
			return nil, cause(fmt.Errorf("wait for the guest agent: %w", ctx.Err()))
		}
		if errors.Is(err, errAgentClosed) {
			return nil, cause(fmt.Errorf("wait for the guest agent: %w", err))
		}
	}
	v.bootTime = time.Since(start)
	return v, nil
}

// shellQuote renders a command line for the log, quoting arguments with
// spaces.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t'\"") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func acceptContext(ctx context.Context, ln net.Listener) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		ln.Close() // unblocks Accept
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
		return nil, ctx.Err()
	}
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Exec runs cmd with sh -c in the guest and returns its standard output
// and standard error together, and its exit code. err is about the
// transport (timeout, VM gone), never about the exit code. Without a
// deadline in ctx, DefaultExecTimeout applies; a command still running
// when ctx ends goes on in the guest and delays later commands.
// A command that starts a daemon must redirect the daemon's output.
func (v *VM) Exec(ctx context.Context, cmd string) (out string, exitCode int, err error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultExecTimeout)
	defer cancel()
	t0 := time.Now()
	out, exitCode, err = v.agent.exec(ctx, cmd)
	v.countExec(cmd, time.Since(t0))
	if err != nil {
		return out, exitCode, fmt.Errorf("exec %q in guest: %w", cmd, err)
	}
	return out, exitCode, nil
}

type execStat struct {
	n    int
	wall time.Duration
}

func (v *VM) countExec(cmd string, d time.Duration) {
	prog, _, _ := strings.Cut(strings.TrimSpace(cmd), " ")
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.execs == nil {
		v.execs = map[string]*execStat{}
	}
	st := v.execs[prog]
	if st == nil {
		st = &execStat{}
		v.execs[prog] = st
	}
	st.n++
	st.wall += d
}

// ExecStats sums up the commands Exec ran, for the test bed's own
// accounting: how many, and for the programs that took longest in all,
// how many and their wall time (each started process costs the emulated
// guest CPU: a systemctl or journalctl most of a second).
func (v *VM) ExecStats() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	type row struct {
		prog string
		execStat
	}
	var rows []row
	var n int
	var wall time.Duration
	for p, st := range v.execs {
		rows = append(rows, row{p, *st})
		n += st.n
		wall += st.wall
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].wall > rows[j].wall })
	out := fmt.Sprintf("%d in %v", n, wall.Round(time.Second))
	for i, r := range rows {
		if i == 8 {
			break
		}
		out += fmt.Sprintf("; %s %d in %v", r.prog, r.n, r.wall.Round(100*time.Millisecond))
	}
	return out
}

// QMP returns the VM's QMP client, for commands this package does not
// wrap.
func (v *VM) QMP() *QMP { return v.qmp }

// BootTime is how long Boot took from its start to the agent's first
// answer.
func (v *VM) BootTime() time.Duration { return v.bootTime }

// ConsoleLog is the path of the file that receives the guest's serial
// console.
func (v *VM) ConsoleLog() string { return filepath.Join(v.dir, "console.log") }

// Dir is the folder that holds console.log and qemu.log.
func (v *VM) Dir() string { return v.dir }

// Done is closed when QEMU has exited.
func (v *VM) Done() <-chan struct{} { return v.exited }

// HostCPU is the host CPU time QEMU has used so far (user and system,
// all its threads) and how long it has run: what the guest cost the
// machine, for the test bed's own accounting.
func (v *VM) HostCPU() (cpu, alive time.Duration, err error) {
	if v.cmd == nil || v.cmd.Process == nil {
		return 0, 0, errors.New("qemu not started")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", v.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command's closing parenthesis: state is the
	// first, utime and stime the 12th and 13th (proc(5): 14 and 15).
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", v.cmd.Process.Pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat: %w", v.cmd.Process.Pid, err)
		}
		ticks += n
	}
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return time.Duration(ticks) * time.Second / userHZ, time.Since(v.started), nil
}

// Close quits QEMU (QMP quit, then SIGKILL to its process group if it has
// not exited within 10 s), waits for it and releases everything Boot made.
// It is safe to call more than once and returns the same error each time.
func (v *VM) Close() error {
	v.closeOnce.Do(func() { v.closeErr = v.shutdown() })
	return v.closeErr
}

func (v *VM) shutdown() error {
	var errs []error
	if v.cmd != nil && v.cmd.Process != nil {
		select {
		case <-v.exited:
		default:
			if v.qmp != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v.qmp.Execute(ctx, "quit", nil, nil) // the connection may drop before the reply
				cancel()
			}
			select {
			case <-v.exited:
			case <-time.After(10 * time.Second):
				errs = append(errs, errors.New("qemu did not quit within 10s; killed"))
			}
		}
		// Kill the whole group: QEMU and anything it may have started.
		killGroup(v.cmd.Process.Pid)
		select {
		case <-v.exited:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("qemu (pid %d) not reaped 10s after SIGKILL", v.cmd.Process.Pid))
		}
	}
	if v.qmp != nil {
		v.qmp.Close()
	}
	if v.agent != nil {
		v.agent.close()
	}
	if v.listener != nil {
		v.listener.Close()
	}
	if v.sockDir != "" {
		os.RemoveAll(v.sockDir)
	}
	if v.removeDir {
		os.RemoveAll(v.dir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("close vm: %w", errors.Join(errs...))
	}
	return nil
}

// watchEarlyStage cancels the boot with ErrEarlyStall when the console
// has not grown for Config.EarlyStall before it shows Config.EarlyDone.
// It returns when the boot ends either way.
func (v *VM) watchEarlyStage(ctx context.Context, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var size int64
	grew := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fi, err := os.Stat(v.ConsoleLog())
		if err != nil || fi.Size() != size {
			if err == nil {
				size = fi.Size()
			}
			grew = time.Now()
			continue
		}
		if b, err := os.ReadFile(v.ConsoleLog()); err == nil && bytes.Contains(b, []byte(v.cfg.EarlyDone)) {
			return
		}
		if time.Since(grew) >= v.cfg.EarlyStall {
			cancel(fmt.Errorf("%w: nothing new for %v, before %q", ErrEarlyStall, v.cfg.EarlyStall, v.cfg.EarlyDone))
			return
		}
	}
}

// diagnostics returns the tails of the console and QEMU logs, to append to
// a boot error.
func (v *VM) diagnostics() string {
	if v.dir == "" {
		return ""
	}
	var b strings.Builder
	for _, name := range []string{"qemu.log", "console.log"} {
		if t := tailFile(filepath.Join(v.dir, name), 25); t != "" {
			fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", name, t)
		}
	}
	return b.String()
}

// tailFile returns the last n lines of a file, "" if it cannot be read.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// TailConsole returns the last n lines of the guest's serial console.
func (v *VM) TailConsole(n int) string { return tailFile(v.ConsoleLog(), n) }
