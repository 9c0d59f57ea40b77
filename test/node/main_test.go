package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/cluster"
	"github.com/node-resized/node-resized/test/vm"
)

// These tests boot a real guest against a real control plane. They need
// qemu-system-x86_64 and a kernel unpacked by test/vm/fetch (with
// NODE_RESIZED_VM_FETCH=1 they run it themselves), and they build the
// control plane, the kubelet and fakecri first (minutes on a cold build
// cache; make e2e-node builds them before the tests run).

var (
	kernel        vm.Kernel
	kernelErr     error
	clusterBinDir string
	nodeBinDir    string
	runtimeDir    string
	runtimeErr    error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	kernel, kernelErr = findKernel()

	var err error
	if clusterBinDir, err = cluster.DefaultBinDir(); err == nil {
		t0 := time.Now()
		if err = cluster.Build(ctx, clusterBinDir); err == nil {
			fmt.Fprintf(os.Stderr, "control plane in %s ready after %v\n", clusterBinDir, time.Since(t0).Round(time.Millisecond))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot build the control plane: %v\n", err)
		return 1
	}
	if nodeBinDir, err = DefaultBinDir(); err == nil {
		err = binDirSeen(nodeBinDir)
	}
	if err == nil {
		t0 := time.Now()
		if err = Build(ctx, nodeBinDir); err == nil {
			fmt.Fprintf(os.Stderr, "kubelet and fakecri in %s ready after %v\n", nodeBinDir, time.Since(t0).Round(time.Millisecond))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot build the kubelet and fakecri: %v\n", err)
		return 1
	}
	// The real runtime: the tests that need it fail with runtimeErr.
	if runtimeDir, runtimeErr = DefaultRuntimeDir(); runtimeErr == nil {
		t0 := time.Now()
		if runtimeErr = BuildRuntime(ctx, runtimeDir); runtimeErr == nil {
			fmt.Fprintf(os.Stderr, "containerd, runc, CNI plugins, crictl and images in %s ready after %v\n", runtimeDir, time.Since(t0).Round(time.Millisecond))
		}
	}
	return m.Run()
}

// findKernel finds QEMU and the cached kernel, running test/vm/fetch when
// NODE_RESIZED_VM_FETCH=1 and either is missing.
func findKernel() (vm.Kernel, error) {
	_, qerr := exec.LookPath("qemu-system-x86_64")
	k, kerr := vm.FindKernel("")
	if qerr == nil && kerr == nil {
		return k, nil
	}
	if os.Getenv("NODE_RESIZED_VM_FETCH") != "1" {
		return vm.Kernel{}, fmt.Errorf("no qemu-system-x86_64 or no cached kernel: run test/vm/fetch (or set NODE_RESIZED_VM_FETCH=1)")
	}
	out, err := exec.Command(filepath.Join("..", "vm", "fetch")).CombinedOutput()
	if err != nil {
		return vm.Kernel{}, fmt.Errorf("test/vm/fetch: %v\n%s", err, out)
	}
	return vm.FindKernel("")
}

func needKernel(t *testing.T) vm.Kernel {
	t.Helper()
	if kernelErr != nil {
		t.Fatal(kernelErr)
	}
	return kernel
}

// startCluster starts a control plane with an identity for each node name,
// stopped when the test ends; its logs are kept when the test fails.
func startCluster(t *testing.T, nodes ...string) *cluster.Cluster {
	t.Helper()
	return startClusterOpts(t, cluster.Options{}, nodes...)
}

// startClusterOpts is startCluster with options (e.g. Controllers).
func startClusterOpts(t *testing.T, opts cluster.Options, nodes ...string) *cluster.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "node-resized-node-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	opts.BinDir, opts.SkipBuild, opts.Dir, opts.Nodes = clusterBinDir, true, dir, nodes
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Logf("control plane up in %v", time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("control plane logs kept in %s", filepath.Join(dir, "logs"))
		} else {
			os.RemoveAll(dir)
		}
	})
	return c
}

// bootNode boots a node against c and closes it when the test ends; when
// the test fails its folder (console, QEMU log, guest journal) is kept.
func bootNode(t *testing.T, c *cluster.Cluster, cfg Config) *Node {
	t.Helper()
	api, err := c.NodeConfig(cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	cfg.API = api
	cfg.Kernel = needKernel(t)
	cfg.BinDir = nodeBinDir
	cfg.SkipBuild = true
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "node-resized-node-"); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	n, err := Boot(ctx, cfg)
	if err != nil {
		t.Logf("node files kept in %s", cfg.Dir)
		t.Fatal(err)
	}
	bootCPU, _, _ := n.HostCPU()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if out, err := n.Run(ctx, guestCPUScript); err == nil {
			t.Logf("guest's own CPU (/proc/stat; then the top processes, own+reaped children): %s", strings.Join(strings.Fields(out), " "))
		}
		cancel()
		t.Logf("guest commands (the test's, by program, wall time): %s", n.ExecStats())
		if jit := tcgStats(n); jit != "" {
			t.Logf("guest's TCG translation cache: %s", jit)
		}
		if cpu, alive, err := n.HostCPU(); err == nil {
			t.Logf("guest cost: %v of host CPU over %v (%.0f%% of a core); of it the boot to Node Ready %v of CPU in %v",
				cpu.Round(time.Second), alive.Round(time.Second), 100*cpu.Seconds()/alive.Seconds(), bootCPU.Round(time.Second), n.ReadyTime().Round(time.Second))
		}
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("node files (console.log, qemu.log, guest/journal.log) kept in %s", cfg.Dir)
		} else {
			os.RemoveAll(cfg.Dir)
		}
	})
	return n
}

// guestCPUScript prints, in the guest, where its own CPU time went: the
// /proc/stat split in seconds, then the ten processes with the most user
// plus system time of their own, each as own+reaped: the second is its
// waited-for children's (a poller's spawns, PID 1's ended services).
// Only shell builtins in the loop: with a cat per process the script
// itself cost 20 to 24 s of the host's CPU (1.5 s now).
const guestCPUScript = `hz=$(getconf CLK_TCK)
read -r _ u ni sy id _ irq sirq _ < /proc/stat
echo "user=$((u/hz))s nice=$((ni/hz))s system=$((sy/hz))s idle=$((id/hz))s irq=$((irq/hz))s softirq=$((sirq/hz))s;"
for f in /proc/[0-9]*/stat; do
	read -r s <"$f" 2>/dev/null || continue
	c=${s#*(}; c=${c%%)*}; r=${s##*) }
	set -- $r
	echo "$((${12} + ${13})) $((${14} + ${15})) $c"
done | sort -rn | head -10 | while read -r own reaped c; do echo "$c=$((own / hz)).$((own % hz * 10 / hz))s+$((reaped / hz)).$((reaped % hz * 10 / hz))s"; done`

// tcgStats is QEMU's "info jit" summed up: the translated code's size in
// its buffer, the blocks in it (translated since the last flush), and how
// often the buffer was flushed (full: everything is translated again);
// "" when not known.
func tcgStats(n *Node) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out string
	if err := n.QMP().Execute(ctx, "human-monitor-command", map[string]any{"command-line": "info jit"}, &out); err != nil {
		return ""
	}
	var parts []string
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "  ")
		if ok && (k == "gen code size" || k == "TB count" || k == "TB flush count") {
			parts = append(parts, k+" "+strings.TrimSpace(v))
		}
	}
	return strings.Join(parts, ", ")
}
