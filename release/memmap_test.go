package release

import (
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// The release on a node where /proc/iomem hides its addresses (the daemon
// has no CAP_SYS_ADMIN): x86's firmware memmap shows which blocks are
// virtio-mem's, and Choose takes them as virtio-mem's, after whole DIMMs
// and before the blocks of no device; Unpluggable names the device. With
// no memmap they count as memory of no device, and the plan says why.
func TestChooseVirtioMemFromMemmap(t *testing.T) {
	machine := func(memmap bool, virtio ...topologytest.VirtioMem) topologytest.Machine {
		m := topologytest.Machine{
			CPUs:      topologytest.SMTCPUs(0, 4, 0, 0),
			BlockSize: bs,
			Blocks: append(append(append(topologytest.Blocks(0, 16, topologytest.BlockOnline, "Normal", -1),
				topologytest.Blocks(16, 4, topologytest.BlockOnline, "Movable", -1)...), // PNP0C80:00
				topologytest.Blocks(30, 2, topologytest.BlockOnline, "Movable", -1)...), // boot memory, movable
				topologytest.Blocks(40, 4, topologytest.BlockOnline, "Movable", -1)...),
			DIMMs:     []topologytest.DIMM{{Instance: 0, Blocks: topologytest.Ints(16, 19)}},
			VirtioMem: virtio,
			HideIomem: true,
			MemKB:     26 * bs >> 10,
		}
		if memmap {
			m.Memmap = m.PCMemmap()
		}
		return m
	}
	step := func(kind DeviceKind, dev string, whole bool, blocks ...int) []BlockStep {
		var out []BlockStep
		for _, id := range blocks {
			out = append(out, BlockStep{ID: id, Kind: kind, Device: dev, WholeDevice: whole})
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
	one := topologytest.VirtioMem{Index: 0, Start: 40 * bs, Size: 8 * bs, Blocks: topologytest.Ints(40, 43)}
	two := []topologytest.VirtioMem{
		{Index: 0, Start: 40 * bs, Size: 2 * bs, Blocks: topologytest.Ints(40, 41)},
		{Index: 1, Start: 42 * bs, Size: 2 * bs, Blocks: topologytest.Ints(42, 43)},
	}
	for _, c := range []struct {
		name   string
		m      topologytest.Machine
		want   []BlockStep
		note   string
		unplug string
	}{
		{"memmap, one device", machine(true, one),
			cat(step(DIMM, "PNP0C80:00", true, 19, 18, 17, 16), step(VirtioMem, "virtio0", false, 43, 42)),
			"", "virtio0 256Mi"},
		{"memmap, two devices: one group", machine(true, two...),
			cat(step(DIMM, "PNP0C80:00", true, 19, 18, 17, 16), step(VirtioMem, "virtio_mem", false, 43, 42)),
			"virtio-mem: the blocks of virtio-mem devices virtio0, virtio1 are reported as one group", "virtio_mem 256Mi"},
		{"no memmap: memory of no device", machine(false, one),
			cat(step(DIMM, "PNP0C80:00", true, 19, 18, 17, 16), step(NoDevice, "", false, 43, 42)),
			"virtio-mem memory could not be identified", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys, proc := c.m.Write(t, topologytest.Dir(t))
			fsys, err := topology.NewFS(sys, proc)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := fsys.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			hp, err := fsys.Hotplug()
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Machine: snap, Hotplug: hp, TargetMemory: snap.MemTotal - 6*bs}
			p := Choose(in)
			if !reflect.DeepEqual(p.Blocks, c.want) {
				t.Errorf("blocks\n got %+v\nwant %+v", p.Blocks, c.want)
			}
			if (c.note == "") != (p.String() == "") || !strings.Contains(p.String(), c.note) {
				t.Errorf("plan says %q, want %q in it", p.String(), c.note)
			}

			// Once offline and released, the blocks are what the host
			// may lower the requested size by.
			tree := c.m
			for i := range tree.Blocks {
				if id := tree.Blocks[i].ID; id == 42 || id == 43 {
					tree.Blocks[i].State, tree.Blocks[i].Zones = topologytest.BlockOffline, "Movable Normal"
				}
			}
			sys, proc = tree.Write(t, topologytest.Dir(t))
			if fsys, err = topology.NewFS(sys, proc); err != nil {
				t.Fatal(err)
			}
			if in.Machine, err = fsys.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if in.Hotplug, err = fsys.Hotplug(); err != nil {
				t.Fatal(err)
			}
			in.Released.Blocks = []int{42, 43}
			if got := Unpluggable(in).String(); c.unplug != "" && !strings.Contains(got, c.unplug) || c.unplug == "" && strings.Contains(got, "virtio") {
				t.Errorf("unpluggable %q, want %q in it", got, c.unplug)
			}
		})
	}
}
