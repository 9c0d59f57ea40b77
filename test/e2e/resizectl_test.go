package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resizectl runs the built node-resizectl resize against the node's Node
// with the node's own identity (as the kubelet's kubeconfig would give it)
// and returns its exit status and output.
func (e *env) resizectl(args ...string) (int, string, string) {
	e.t.Helper()
	kubeconfig, err := cl.NodeKubeconfig(e.node)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"resize", "--kubeconfig", kubeconfig, "--node-name", e.node}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(daemonBin), "node-resizectl"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("node-resizectl %v: %v", args, err)
	}
	e.t.Logf("node-resizectl %s: exit %d\nstdout:\n%sstderr:\n%s", strings.Join(args[5:], " "), code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// TestResizeCtl is KEP-3953's story of a resize helper for orchestrators:
// node-resizectl resize --wait, the real binary, with the node's own
// identity, against the real daemon and API server. An accepted resize
// exits 0 once the condition decided for it says Accepted (the Accepted
// left from before the request does not end the wait); one above the
// hardware exits 1 with the condition's message; with no daemon to answer
// it exits 2 at its timeout, although the Node shows an Accepted (for the
// previous value) all along.
func TestResizeCtl(t *testing.T) {
	e := setup(t, nodeResize, envOptions{cpus: 4})
	e.waitState(4, "Accepted")

	// Accepted: a downscale below the hardware (Path A2).
	code, stdout, stderr := e.resizectl("--cpu", "2", "--memory", "3Gi", "--wait", "--timeout", "60s")
	if code != 0 {
		t.Fatalf("resize --cpu 2: exit %d, want 0: %s", code, stderr)
	}
	for _, want := range []string{"annotation node-resized.io/configured-capacity", "Accepted", `configured capacity {"cpu":"2","memory":"3Gi"}: capacity cpu=2`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("resize --cpu 2 printed no %q:\n%s", want, stdout)
		}
	}
	// It ended on the answer to its request, not on the Accepted that
	// stood before: right after it the Node has the new capacity.
	n, err := e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := condition(n)
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 2 || c == nil || c.Reason != "Accepted" || !strings.Contains(c.Message, `{"cpu":"2","memory":"3Gi"}`) {
		t.Errorf("after exit 0 the Node has cpu %s and condition %+v, want cpu 2 Accepted for the request", q.String(), c)
	}

	// Infeasible: more CPUs than the machine has.
	code, stdout, stderr = e.resizectl("--cpu", "16", "--wait", "--timeout", "60s")
	if code != 1 {
		t.Fatalf("resize --cpu 16: exit %d, want 1", code)
	}
	if !strings.Contains(stderr, "Infeasible") || !strings.Contains(stderr, "exceeds physical capacity: cpu 16 > physical 4") {
		t.Errorf("resize --cpu 16: stderr lacks the condition's message:\n%s", stderr)
	}
	if !strings.Contains(stdout, "Infeasible") {
		t.Errorf("resize --cpu 16: stdout lacks the Infeasible condition:\n%s", stdout)
	}

	// Back to Accepted, then no daemon: a request nobody answers times out
	// with 2, while the Node shows the Accepted of the value before it.
	if code, _, stderr := e.resizectl("--cpu", "4", "--wait", "--timeout", "60s"); code != 0 {
		t.Fatalf("resize --cpu 4: exit %d, want 0: %s", code, stderr)
	}
	if err := e.d.Stop(t); err != nil {
		t.Fatalf("stop the daemon: %v", err)
	}
	start := time.Now()
	code, _, stderr = e.resizectl("--cpu", "3", "--wait", "--timeout", "3s")
	if code != 2 {
		t.Fatalf("resize --cpu 3 with no daemon: exit %d, want 2", code)
	}
	if took := time.Since(start); took < 3*time.Second || took > 30*time.Second {
		t.Errorf("timed out after %s, want about 3s", took)
	}
	if !strings.Contains(stderr, "did not answer within 3s") {
		t.Errorf("stderr lacks the timeout:\n%s", stderr)
	}
	if c := condition(e.waitState(4, "Accepted")); !strings.Contains(c.Message, `configured capacity {"cpu":"4"}`) {
		t.Errorf("the Node's condition %+v, want the Accepted of the value before", c)
	}

	// --clear without --wait removes the value and exits 0.
	if code, _, stderr := e.resizectl("--clear"); code != 0 {
		t.Fatalf("resize --clear: exit %d, want 0: %s", code, stderr)
	}
	n, err = e.admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n.Annotations["node-resized.io/configured-capacity"]; ok {
		t.Errorf("after --clear the annotation is %q", v)
	}
}
