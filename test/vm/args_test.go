package vm

import (
	"context"
	"strings"
	"testing"
)

func intp(i int) *int { return &i }

func TestDefaultsAndArgs(t *testing.T) {
	c := Config{Kernel: "k", Initramfs: "i"}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(c, "/d/console.log", "/s/qmp.sock", "/s/agent.sock"), " ")
	for _, want := range []string{
		"-M q35 -accel tcg,thread=single -cpu qemu64",
		"-smp 1,maxcpus=4,sockets=4,cores=1,threads=1",
		"-m 512M,slots=4,maxmem=4096M",
		"-object memory-backend-ram,id=m0,size=512M -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3 ",
		"-qmp unix:/s/qmp.sock,server=on,wait=off",
		"-chardev socket,id=agent,path=/s/agent.sock",
		"-device virtserialport,bus=vser0.0,chardev=agent,name=node-resized.agent",
		"-serial file:/d/console.log",
		"-no-reboot",
		"memhp_default_state=offline",
		"cgroup_no_v1=all",
		"possible_cpus=9",
		"lpj=",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}

	c = Config{Kernel: "k", Initramfs: "i", UnplugCPUs: true}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(qemuArgs(c, "c", "q", "a"), " "); !strings.Contains(args, "-accel tcg -cpu qemu64") {
		t.Errorf("a guest whose CPUs are unplugged runs single-threaded TCG:\n%s", args)
	}
	for accel, want := range map[string]bool{"tcg,thread=single": true, "tcg": false, "tcg,thread=multi": false, "kvm": false, "tcg,tb-size=256,thread=single": true} {
		if got := singleThreaded(accel); got != want {
			t.Errorf("singleThreaded(%q) = %v, want %v", accel, got, want)
		}
	}

	c = Config{Kernel: "k", Initramfs: "i", MaxCPUs: 16, Mem: 1 << 30, Append: "lpj=1",
		NUMA: []NUMANode{{CPUs: "0-7", Mem: 512 << 20}, {CPUs: "8-15", Mem: 512 << 20}}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	args = strings.Join(qemuArgs(c, "c", "q", "a"), " ")
	if strings.Contains(args, "possible_cpus") || strings.Count(args, "lpj=") != 1 {
		t.Errorf("unexpected cmdline options for 16 CPUs and a preset lpj:\n%s", args)
	}
	if !strings.Contains(args, "memdev=m1") {
		t.Errorf("node 1 memory missing:\n%s", args)
	}

	for _, bad := range []Config{
		{Kernel: "k"},
		{Kernel: "k", Initramfs: "i", CPUs: 5},
		{Kernel: "k", Initramfs: "i", Mem: 1000},
		{Kernel: "k", Initramfs: "i", NUMA: []NUMANode{{CPUs: "0", Mem: 256 << 20}}},
	} {
		if err := bad.setDefaults(); err == nil {
			t.Errorf("setDefaults(%+v) accepted a bad config", bad)
		}
	}
}

func TestFreeCPUSlot(t *testing.T) {
	cpus := []HotpluggableCPU{
		{Type: "max-x86_64-cpu", Props: CPUProps{NodeID: intp(1), SocketID: intp(3), CoreID: intp(0), ThreadID: intp(0)}},
		{Type: "max-x86_64-cpu", Props: CPUProps{NodeID: intp(1), SocketID: intp(2), CoreID: intp(0), ThreadID: intp(0)}, QOMPath: "/machine/peripheral/x"},
		{Type: "max-x86_64-cpu", Props: CPUProps{NodeID: intp(0), SocketID: intp(1), CoreID: intp(0), ThreadID: intp(0)}},
		{Type: "max-x86_64-cpu", Props: CPUProps{NodeID: intp(0), SocketID: intp(0), CoreID: intp(0), ThreadID: intp(0)}, QOMPath: "/machine/unattached/device[0]"},
	}
	slot := freeCPUSlot(cpus, 1)
	if slot == nil || *slot.Props.SocketID != 3 {
		t.Fatalf("slot = %+v, want socket 3", slot)
	}
	args, err := cpuDeviceArgs(*slot, "c9")
	if err != nil {
		t.Fatal(err)
	}
	if args["driver"] != "max-x86_64-cpu" || args["id"] != "c9" || args["socket-id"] != float64(3) ||
		args["node-id"] != float64(1) || args["thread-id"] != float64(0) {
		t.Errorf("device_add args %v", args)
	}
	if _, ok := args["die-id"]; ok {
		t.Errorf("absent die-id passed: %v", args)
	}
	if freeCPUSlot(cpus[1:2], 1) != nil {
		t.Error("an occupied slot was offered")
	}
}

