package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/test/internal/daemontest"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// settledPatches waits until the daemon's relay has nothing pending and
// returns how many status patches it has had acknowledged.
func (e *env) settledPatches() uint64 {
	e.t.Helper()
	var last uint64
	stable := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := e.d.Client.Status(context.Background())
		if err != nil || st.Kubernetes == nil || st.Kubernetes.PatchPending {
			stable = 0
			continue
		}
		if st.Kubernetes.Patches == last {
			stable++
		} else {
			last, stable = st.Kubernetes.Patches, 0
		}
		if stable >= 10 { // one second without a new patch
			return last
		}
	}
	e.t.Fatal("the relay did not settle within 30s")
	return 0
}

// kernelUevent makes the kernel itself send a uevent for a real sysfs
// object (writing the action to its uevent file): a real kernel message,
// sender port 0, with a SEQNUM.
func kernelUevent(t *testing.T, devpath, action string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/sys", devpath, "uevent"), []byte(action), 0o200); err != nil {
		t.Fatalf("make the kernel send %s@%s: %v", action, devpath, err)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make the kernel send uevents")
	}
}

// TestDIMMBurstIsOnePatch hot-adds a 64 GiB DIMM to the synthetic machine
// (512 blocks of 128 MiB, each added and onlined: 1024 uevents, sent by the
// real kernel) and counts the Node status patches it costs.
func TestDIMMBurstIsOnePatch(t *testing.T) {
	needRoot(t)
	real, err := filepath.Glob("/sys/devices/system/memory/memory[0-9]*")
	if err != nil || len(real) == 0 {
		t.Skip("this kernel has no memory block devices to send uevents for")
	}
	e := setup(t, nodeBurst, envOptions{cpus: 2, uevents: true, kubeletGap: time.Hour,
		args: []string{"--memtotal-interval", "0", "--coalesce-quiet", "200ms", "--coalesce-max", "10s"}})
	e.waitState(2, "Accepted")
	before := e.settledPatches()
	st0, err := e.d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	// The hardware change, as sysfs shows it once the DIMM is in.
	const blocks = 512
	e.tree.AddBlocks(32, blocks, 0, topologytest.BlockOffline, "Movable Normal")
	for id := 32; id < 32+blocks; id++ {
		e.tree.SetBlockState(id, topologytest.BlockOnline)
	}
	grownKB := e.tree.MemTotalKB() + blocks*blockSize>>10
	e.tree.SetMemTotalKB(grownKB)
	e.tree.SetNodeMemTotalKB(0, e.tree.NodeMemTotalKB(0)+blocks*blockSize>>10)

	// The kernel's messages: 512 adds, then 512 onlines.
	start := time.Now()
	for _, action := range []string{"add", "online"} {
		for i := range blocks {
			kernelUevent(t, strings.TrimPrefix(real[i%len(real)], "/sys"), action)
		}
	}
	sent := time.Since(start)

	e.waitNode("memory grown by 64Gi", func(n *corev1.Node) bool {
		q := n.Status.Capacity[corev1.ResourceMemory]
		return q.Value() == int64(grownKB)<<10
	})
	after := e.settledPatches()
	st, err := e.d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := st.LastChange
	if c == nil || c.ID != st0.LastChange.ID+1 {
		t.Errorf("the burst made changes #%d..#%d, want exactly one", st0.LastChange.ID+1, c.ID)
	}
	if c.Events < 2*blocks {
		t.Errorf("the change counted %d uevents, want at least %d", c.Events, 2*blocks)
	}
	t.Logf("1024 kernel uevents sent in %s; one change (%d uevents, seqnums %s, %s); PATCH requests: %d",
		sent.Round(time.Millisecond), c.Events, c.Seqnums.String(), c.Changes.String(), after-before)
	if after-before != 1 {
		t.Errorf("the burst cost %d Node status patches, want 1", after-before)
	}
}

// TestRealCPUHotplugToPatch takes cpu1 of this machine offline and back
// and measures the time from the kernel's uevent to the API server's
// acknowledgement of the Node status patch.
func TestRealCPUHotplugToPatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to write " + daemontest.CPU1Online)
	}
	if _, err := os.Stat(daemontest.CPU1Online); err != nil {
		t.Skipf("cpu1 cannot be offlined on this machine: %v", err)
	}
	if err := daemontest.SetCPU1(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := daemontest.SetCPU1(true); err != nil {
			t.Errorf("restore cpu1: %v", err)
		}
	})
	fsys, err := topology.NewFS("/sys", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fsys.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	capac := snap.Capacity()
	cycles := 20
	e := setup(t, nodeHotplug, envOptions{realSysfs: true, uevents: true, kubeletGap: time.Hour,
		bootCPU: capac.CPU, bootMemory: resource.NewQuantity(int64(capac.Memory), resource.BinarySI).String()})
	e.waitState(capac.CPU, "Accepted")
	before := len(e.d.Stderr.Records("Node status patched"))
	for range cycles {
		if err := daemontest.SetCPU1(false); err != nil {
			t.Fatal(err)
		}
		e.waitState(capac.CPU-1, "Accepted")
		if err := daemontest.SetCPU1(true); err != nil {
			t.Fatal(err)
		}
		e.waitState(capac.CPU, "Accepted")
	}
	var lat []time.Duration
	for _, r := range e.d.Stderr.Records("Node status patched")[before:] {
		if ns, ok := r["latency"].(float64); ok {
			lat = append(lat, time.Duration(ns))
		}
	}
	if len(lat) < 2*cycles {
		t.Fatalf("%d patches carried a hardware-event latency over %d cycles, want at least %d", len(lat), cycles, 2*cycles)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Microsecond)
	}
	t.Logf("uevent → acknowledged Node patch over %d cpu1 offline/online cycles: n=%d min=%s median=%s p90=%s p99=%s max=%s",
		cycles, len(lat), lat[0].Round(time.Microsecond), q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(time.Microsecond))
}
