package vm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// VirtioMemDevice is a virtio-mem device the guest boots with
// (Config.VirtioMem): a memory-backend-ram of Size bytes and a
// virtio-mem-pci device on it. The host grows or shrinks the memory the
// guest may use by setting the device's requested size
// (VM.SetVirtioMemRequested); the guest's virtio_mem driver plugs or
// unplugs memory until the device's size (VM.VirtioMemSize) reaches it.
//
// The driver adds memory to Linux in whole memory blocks (128 MiB on
// x86) and works in one of two modes, chosen when it probes the device
// (drivers/virtio/virtio_mem.c, virtio_mem_init_hotplug):
//
//   - Sub Block Mode (SBM), when the sub-block, max(BlockSize, a
//     pageblock: 2 MiB on x86, seen on Debian's 6.1; older kernels used a
//     max-order page, 4 MiB), is smaller than a memory block: QEMU's
//     default BlockSize (2 MiB) gives it. A block is added
//     when its first sub-block is plugged and removed when its last one
//     is unplugged; in between the block's MemTotal share changes with
//     no uevent.
//   - Big Block Mode (BBM), when BlockSize is a memory block or more
//     (128 MiB: each big block is one memory block), or the module
//     parameter virtio_mem.force_bbm=1 is on the guest's command line:
//     every step adds or removes whole blocks, each with its uevents.
type VirtioMemDevice struct {
	// ID is the QEMU device id (its memory backend is ID+"-mem");
	// required, unique, without commas.
	ID string
	// Node is the guest NUMA node the memory belongs to; with NUMA
	// nodes configured, one of them.
	Node int
	// Size is the backend's size: the most the device can plug. A
	// multiple of the block size and of 1 MiB. QEMU counts it against
	// MaxMem (see Config.VirtioMem).
	Size uint64
	// BlockSize is the device's block size, a power of two of at least
	// 1 MiB; 0 takes QEMU's default, the host's transparent huge page
	// size (2 MiB on x86).
	BlockSize uint64
	// RequestedSize is the memory the guest is asked to plug at boot, a
	// multiple of the block size, at most Size.
	RequestedSize uint64
}

// DefaultVirtioMemBlockSize is the block size QEMU gives a virtio-mem
// device on an anonymous RAM backend when none is set, on x86 hosts: the
// transparent huge page size.
const DefaultVirtioMemBlockSize = 2 * mib

// MemoryBlockSize is the guest kernel's memory block size on x86 with
// less than 64 GiB of memory: the unit of memory hotplug and of
// /sys/devices/system/memory/memoryN.
const MemoryBlockSize = 128 * mib

// backend is the id of the device's memory backend object.
func (d VirtioMemDevice) backend() string { return d.ID + "-mem" }

func (d VirtioMemDevice) blockSize() uint64 {
	if d.BlockSize == 0 {
		return DefaultVirtioMemBlockSize
	}
	return d.BlockSize
}

// checkVirtioMem checks the devices against the machine: ids, sizes,
// nodes, and room under MaxMem. QEMU places DIMMs and virtio-mem memory
// in one device-memory area of MaxMem - Mem bytes and refuses a device
// whose backend does not fit ("not enough space, currently 0x0 in use of
// total space for memory devices ...").
func (c *Config) checkVirtioMem() error {
	if len(c.VirtioMem) > 0 && c.Arch != AMD64 {
		// QEMU 7.2 has virtio-mem-pci for x86 only, and Debian's
		// powerpc64le kernel no driver for it.
		return fmt.Errorf("config: virtio-mem devices on %s: the harness has them on amd64 only", c.Arch)
	}
	ids := map[string]bool{}
	var total uint64
	for _, d := range c.VirtioMem {
		if d.ID == "" || strings.ContainsAny(d.ID, ", ") {
			return fmt.Errorf("config: virtio-mem device %+v needs an id without commas or spaces", d)
		}
		if ids[d.ID] {
			return fmt.Errorf("config: virtio-mem id %q used twice", d.ID)
		}
		ids[d.ID] = true
		bs := d.blockSize()
		if bs < mib || bs&(bs-1) != 0 {
			return fmt.Errorf("config: virtio-mem %s: block size %d is not a power of two of at least 1 MiB", d.ID, bs)
		}
		if d.Size == 0 || d.Size%bs != 0 || d.Size%mib != 0 {
			return fmt.Errorf("config: virtio-mem %s: size %d is not a positive multiple of the block size %d and of 1 MiB", d.ID, d.Size, bs)
		}
		if d.RequestedSize%bs != 0 || d.RequestedSize > d.Size {
			return fmt.Errorf("config: virtio-mem %s: requested size %d is not a multiple of the block size %d up to the size %d", d.ID, d.RequestedSize, bs, d.Size)
		}
		nodes := max(len(c.NUMA), 1)
		if d.Node < 0 || d.Node >= nodes {
			return fmt.Errorf("config: virtio-mem %s: node %d, the machine has %d node(s)", d.ID, d.Node, nodes)
		}
		total += d.Size
	}
	if c.Mem+total > c.MaxMem {
		return fmt.Errorf("config: virtio-mem sizes (%d MiB) do not fit in MaxMem %d MiB - Mem %d MiB: QEMU counts them against maxmem, with the DIMMs",
			total/mib, c.MaxMem/mib, c.Mem/mib)
	}
	return nil
}

// virtioMemTotal is the sum of the devices' sizes.
func virtioMemTotal(devs []VirtioMemDevice) uint64 {
	var total uint64
	for _, d := range devs {
		total += d.Size
	}
	return total
}

