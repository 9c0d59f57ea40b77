package vmscenario

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/vm"
	"github.com/node-resized/node-resized/test/vm/guesttest"
)

// The guest's virtio-mem device: on node 0, nothing plugged at boot,
// QEMU's default block size (2 MiB), so the driver works in sub-blocks.
var virtioMemDevice = vm.VirtioMemDevice{ID: "vmem0", Node: 0, Size: 1 << 30}

// virtioMemSteps are the requested sizes scenario virtio-mem walks
// through; 192 MiB, which leaves a block partly plugged, only with a
// device block size below the memory block's (Sub Block Mode).
var virtioMemSteps = []uint64{512 << 20, 256 << 20, 192 << 20, 0}

// virtioMemStep is what one change of the requested size did.
type virtioMemStep struct {
	to       uint64
	seen     []uint64      // the device's sizes seen on the way
	sizeAt   time.Duration // qom-set to the device's size
	memAt    time.Duration // qom-set to MemTotal
	blocksAt time.Duration // qom-set to the device's blocks all there, online, their uevents logged
	added    []string
	removed  []string
	uevents  map[string]int // memory block uevents by action
	other    int            // other uevents in the step
	iomem    int            // "System RAM (virtio_mem)" ranges after it
}

// virtioMem: the host raises the virtio-mem device's requested size to
// 512 MiB, then lowers it to 256 MiB, 192 MiB and 0. The guest's driver
// plugs the memory and adds its blocks (offline: the guest's policy), the
// daemon onlines them movable (--auto-online) and MemTotal grows; on the
// way down the driver unplugs the memory, offlining and removing whole
// blocks itself, and the device's size follows. 192 MiB leaves a block
// partly plugged: MemTotal drops with no uevent. Each step's times and
// memory block uevents are logged. The machine is then the one before,
// and kubepods' memory.max with it.
func (s *scenario) virtioMem(t *testing.T) {
	g := s.g
	dev := virtioMemDevice
	blockSize, err := strconv.ParseUint(g.Sh(t, "cat /sys/devices/system/memory/block_size_bytes"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	info, err := g.VirtioMemInfo(guesttest.Context(t, guesttest.QMPTimeout), dev.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := info.FirstBlock(blockSize)
	ours := func(name string) bool {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "memory"))
		return err == nil && id >= first && uint64(id-first) < info.MaxSize/blockSize
	}
	policy := g.Sh(t, "cat /sys/devices/system/memory/auto_online_blocks")
	driver := g.Sh(t, "dmesg 2>&1 | grep -E 'virtio_mem|dmesg' || echo 'no virtio_mem lines in dmesg'")
	t.Logf("virtio-mem %s: region %#x (+%d MiB, blocks memory%d-memory%d), block size %d KiB; auto_online_blocks %q; the driver:\n%s",
		dev.ID, info.MemAddr, info.MaxSize>>20, first, first+int(info.MaxSize/blockSize)-1, info.BlockSize>>10, policy, driver)
	if info.Size != 0 {
		t.Fatalf("the device starts with %d bytes plugged, want 0", info.Size)
	}
	mem0 := g.MemTotal(t)

	var steps []virtioMemStep
	for _, to := range virtioMemSteps {
		if to%info.BlockSize != 0 {
			continue
		}
		steps = append(steps, s.virtioMemStep(t, dev.ID, to, mem0, blockSize, ours))
	}
	for _, st := range steps {
		var acts []string
		for _, a := range []string{"add", "online", "offline", "remove"} {
			acts = append(acts, fmt.Sprintf("%s %d", a, st.uevents[a]))
		}
		t.Logf("requested %4d MiB: size after %7v (seen %s), MemTotal after %7v, blocks after %7v; +%v -%v; memory uevents: %s; other uevents %d; iomem virtio_mem ranges %d",
			st.to>>20, st.sizeAt.Round(time.Millisecond), vm.FormatSizes(st.seen), st.memAt.Round(time.Millisecond),
			st.blocksAt.Round(time.Millisecond), st.added, st.removed, strings.Join(acts, ", "), st.other, st.iomem)
	}
	g.WaitKubepods(t, "memory.max back to the machine without virtio-mem memory", guesttest.Settle,
		func(k guesttest.Kubepods) bool { return k.MemoryMax == guesttest.WantMemoryMax(mem0) })
}

// virtioMemStep sets the requested size and waits for the device, the
// guest's blocks, MemTotal and the uevent log to follow.
func (s *scenario) virtioMemStep(t *testing.T, id string, to uint64, mem0 int64, blockSize uint64, ours func(string) bool) virtioMemStep {
	g := s.g
	st := virtioMemStep{to: to, uevents: map[string]int{}}
	listBlocks := func() map[string]string {
		out := g.Sh(t, "cd /sys/devices/system/memory && for b in memory[0-9]*; do echo $b $(cat $b/state); done")
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && ours(f[0]) {
				m[f[0]] = f[1]
			}
		}
		return m
	}
	before := listBlocks()
	// The log appears with the first uevent after boot.
	uevents0 := atoi(t, g.Sh(t, "cat "+vm.GuestUeventLog+" 2>/dev/null | wc -l"))

	start := time.Now()
	if err := g.SetVirtioMemRequested(guesttest.Context(t, guesttest.QMPTimeout), id, to); err != nil {
		t.Fatal(err)
	}
	var err error
	st.sizeAt, st.seen, err = g.WaitVirtioMemSize(guesttest.Context(t, guesttest.Settle), id, to, guesttest.Settle)
	if err != nil {
		t.Fatal(err)
	}
	st.sizeAt = time.Since(start)

	want := mem0 + int64(to)
	g.waitFor(t, fmt.Sprintf("MemTotal %s with %d MiB of virtio-mem memory", guesttest.MiB(want), to>>20), guesttest.Settle,
		"grep '^MemTotal:' /proc/meminfo", func(out string) bool { return guesttest.ParseMemTotal(t, out) == want })
	st.memAt = time.Since(start)

	// The driver adds and removes whole blocks; every block it holds is
	// online (by the daemon) once MemTotal is there.
	wantBlocks := int((to + blockSize - 1) / blockSize)
	var after map[string]string
	deadline := time.Now().Add(guesttest.Settle)
	for {
		after = listBlocks()
		online := 0
		for _, state := range after {
			if state == "online" {
				online++
			}
		}
		if len(after) == wantBlocks && online == wantBlocks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the device's blocks after %v: %v, want %d online", guesttest.Settle, after, wantBlocks)
		}
		time.Sleep(guesttest.Poll)
	}
	for b := range after {
		if _, ok := before[b]; !ok {
			st.added = append(st.added, b)
		}
	}
	for b := range before {
		if _, ok := after[b]; !ok {
			st.removed = append(st.removed, b)
		}
	}
	sort.Strings(st.added)
	sort.Strings(st.removed)

	// Each added block says add and online, each removed one offline
	// and remove (the guest's log is written a moment after the event).
	log := g.waitFor(t, "the blocks' uevents", guesttest.Settle, fmt.Sprintf("tail -n +%d %s", uevents0+1, vm.GuestUeventLog),
		func(out string) bool {
			for _, b := range st.added {
				for _, a := range []string{"add", "online"} {
					if !strings.Contains(out, " "+a+" /devices/system/memory/"+b+" memory") {
						return false
					}
				}
			}
			for _, b := range st.removed {
				for _, a := range []string{"offline", "remove"} {
					if !strings.Contains(out, " "+a+" /devices/system/memory/"+b+" memory") {
						return false
					}
				}
			}
			return true
		})
	st.blocksAt = time.Since(start)
	for _, l := range strings.Split(log, "\n") {
		f := strings.Fields(l) // SEQNUM ACTION DEVPATH SUBSYSTEM
		switch {
		case len(f) < 4:
		case f[3] == "memory" && strings.HasPrefix(f[2], "/devices/system/memory/memory"):
			st.uevents[f[1]]++
			if !ours(strings.TrimPrefix(f[2], "/devices/system/memory/")) {
				t.Errorf("uevent for a block outside the device: %s", l)
			}
		default:
			st.other++
		}
	}
	for _, b := range st.added {
		if n := strings.Count(log, " online /devices/system/memory/"+b+" memory"); n != 1 {
			t.Errorf("%s onlined %d times", b, n)
		}
	}
	if len(st.removed) > 0 && len(st.added) > 0 {
		t.Errorf("one step both added %v and removed %v", st.added, st.removed)
	}
	if len(st.removed)+len(st.added) == 0 && len(st.uevents) > 0 {
		t.Errorf("memory block uevents %v in a step that added and removed no block", st.uevents)
	}

	iomem := g.Sh(t, "grep -c 'System RAM (virtio_mem)' /proc/iomem || true")
	st.iomem = atoi(t, iomem)
	if (to > 0) != (st.iomem > 0) {
		t.Errorf("%d \"System RAM (virtio_mem)\" ranges in /proc/iomem with %d MiB plugged", st.iomem, to>>20)
	}
	if to > 0 {
		zones := g.Sh(t, "cd /sys/devices/system/memory && for b in "+strings.Join(slices.Sorted(maps.Keys(after)), " ")+"; do cat $b/valid_zones; done")
		if strings.Count(zones, "Movable") != wantBlocks {
			t.Errorf("the device's blocks are not all movable: %q", zones)
		}
	}
	return st
}
