package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-resized/node-resized/cgroup/cgrouptest"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
)

var (
	syntheticOnce sync.Once
	syntheticBin  string
	syntheticErr  error
)

// syntheticCgroupsDaemon builds the daemon with the tag syntheticcgroups,
// which lets it take a synthetic cgroup v2 tree for --cgroup-root: this
// host's memory and cpu controllers are bound to cgroup v1, so there is no
// real v2 kubepods to enforce on. Everything else is the release build.
func syntheticCgroupsDaemon(t *testing.T) string {
	t.Helper()
	syntheticOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		syntheticBin = filepath.Join(filepath.Dir(daemonBin), "node-resized-syntheticcgroups")
		cmd := exec.Command("go", "build", "-tags", "grpcnotrace,syntheticcgroups", "-o", syntheticBin, "./cmd/node-resized")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			syntheticErr = fmt.Errorf("build node-resized with syntheticcgroups: %v\n%s", err, out)
		}
	})
	if syntheticErr != nil {
		t.Fatal(syntheticErr)
	}
	return syntheticBin
}

// readLimit reads one kubepods file of the synthetic tree.
func readLimit(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// kubepodsHolds reports whether kubepods holds l's memory.max and
// cpu.weight.
func kubepodsHolds(t *testing.T, dir string, l decide.CgroupLimits) bool {
	t.Helper()
	return readLimit(t, dir, "memory.max") == strconv.FormatInt(l.MemoryMax, 10) &&
		readLimit(t, dir, "cpu.weight") == strconv.FormatUint(l.CPUWeight, 10)
}

// TestUninstall: a configured capacity below the hardware (Path A2)
// clamps kubepods; SIGTERM (a stop, as `systemctl disable --now` or a
// DaemonSet's deletion sends) keeps the clamp and the condition; then
// `node-resized --uninstall`, the same binary with the daemon's flags,
// puts kubepods back to the kubelet's limits for the hardware, takes the
// condition off the Node, records an event and removes the state file.
func TestUninstall(t *testing.T) {
	bin := syntheticCgroupsDaemon(t)
	const gi = int64(1) << 30
	// The e2e KubeletConfiguration is empty: no reservations, the cgroupfs
	// driver; the kubelet wrote kubepods for the 4-CPU, 4 GiB machine.
	hardware := decide.KubepodsLimits(resources.List{resources.CPU: 4000, resources.Memory: 4 * gi}, decide.Reservations{})
	configured := decide.KubepodsLimits(resources.List{resources.CPU: 2000, resources.Memory: 3 * gi}, decide.Reservations{})
	cgroups := t.TempDir()
	kubepods := cgrouptest.Kubepods(t, cgroups, hardware)
	state := filepath.Join(t.TempDir(), "state.json")

	e := setup(t, nodeUninst, envOptions{cpus: 4, bin: bin, args: []string{"--cgroup-root", cgroups, "--state-file", state}})
	e.waitState(4, "Accepted")
	e.configure(`{"cpu":"2","memory":"3Gi"}`)
	e.waitState(2, "Accepted")
	pollUntil(t, "kubepods clamped to the configured capacity", func() bool { return kubepodsHolds(t, kubepods, configured) })
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("no state file while the daemon runs: %v", err)
	}

	uninstallCmd := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append(slices.Clone(e.args), "--socket", e.d.Socket, "--log-level", "warn", "--uninstall")
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("node-resized --uninstall: %v\nstdout:\n%sstderr:\n%s", err, stdout.String(), stderr.String())
		return stdout.String() + stderr.String(), err
	}

	// Beside a running daemon it refuses, and changes nothing.
	out, err := uninstallCmd()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "node-resized is running") {
		t.Fatalf("--uninstall beside the running daemon: %v, %q; want exit status 1 saying the daemon runs", err, out)
	}
	if !kubepodsHolds(t, kubepods, configured) {
		t.Fatal("--uninstall beside the running daemon changed kubepods")
	}

	// A stop keeps everything: the clamp is protection, and the condition
	// stands as last written, through a status update of the kubelet.
	if err := e.d.Stop(t); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	// With no daemon to answer it, the stand-in kubelet's next status
	// update puts its boot-time capacity back; the condition stays.
	n := e.waitNode("the kubelet's own capacity after the stop", func(n *corev1.Node) bool {
		cpu := n.Status.Capacity[corev1.ResourceCPU]
		return cpu.Value() == 4
	})
	if !kubepodsHolds(t, kubepods, configured) {
		t.Errorf("after SIGTERM kubepods holds memory.max %s, cpu.weight %s; want the clamp %d, %d kept",
			readLimit(t, kubepods, "memory.max"), readLimit(t, kubepods, "cpu.weight"), configured.MemoryMax, configured.CPUWeight)
	}
	if c := condition(n); c == nil || c.Reason != "Accepted" {
		t.Errorf("after SIGTERM the condition is %+v; want Accepted kept", c)
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("after SIGTERM the state file is gone: %v", err)
	}

	// The uninstall.
	out, err = uninstallCmd()
	if err != nil {
		t.Fatalf("--uninstall: %v\n%s", err, out)
	}
	for _, want := range []string{"released hardware: none released", "kubepods: set to what the kubelet writes for the machine as it is", "condition: removed CapacityConfigured",
		"taint: Node " + nodeUninst + " does not carry", "event: recorded Normal NodeResizedRemoved", "state: removed " + state} {
		if !strings.Contains(out, want) {
			t.Errorf("--uninstall output does not say %q", want)
		}
	}
	if !kubepodsHolds(t, kubepods, hardware) {
		t.Errorf("after --uninstall kubepods holds memory.max %s, cpu.weight %s; want the kubelet's %d, %d for the hardware",
			readLimit(t, kubepods, "memory.max"), readLimit(t, kubepods, "cpu.weight"), hardware.MemoryMax, hardware.CPUWeight)
	}
	n, err = e.admin.CoreV1().Nodes().Get(context.Background(), nodeUninst, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(n); c != nil {
		t.Errorf("after --uninstall the Node still has %+v", c)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Errorf("after --uninstall the Node is not Ready: %+v", n.Status.Conditions)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after --uninstall the state file: %v; want it gone", err)
	}
	e.waitEvent("Normal/NodeResizedRemoved")

	// Again: nothing left to undo, and it says so.
	out, err = uninstallCmd()
	if err != nil {
		t.Fatalf("second --uninstall: %v\n%s", err, out)
	}
	for _, want := range []string{"kubepods: already what the kubelet writes", "has no CapacityConfigured condition", "state: no state file"} {
		if !strings.Contains(out, want) {
			t.Errorf("second --uninstall output does not say %q", want)
		}
	}
}

// pollUntil polls cond for 30s at most.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 30s", what)
}