// virtioMemArgs returns QEMU's arguments for the devices.
func virtioMemArgs(devs []VirtioMemDevice) []string {
	var args []string
	for _, d := range devs {
		dev := fmt.Sprintf("virtio-mem-pci,id=%s,memdev=%s,node=%d,requested-size=%dM", d.ID, d.backend(), d.Node, d.RequestedSize/mib)
		if d.BlockSize != 0 {
			dev += fmt.Sprintf(",block-size=%dM", d.BlockSize/mib)
		}
		args = append(args,
			"-object", fmt.Sprintf("memory-backend-ram,id=%s,size=%dM", d.backend(), d.Size/mib),
			"-device", dev)
	}
	return args
}

func peripheralPath(id string) string { return "/machine/peripheral/" + id }

// SetVirtioMemRequested sets a virtio-mem device's requested size (QOM
// property requested-size): the guest's driver then plugs or unplugs
// memory towards it. QEMU refuses a size that is not a multiple of the
// block size or exceeds the backend. It returns at once; see
// WaitVirtioMemSize.
func (v *VM) SetVirtioMemRequested(ctx context.Context, id string, bytes uint64) error {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	err := v.qmp.Execute(ctx, "qom-set", map[string]any{
		"path": peripheralPath(id), "property": "requested-size", "value": bytes,
	}, nil)
	if err != nil {
		return fmt.Errorf("set %s's requested size to %d: %w", id, bytes, err)
	}
	return nil
}

// VirtioMemSize returns the memory a virtio-mem device has plugged now
// (QOM property size): what the guest's driver has taken, not what was
// requested.
func (v *VM) VirtioMemSize(ctx context.Context, id string) (uint64, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	var size uint64
	err := v.qmp.Execute(ctx, "qom-get", map[string]any{"path": peripheralPath(id), "property": "size"}, &size)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", id, err)
	}
	return size, nil
}

// VirtioMemPollInterval is how often WaitVirtioMemSize asks QEMU.
const VirtioMemPollInterval = 50 * time.Millisecond

// WaitVirtioMemSize polls a virtio-mem device's size until it is want,
// for at most timeout (and no longer than ctx). It returns how long that
// took from the call and the sizes seen, in order, each once: the
// driver's steps (a block at a time in BBM; in SBM as much as it did per
// pass). The error says the sizes seen when want was not reached.
func (v *VM) WaitVirtioMemSize(ctx context.Context, id string, want uint64, timeout time.Duration) (time.Duration, []uint64, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var seen []uint64
	tick := time.NewTicker(VirtioMemPollInterval)
	defer tick.Stop()
	for {
		size, err := v.VirtioMemSize(ctx, id)
		// A write that meets the deadline fails with an i/o timeout a
		// moment before ctx says it is done: that is the wait running
		// out, not QEMU failing.
		if err != nil && ctx.Err() == nil && time.Now().Before(deadline) {
			return time.Since(start), seen, err
		}
		if err == nil {
			if len(seen) == 0 || seen[len(seen)-1] != size {
				seen = append(seen, size)
			}
			if size == want {
				return time.Since(start), seen, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Since(start), seen, fmt.Errorf("wait for %s's size %d: %w after %v; sizes seen %s",
				id, want, ctx.Err(), time.Since(start).Round(time.Millisecond), FormatSizes(seen))
		case <-tick.C:
		}
	}
}

// FormatSizes renders byte counts as MiB, e.g. "[0 128Mi 512Mi]".
func FormatSizes(sizes []uint64) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		switch {
		case s == 0:
			parts[i] = "0"
		case s%mib == 0:
			parts[i] = fmt.Sprintf("%dMi", s/mib)
		default:
			parts[i] = fmt.Sprint(s)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// VirtioMemInfo is QEMU's view of a virtio-mem device (QMP
// query-memory-devices).
type VirtioMemInfo struct {
	ID            string `json:"id"`
	MemAddr       uint64 `json:"memaddr"` // guest-physical start of its region
	Node          int    `json:"node"`
	Size          uint64 `json:"size"`     // plugged now
	MaxSize       uint64 `json:"max-size"` // the backend's size
	BlockSize     uint64 `json:"block-size"`
	RequestedSize uint64 `json:"requested-size"`
	Memdev        string `json:"memdev"`
}

// FirstBlock is the guest memory block (memoryN) the device's region
// starts in, for a guest whose blocks are blockSize bytes.
func (i VirtioMemInfo) FirstBlock(blockSize uint64) int { return int(i.MemAddr / blockSize) }

// ErrNoVirtioMem is returned by VirtioMemInfo for an id that is not a
// virtio-mem device.
var ErrNoVirtioMem = errors.New("no such virtio-mem device")

// VirtioMemInfo returns QEMU's view of a virtio-mem device: where its
// region is, its block size, what is requested and plugged.
func (v *VM) VirtioMemInfo(ctx context.Context, id string) (VirtioMemInfo, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	var devs []struct {
		Type string        `json:"type"`
		Data VirtioMemInfo `json:"data"`
	}
	if err := v.qmp.Execute(ctx, "query-memory-devices", nil, &devs); err != nil {
		return VirtioMemInfo{}, fmt.Errorf("query %s: %w", id, err)
	}
	for _, d := range devs {
		if d.Type == "virtio-mem" && d.Data.ID == id {
			return d.Data, nil
		}
	}
	return VirtioMemInfo{}, fmt.Errorf("query %s: %w", id, ErrNoVirtioMem)
}
