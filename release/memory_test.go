package release

import (
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

func TestChooseMemory(t *testing.T) {
	m := sharedMemory()
	total := m.snap.MemTotal
	dimm := func(dev string, whole bool, blocks ...int) []BlockStep {
		var out []BlockStep
		for _, id := range blocks {
			out = append(out, BlockStep{ID: id, Kind: DIMM, Device: dev, WholeDevice: whole})
		}
		return out
	}
	virtio := func(blocks ...int) []BlockStep {
		var out []BlockStep
		for _, id := range blocks {
			out = append(out, BlockStep{ID: id, Kind: VirtioMem, Device: "virtio3"})
		}
		return out
	}
	other := func(blocks ...int) []BlockStep {
		var out []BlockStep
		for _, id := range blocks {
			out = append(out, BlockStep{ID: id})
		}
		return out
	}
	cat := func(parts ...[]BlockStep) []BlockStep {
		var out []BlockStep
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, c := range []struct {
		name      string
		m         *machine
		target    uint64
		skip      []int
		want      []BlockStep
		shortfall string
		note      string
	}{
		{name: "no target", m: m, target: 0},
		{name: "target above MemTotal", m: m, target: total + giB},
		{name: "target at MemTotal", m: m, target: total},
		{name: "two blocks: virtio-mem, highest first (no DIMM fits whole)", m: m, target: total - 2*bs,
			want: virtio(44, 43)},
		{name: "a remainder takes one block more, ending just below", m: m, target: total - 2*bs - 4096,
			want: virtio(44, 43, 42)},
		{name: "four blocks: the DIMM already partly offline, whole", m: m, target: total - 4*bs,
			want: dimm("PNP0C80:01", true, 23, 22, 21, 20)},
		{name: "eight blocks: both DIMMs whole", m: m, target: total - 8*bs,
			want: cat(dimm("PNP0C80:01", true, 23, 22, 21, 20), dimm("PNP0C80:00", true, 19, 18, 17, 16))},
		{name: "five blocks: one DIMM whole, then virtio-mem", m: m, target: total - 5*bs,
			want: cat(dimm("PNP0C80:01", true, 23, 22, 21, 20), virtio(44))},
		{name: "a skipped block is left for another", m: m, target: total - 2*bs, skip: ids(44),
			want: virtio(43, 42)},
		{name: "a DIMM partially needed comes after virtio-mem", m: m, target: total - 12*bs,
			want: cat(dimm("PNP0C80:01", true, 23, 22, 21, 20), dimm("PNP0C80:00", true, 19, 18, 17, 16),
				virtio(44, 43, 42, 41))},
		{name: "everything movable, then short: boot memory in Normal", m: m, target: 512 * miB,
			want: cat(dimm("PNP0C80:01", true, 23, 22, 21, 20), dimm("PNP0C80:00", true, 19, 18, 17, 16),
				virtio(44, 43, 42, 41, 40), other(31, 30)),
			shortfall: "the other online blocks are in zone Normal (kernel memory; boot memory is there unless movablecore= is set) (16 blocks, 2Gi)"},
		{name: "only boot memory", m: smt2(2).blocks(0, 16, topology.BlockOnline, "Normal"), target: 2*giB - 512*miB,
			shortfall: "memory: 512Mi more to take offline, but the other online blocks are in zone Normal"},
		{name: "no memory blocks", m: &machine{snap: topology.Snapshot{MemTotal: 4 * giB}}, target: 2 * giB,
			shortfall: "memory: 2Gi more to take offline, but the kernel has no memory blocks"},
		{name: "a DIMM with a Normal block never goes whole", m: smt2(2).
			blocks(0, 8, topology.BlockOnline, "Normal").
			blocks(8, 1, topology.BlockOnline, "Normal").
			blocks(9, 3, topology.BlockOnline, "Movable").
			blocks(12, 2, topology.BlockOnline, "Movable").
			dimm("PNP0C80:00", 8, 4).dimm("PNP0C80:01", 12, 2), target: 14*bs - 4*bs,
			want: cat(dimm("PNP0C80:01", true, 13, 12), dimm("PNP0C80:00", false, 11, 10))},
		{name: "partial DIMMs: the closest to whole first", m: smt2(2).
			blocks(0, 8, topology.BlockOnline, "Normal").
			blocks(8, 4, topology.BlockOnline, "Movable").
			blocks(12, 4, topology.BlockOnline, "Movable").
			blocks(16, 1, topology.BlockOffline, "Movable").
			dimm("PNP0C80:00", 8, 4).dimm("PNP0C80:01", 12, 5), target: 16*bs - 3*bs,
			want: dimm("PNP0C80:01", false, 15, 14, 13)},
		{name: "virtio-mem unknown: its blocks count as no device, after partial DIMMs", m: func() *machine {
			m := sharedMemory()
			m.hp.VirtioMem, m.hp.VirtioMemError = nil, "hidden"
			return m
		}(), target: total - 14*bs,
			want: cat(dimm("PNP0C80:01", true, 23, 22, 21, 20), dimm("PNP0C80:00", true, 19, 18, 17, 16),
				other(44, 43, 42, 41, 40, 31)),
			note: "virtio-mem memory could not be identified (hidden)"},
		{name: "partial DIMM before memory of no device", m: func() *machine {
			m := sharedMemory()
			m.hp.VirtioMem = nil
			return m
		}(), target: total - 2*bs, want: dimm("PNP0C80:01", false, 23, 22)},
		{name: "a block marked not removable stays", m: func() *machine {
			m := sharedMemory()
			m.hp.NotRemovable = ids(44)
			return m
		}(), target: total - 2*bs, want: virtio(43, 42)},
		{name: "going offline and spanning zones: said", m: smt2(2).
			blocks(0, 2, topology.BlockOnline, "none").
			blocks(2, 1, topology.BlockGoingOffline, "Movable").
			blocks(3, 1, topology.BlockOnline, ""), target: bs,
			shortfall: "span two zones and cannot go offline (memory0, memory1, 256Mi), are going offline now (memory2, 128Mi) and have no valid_zones"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.m.input()
			in.TargetMemory = c.target
			in.Skip.Blocks = c.skip
			p := Choose(in)
			if !reflect.DeepEqual(p.Blocks, c.want) {
				t.Errorf("blocks\n got %+v\nwant %+v", p.Blocks, c.want)
			}
			mt := in.Machine.MemTotal
			if want := mt - uint64(len(c.want))*bs; len(c.want) > 0 && p.MemTotal != want {
				t.Errorf("MemTotal = %d, want %d", p.MemTotal, want)
			}
			got := ""
			for _, s := range p.Shortfalls {
				if s.Resource == "memory" {
					got = s.String()
				}
			}
			switch {
			case c.shortfall == "" && got != "":
				t.Errorf("shortfall %q, want none", got)
			case c.shortfall == "" && c.target > 0 && c.target < mt && (p.MemTotal > c.target || p.MemTotal+bs <= c.target):
				t.Errorf("MemTotal %d is not at or just below the target %d", p.MemTotal, c.target)
			case c.shortfall != "" && !strings.Contains(got, c.shortfall):
				t.Errorf("shortfall %q, want one with %q", got, c.shortfall)
			}
			if c.note != "" && !strings.Contains(p.String(), c.note) {
				t.Errorf("plan says %q, want %q in it", p.String(), c.note)
			}
		})
	}
}