func TestSharesAndUserNet(t *testing.T) {
	c := Config{Kernel: "k", Initramfs: "i", UserNet: true, Shares: []Share{
		{Tag: "root", Path: "/", ReadOnly: true},
		{Tag: "out", Path: "/tmp/out"},
	}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(c, "c", "q", "a"), " ")
	for _, want := range []string{
		"-fsdev local,id=fs0,path=/,security_model=none,multidevs=remap,readonly=on -device virtio-9p-pci,fsdev=fs0,mount_tag=root",
		"-fsdev local,id=fs1,path=/tmp/out,security_model=none,multidevs=remap -device virtio-9p-pci,fsdev=fs1,mount_tag=out",
		"-netdev user,id=net0 -device virtio-net-pci,netdev=net0",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	bad := Config{Kernel: "k", Initramfs: "i", Shares: []Share{{Tag: "x", Path: "/a,b"}}}
	if err := bad.setDefaults(); err == nil {
		t.Error("a share path with a comma was accepted")
	}
}

func TestVirtioMemArgs(t *testing.T) {
	c := Config{Kernel: "k", Initramfs: "i", VirtioMem: []VirtioMemDevice{
		{ID: "vmem0", Size: 1 << 30},
		{ID: "vmem1", Node: 1, Size: 512 << 20, BlockSize: 128 << 20, RequestedSize: 256 << 20},
	}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.MaxMem != 4<<30+1<<30+512<<20 {
		t.Errorf("default MaxMem %d MiB, want 4 GiB plus the devices' 1.5 GiB", c.MaxMem>>20)
	}
	args := strings.Join(qemuArgs(c, "c", "q", "a"), " ")
	for _, want := range []string{
		"-m 512M,slots=4,maxmem=5632M",
		"-object memory-backend-ram,id=vmem0-mem,size=1024M -device virtio-mem-pci,id=vmem0,memdev=vmem0-mem,node=0,requested-size=0M ",
		"-object memory-backend-ram,id=vmem1-mem,size=512M -device virtio-mem-pci,id=vmem1,memdev=vmem1-mem,node=1,requested-size=256M,block-size=128M ",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	if strings.Count(args, "block-size=") != 1 {
		t.Errorf("a block size was set for the device that takes QEMU's default:\n%s", args)
	}
	// The devices come after the NUMA nodes they name.
	if strings.Index(args, "virtio-mem-pci") < strings.LastIndex(args, "-numa") {
		t.Errorf("virtio-mem before the NUMA nodes:\n%s", args)
	}

	// An explicit MaxMem must leave room: QEMU refuses the device
	// otherwise ("not enough space ... for memory devices").
	fits := Config{Kernel: "k", Initramfs: "i", Mem: 512 << 20, MaxMem: 1536 << 20,
		VirtioMem: []VirtioMemDevice{{ID: "v", Size: 1 << 30}}}
	if err := fits.setDefaults(); err != nil {
		t.Errorf("512 MiB + 1 GiB in MaxMem 1.5 GiB refused: %v", err)
	}

	for name, bad := range map[string][]VirtioMemDevice{
		"no id":             {{Size: 1 << 30}},
		"comma":             {{ID: "a,b", Size: 1 << 30}},
		"same id":           {{ID: "v", Size: 1 << 30}, {ID: "v", Size: 1 << 30}},
		"no size":           {{ID: "v"}},
		"size not blocks":   {{ID: "v", Size: 192 << 20, BlockSize: 128 << 20}},
		"size not default":  {{ID: "v", Size: 3 << 20}},
		"block not pow2":    {{ID: "v", Size: 384 << 20, BlockSize: 96 << 20}},
		"block too small":   {{ID: "v", Size: 1 << 30, BlockSize: 4096}},
		"requested > size":  {{ID: "v", Size: 1 << 30, RequestedSize: 2 << 30}},
		"requested odd":     {{ID: "v", Size: 1 << 30, RequestedSize: 1 << 20}},
		"no such node":      {{ID: "v", Node: 2, Size: 1 << 30}},
		"over MaxMem":       {{ID: "v", Size: 4 << 30}},
		"two over MaxMem":   {{ID: "v", Size: 2 << 30}, {ID: "w", Size: 2 << 30}},
		"negative node":     {{ID: "v", Node: -1, Size: 1 << 30}},
		"space in the name": {{ID: "a b", Size: 1 << 30}},
	} {
		c := Config{Kernel: "k", Initramfs: "i", MaxMem: 4 << 30, VirtioMem: bad}
		if err := c.setDefaults(); err == nil {
			t.Errorf("%s: setDefaults accepted %+v", name, bad)
		}
	}
}

// A CPU's unplug is refused at once under single-threaded TCG, whose QEMU
// would abort; a DIMM's is not.
func TestDeviceDelCPUNeedsMultiThreadedTCG(t *testing.T) {
	v := &VM{cfg: Config{Accel: "tcg,thread=single"}}
	err := v.DeviceDel(context.Background(), "nr-cpu3")
	if err == nil || !strings.Contains(err.Error(), "UnplugCPUs") {
		t.Errorf("DeviceDel of a CPU under %s: %v, want a refusal naming UnplugCPUs", v.cfg.Accel, err)
	}
}
