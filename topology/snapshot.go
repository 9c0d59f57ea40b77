package topology

import (
	"fmt"
	"math"
)

// Snapshot is the machine model at one moment. A Snapshot is never
// modified after Snapshot returns it, so it may be shared between
// goroutines freely.
type Snapshot struct {
	CPUs CPUs `json:"cpus"`
	// Nodes are the NUMA nodes sorted by ID; nil when the machine has no
	// node directories (a kernel without NUMA).
	Nodes []Node `json:"nodes"`
	// MemoryBlockSize is memory/block_size_bytes (hex in sysfs), in bytes;
	// 0 without memory hotplug support.
	MemoryBlockSize uint64 `json:"memoryBlockSizeBytes"`
	// MemoryBlocks are the memoryN blocks sorted by ID.
	MemoryBlocks []MemoryBlock `json:"memoryBlocks"`
	// MemTotal is /proc/meminfo MemTotal in bytes.
	MemTotal uint64 `json:"memTotalBytes"`
	// SwapTotal is /proc/meminfo SwapTotal in bytes.
	SwapTotal uint64 `json:"swapTotalBytes"`
	// Hugepages are the node-wide pools from /sys/kernel/mm/hugepages,
	// sorted by page size; nil without hugepage support.
	Hugepages []Hugepages `json:"hugepages"`
	// EphemeralStorage is the size of the filesystem holding the kubelet
	// root dir (see FS.WithKubeletRootDir); 0 when not measured.
	EphemeralStorage uint64 `json:"ephemeralStorageBytes,omitempty"`
	// EphemeralStorageError says why the kubelet root dir's filesystem
	// could not be measured; EphemeralStorage is then 0 (unknown), and
	// the rest of the model stands.
	EphemeralStorageError string `json:"ephemeralStorageError,omitempty"`
	// PIDMax is /proc/sys/kernel/pid_max, the kubelet's pid capacity; 0
	// when the file is absent.
	PIDMax int64 `json:"pidMax,omitempty"`
}

// Snapshot rebuilds the whole model from the filesystem.
//
// A missing optional file or directory (no node directories, no hugepages,
// no memory blocks, no distance or nodeN/meminfo file) leaves its field
// zero or nil. A missing required file (cpu/online, meminfo) or any file
// that cannot be parsed is an error that names the path.
//
// The rebuild reads only what the model holds: the four CPU lists and one
// directory scan under cpu/, per node one scan plus meminfo, distance and
// the hugepage pools, per online CPU core_id and physical_package_id, per
// memory block state and valid_zones, and /proc/meminfo. On a large
// machine it reads the memory blocks and the node directories on a few
// goroutines (at most 8, and GOMAXPROCS), and lists the cpu and memory
// directories while it reads the rest; the result is the same as reading
// everything in order.
func (fs FS) Snapshot() (*Snapshot, error) {
	return fs.snapshot(nil)
}

// SnapshotCPUs rebuilds the model like Snapshot but takes the memory
// blocks from prev instead of reading them. Memory blocks are most of a
// rebuild's cost on a large machine (4096 blocks are three quarters of it),
// and a CPU hotplug event does not move them: the detection loop uses this
// when every event of a batch came from the cpu subsystem. Everything else,
// MemTotal and the per-node memory included, is read afresh. A nil prev
// means a full Snapshot.
func (fs FS) SnapshotCPUs(prev *Snapshot) (*Snapshot, error) {
	return fs.snapshot(prev)
}

func (fs FS) snapshot(prev *Snapshot) (*Snapshot, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	r := getReader()
	defer putReader(r)
	defer r.useFiles(fs.cache)()

	// The two large directories are listed while the rest is read.
	devices := startScan(fs.cpuDir, "cpu", MaxCPUID)
	defer devices.wait()
	var blocks *idScan
	if prev == nil {
		blocks = startScan(fs.memDir, "memory", math.MaxInt)
		defer blocks.wait()
	}

	s := &Snapshot{}
	var err error
	if s.CPUs, err = fs.readCPULists(r); err != nil {
		return nil, err
	}
	var links []blockLink
	if s.Nodes, links, err = fs.readNodes(r, s.CPUs.Online); err != nil {
		return nil, err
	}
	// Devices are the ids with a cpuN directory.
	if s.CPUs.Devices, err = devices.wait(); err != nil {
		return nil, err
	}
	if prev != nil {
		s.MemoryBlockSize, s.MemoryBlocks = prev.MemoryBlockSize, prev.MemoryBlocks
	} else if s.MemoryBlockSize, s.MemoryBlocks, err = fs.readMemory(r, blocks, links, len(s.Nodes) > 0); err != nil {
		return nil, err
	}
	if err := fs.readTotals(r, s); err != nil {
		return nil, err
	}
	if prev == nil && r.files != nil {
		r.files.endScan() // everything was read: close what was not
	}
	return s, nil
}

// readTotals reads what no device owns: /proc/meminfo's MemTotal and
// SwapTotal, the node-wide hugepage pools, pid_max and the kubelet root
// filesystem's size.
func (fs FS) readTotals(r *reader, s *Snapshot) error {
	p := r.at(fs.meminfo, -1, "")
	b, ok, err := r.readFile(cwd, p)
	if err == nil && !ok {
		_, err = r.read(p) // for the error that says the file is missing
	}
	if err != nil {
		return err
	}
	if s.MemTotal, s.SwapTotal, err = parseMeminfo(b); err != nil {
		return fmt.Errorf("parse %s: %w", fs.meminfo, err)
	}
	if s.Hugepages, err = r.readHugepages(cwd, fs.hugeDir, -1, ""); err != nil {
		return err
	}
	if s.PIDMax, err = fs.pidMax(r); err != nil {
		return err
	}
	s.EphemeralStorage, s.EphemeralStorageError = 0, ""
	if s.EphemeralStorage, err = fs.ephemeralStorage(); err != nil {
		// A disk that cannot be measured is unknown, not gone: the
		// consumers keep their last good value.
		s.EphemeralStorage, s.EphemeralStorageError = 0, err.Error()
	}
	return nil
}
