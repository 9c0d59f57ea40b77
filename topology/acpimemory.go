package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ACPIMemoryHID is the ACPI hardware id of a memory device: a DIMM that the
// platform can hot-plug and hot-unplug as one unit (QEMU's pc-dimm).
const ACPIMemoryHID = "PNP0C80"

// MemoryDevice is one ACPI memory device with the memory blocks the kernel
// bound to it: what a hypervisor unplugs as one unit. Start and End bound
// the physical addresses of its blocks, [Start, End); Size is the bytes of
// its blocks. All three are 0 when no block is bound (its memory was not
// added, or is being removed).
type MemoryDevice struct {
	// ID is the device's name in /sys/bus/acpi/devices: the HID and an
	// instance number, "PNP0C80:00".
	ID string `json:"id"`
	// Blocks are the ids of the memoryN blocks bound to it, ascending.
	Blocks []int  `json:"blocks"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Size   uint64 `json:"sizeBytes"`
}

// MemoryDevices reads the ACPI memory devices of /sys/bus/acpi/devices
// (those named PNP0C80:NN) and the memory blocks bound to each, sorted by
// ID. The kernel binds a block to its device with a pair of links
// (drivers/acpi/glue.c): the device's physical_node, physical_node1, ...
// name the blocks, and each block's firmware_node names the device; these
// read the device's side. A block's addresses are its id times
// memory/block_size_bytes. No ACPI bus (a machine without ACPI) is no
// devices, not an error.
func (fs FS) MemoryDevices() ([]MemoryDevice, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	bus := filepath.Join(fs.sys, "bus/acpi/devices")
	entries, err := os.ReadDir(bus)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read directory %s: %w", bus, err)
	}
	var devs []MemoryDevice
	var blockSize uint64
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ACPIMemoryHID+":") {
			continue
		}
		if blockSize == 0 {
			if blockSize, err = fs.blockSize(); err != nil {
				return nil, err
			}
		}
		d, ok, err := readMemoryDevice(filepath.Join(bus, e.Name()), blockSize)
		if err != nil {
			return nil, err
		}
		if ok {
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// blockSize reads memory/block_size_bytes.
func (fs FS) blockSize() (uint64, error) {
	r := getReader()
	defer putReader(r)
	p := r.at(fs.memDir, -1, "/block_size_bytes")
	b, err := r.read(p)
	if err != nil {
		return 0, err
	}
	v, ok := parseUint(b, 16)
	if !ok || v == 0 {
		return 0, fmt.Errorf("parse %s: bad hex size %q", p, trimSpace(b))
	}
	return v, nil
}

// readMemoryDevice reads the physical_node links of the device at path;
// ok is false when the device is gone.
func readMemoryDevice(path string, blockSize uint64) (MemoryDevice, bool, error) {
	d := MemoryDevice{ID: filepath.Base(path)}
	entries, err := os.ReadDir(path)
	if err != nil {
		if isNotExist(err) {
			return MemoryDevice{}, false, nil
		}
		return MemoryDevice{}, false, fmt.Errorf("read directory %s: %w", path, err)
	}
	for _, e := range entries {
		if !isPhysicalNode(e.Name()) {
			continue
		}
		link := filepath.Join(path, e.Name())
		target, err := os.Readlink(link)
		if err != nil {
			if isNotExist(err) {
				continue // unbound under us
			}
			return MemoryDevice{}, false, fmt.Errorf("read link %s: %w", link, err)
		}
		id, ok := numberedName([]byte(filepath.Base(target)), "memory")
		if !ok {
			return MemoryDevice{}, false, fmt.Errorf("read link %s: %q is not a memory block", link, target)
		}
		d.Blocks = append(d.Blocks, id)
	}
	if len(d.Blocks) == 0 {
		return d, true, nil
	}
	slices.Sort(d.Blocks)
	d.Blocks = slices.Compact(d.Blocks)
	d.Start = uint64(d.Blocks[0]) * blockSize
	d.End = uint64(d.Blocks[len(d.Blocks)-1]+1) * blockSize
	d.Size = uint64(len(d.Blocks)) * blockSize
	return d, true, nil
}

// isPhysicalNode reports the names acpi_bind_one gives its links:
// "physical_node" for the first device bound, then "physical_node1",
// "physical_node2", ...
func isPhysicalNode(name string) bool {
	const prefix = "physical_node"
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	n, err := strconv.Atoi(rest)
	return err == nil && n > 0 && strconv.Itoa(n) == rest
}
