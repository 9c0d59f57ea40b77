package release

import (
	"github.com/node-resized/node-resized/topology"
)

const (
	miB = uint64(1) << 20
	giB = uint64(1) << 30
	bs  = 128 * miB
)

// machine is a test machine: its snapshot and hotplug facts.
type machine struct {
	snap topology.Snapshot
	hp   topology.Hotplug
}

// smt2 returns a machine with n CPUs in SMT2 cores of adjacent ids, all
// online but offline, cpu0 without an online file (x86).
func smt2(n int, offline ...int) *machine {
	return cpuMachineOf(n, 2, offline...)
}

func cpuMachineOf(n, threads int, offline ...int) *machine {
	m := &machine{}
	var online, all []int
	off := topology.NewCPUSet(offline...)
	for id := range n {
		all = append(all, id)
		if !off.Contains(id) {
			online = append(online, id)
		}
	}
	m.snap.CPUs = topology.CPUs{Online: topology.NewCPUSet(online...), Offline: off,
		Present: topology.NewCPUSet(all...), Possible: topology.NewCPUSet(all...), Devices: topology.NewCPUSet(all...)}
	for id := range n {
		c := topology.HotplugCPU{ID: id, OnlineFile: id != 0}
		if !off.Contains(id) {
			var sib []int
			for s := id - id%threads; s < id-id%threads+threads; s++ {
				if s < n && !off.Contains(s) {
					sib = append(sib, s)
				}
			}
			c.Siblings = topology.NewCPUSet(sib...)
		}
		m.hp.CPUs = append(m.hp.CPUs, c)
	}
	return m
}

// blocks adds blocks first..first+n-1 in state and zone, and their bytes
// to MemTotal when online.
func (m *machine) blocks(first, n int, state, zone string) *machine {
	m.snap.MemoryBlockSize = bs
	for id := first; id < first+n; id++ {
		m.snap.MemoryBlocks = append(m.snap.MemoryBlocks, topology.MemoryBlock{ID: id, State: state, Zone: zone, Node: 0})
		if state == topology.BlockOnline {
			m.snap.MemTotal += bs
		}
	}
	return m
}

// dimm binds blocks first..first+n-1 to PNP0C80:NN.
func (m *machine) dimm(name string, first, n int) *machine {
	d := topology.MemoryDevice{ID: name, Start: uint64(first) * bs, End: uint64(first+n) * bs, Size: uint64(n) * bs}
	for id := first; id < first+n; id++ {
		d.Blocks = append(d.Blocks, id)
	}
	m.hp.MemoryDevices = append(m.hp.MemoryDevices, d)
	return m
}

// virtio makes virtioN hold blocks.
func (m *machine) virtio(name string, blocks ...int) *machine {
	v := topology.VirtioMemDevice{Name: name, Blocks: blocks}
	for _, b := range blocks {
		v.Ranges = append(v.Ranges, topology.Range{Start: uint64(b) * bs, End: uint64(b+1) * bs})
	}
	m.hp.VirtioMem = append(m.hp.VirtioMem, v)
	return m
}

// less takes kernel reservations off MemTotal, as a real machine has them.
func (m *machine) less(bytes uint64) *machine {
	m.snap.MemTotal -= bytes
	return m
}

func (m *machine) input() Input {
	snap, hp := m.snap, m.hp
	return Input{Machine: &snap, Hotplug: &hp}
}

// sharedMemory is the memory the tests share: 2Gi of boot memory in zone
// Normal (0-15); PNP0C80:00 (16-19, Movable); PNP0C80:01 (20-25, 20-23
// online and Movable, 24-25 offline); boot memory given to ZONE_MOVABLE
// (30-31); virtio3 (40-44, Movable). MemTotal is the online blocks less
// 40Mi of kernel reservations.
func sharedMemory() *machine {
	return smt2(4).
		blocks(0, 16, topology.BlockOnline, "Normal").
		blocks(16, 8, topology.BlockOnline, "Movable").
		blocks(24, 2, topology.BlockOffline, "Movable Normal").
		blocks(30, 2, topology.BlockOnline, "Movable").
		blocks(40, 5, topology.BlockOnline, "Movable").
		dimm("PNP0C80:00", 16, 4).
		dimm("PNP0C80:01", 20, 6).
		virtio("virtio3", 40, 41, 42, 43, 44).
		less(40 * miB)
}

func ids(n ...int) []int { return n }
