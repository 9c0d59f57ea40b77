package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/types"
)

// fakeNode plays the API server for resize: it records the write and
// gives WatchNode's function the views in order, then waits for the
// context's end (a daemon that says nothing more).
type fakeNode struct {
	connectErr, setErr, watchErr error
	views                        []types.NodeView

	kubeconfig, nodeName string
	set                  map[string]string
	release              bool
	cleared              bool
}

func (f *fakeNode) SetConfiguredCapacity(_ context.Context, raw map[string]string, release bool) (types.NodeView, error) {
	if f.setErr != nil {
		return types.NodeView{}, f.setErr
	}
	f.set, f.release = maps.Clone(raw), release
	return types.NodeView{Source: types.SourceAnnotation, Configured: types.Configured{Present: true, Raw: raw, Release: release}}, nil
}

func (f *fakeNode) ClearConfiguredCapacity(context.Context) (types.NodeView, error) {
	if f.setErr != nil {
		return types.NodeView{}, f.setErr
	}
	f.cleared = true
	return types.NodeView{}, nil
}

func (f *fakeNode) WatchNode(ctx context.Context, fn func(types.NodeView) (bool, error)) error {
	if f.watchErr != nil {
		return f.watchErr
	}
	for _, v := range f.views {
		done, err := fn(v)
		if err != nil || done {
			return err
		}
	}
	<-ctx.Done()
	return fmt.Errorf("watch Node: %w", ctx.Err())
}

// ctl runs node-resizectl with args against f and returns the exit status
// and what it printed.
func ctl(t *testing.T, f *fakeNode, args ...string) (int, string, string) {
	t.Helper()
	old := connectNode
	t.Cleanup(func() { connectNode = old })
	connectNode = func(kubeconfig, nodeName string, _ *slog.Logger) (nodeConfig, error) {
		f.kubeconfig, f.nodeName = kubeconfig, nodeName
		if f.connectErr != nil {
			return nil, f.connectErr
		}
		return f, nil
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestResizeUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"resize"}, "nothing to set"},
		{[]string{"resize", "--wait"}, "nothing to set"},
		{[]string{"resize", "--cpu", "0"}, "must be positive"},
		{[]string{"resize", "--cpu", "-2"}, "must be positive"},
		{[]string{"resize", "--memory", "lots"}, "not a quantity"},
		{[]string{"resize", "--cpu", "4", "--clear"}, "--clear"},
		{[]string{"resize", "--set", "nvidia.com/gpu=1"}, "manages no resource"},
		{[]string{"resize", "--set", "pods=110"}, "manages no resource"},
		{[]string{"resize", "--set", "hugepages-3x=1Gi"}, "manages no resource"},
		{[]string{"resize", "--set", "cpu"}, "NAME=QUANTITY"},
		{[]string{"resize", "--cpu", "4", "--set", "cpu=4"}, "given twice"},
		{[]string{"resize", "--hugepages-2Mi", "1Gi", "--set", "hugepages-2048Ki=1Gi"}, "given twice"},
		{[]string{"resize", "--cpu", "4", "--timeout", "-1s"}, "--timeout"},
		{[]string{"resize", "--cpu", "4", "--timeout", "soon"}, "timeout"},
		{[]string{"resize", "--cpu", "4", "-o", "json"}, "text only"},
		{[]string{"resize", "--cpu", "4", "extra"}, "unexpected argument"},
		{[]string{"resize", "--cpus", "4"}, "flag provided but not defined"},
		{[]string{"status", "--follow"}, "flag provided but not defined"},
		{[]string{"frobnicate"}, "unknown command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := &fakeNode{}
			code, _, stderr := ctl(t, f, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("stderr %q, want one line with %q", stderr, tc.want)
			}
			if f.set != nil || f.cleared {
				t.Errorf("wrote the Node after a usage error")
			}
		})
	}
}

func TestResizeWritesWhatIsAsked(t *testing.T) {
	t.Setenv("NODE_NAME", "worker-7")
	f := &fakeNode{}
	code, stdout, stderr := ctl(t, f, "resize", "--cpu", "4", "--memory=8Gi", "--set", "hugepages-1Gi=2Gi", "--kubeconfig", "/k.conf")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := map[string]string{"cpu": "4", "memory": "8Gi", "hugepages-1Gi": "2Gi"}; !maps.Equal(f.set, want) {
		t.Errorf("wrote %v, want %v", f.set, want)
	}
	if f.nodeName != "worker-7" || f.kubeconfig != "/k.conf" {
		t.Errorf("node %q kubeconfig %q, want $NODE_NAME and the flag", f.nodeName, f.kubeconfig)
	}
	if !strings.Contains(stdout, `{"cpu":"4","hugepages-1Gi":"2Gi","memory":"8Gi"}`) {
		t.Errorf("stdout %q does not say what was set", stdout)
	}

	f = &fakeNode{}
	if code, _, stderr := ctl(t, f, "resize", "--clear", "--node-name", "other"); code != exitOK || !f.cleared || f.nodeName != "other" {
		t.Errorf("--clear: exit %d (%s), cleared %v, node %q", code, stderr, f.cleared, f.nodeName)
	}
}

// view is the Node with a configured capacity and a condition.
func view(conf types.Configured, reason types.Reason, message string) types.NodeView {
	v := types.NodeView{Configured: conf}
	if reason != "" {
		st := types.StatusFalse
		if reason == types.ReasonAccepted {
			st = types.StatusTrue
		}
		v.Condition = &types.Condition{Status: st, Reason: reason, Message: message, LastTransitionTime: time.Now()}
	}
	return v
}

func TestResizeWaitsForItsOwnAnswer(t *testing.T) {
	old := types.Configured{Present: true, Raw: map[string]string{"cpu": "8"}}
	ours := types.Configured{Present: true, Raw: map[string]string{"cpu": "4"}}
	staleAccepted := `configured capacity {"cpu":"8"}: capacity cpu=8 applied`
	for _, tc := range []struct {
		name     string
		views    []types.NodeView
		watchErr error
		code     int
		stdout   []string
		stderr   string
	}{
		{
			name: "accepted after progress",
			views: []types.NodeView{
				view(old, types.ReasonAccepted, staleAccepted),  // the Node before the write
				view(ours, types.ReasonAccepted, staleAccepted), // the write, the daemon not yet
				view(ours, types.ReasonInProgress, `configured capacity {"cpu":"4"}: lowering capacity (cpu 8 → 4)`),
				view(ours, types.ReasonInProgress, `configured capacity {"cpu":"4"}: lowering capacity (cpu 8 → 4); eviction blocked: PodDisruptionBudget default/web`),
				view(ours, types.ReasonAccepted, `configured capacity {"cpu":"4"}: capacity cpu=4 applied`),
			},
			code:   exitOK,
			stdout: []string{"Waiting for node-resized", "InProgress", "eviction blocked", "Accepted", `configured capacity {"cpu":"4"}: capacity cpu=4 applied`},
		},
		{
			name:   "a stale Accepted does not end the wait",
			views:  []types.NodeView{view(old, types.ReasonAccepted, staleAccepted), view(ours, types.ReasonAccepted, staleAccepted)},
			code:   exitTimeout,
			stderr: "did not answer within 300ms (last condition: none for this value",
		},
		{
			name:   "an Accepted before the write shows the value does not count",
			views:  []types.NodeView{view(old, types.ReasonAccepted, `configured capacity {"cpu":"4"}: capacity cpu=4 applied`)},
			code:   exitTimeout,
			stderr: "did not answer",
		},
		{
			name:   "infeasible",
			views:  []types.NodeView{view(ours, types.ReasonInfeasible, `configured capacity {"cpu":"4"}: not applied: exceeds physical capacity: cpu 4 > physical 2`)},
			code:   exitFailed,
			stdout: []string{"Infeasible"},
			stderr: "not applied (Infeasible): configured capacity {\"cpu\":\"4\"}: not applied: exceeds physical capacity: cpu 4 > physical 2",
		},
		{
			name:   "emergency reduced",
			views:  []types.NodeView{view(ours, types.ReasonEmergencyReduced, `configured capacity {"cpu":"4"}: physical capacity fell below it`)},
			code:   exitFailed,
			stderr: "not applied (EmergencyReduced)",
		},
		{
			name: "changed by someone else",
			views: []types.NodeView{
				view(ours, types.ReasonInProgress, `configured capacity {"cpu":"4"}: lowering capacity`),
				view(types.Configured{Present: true, Raw: map[string]string{"cpu": "2"}}, types.ReasonInProgress, `configured capacity {"cpu":"4"}: lowering capacity`),
			},
			code:   exitFailed,
			stderr: `changed to {"cpu":"2"} meanwhile`,
		},
		{
			name:     "the watch fails",
			watchErr: errors.New("watch Node worker-1: the Node worker-1 was deleted"),
			code:     exitAPI,
			stderr:   "was deleted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNode{views: tc.views, watchErr: tc.watchErr}
			code, stdout, stderr := ctl(t, f, "resize", "--cpu", "4", "--wait", "--timeout", "300ms", "--node-name", "worker-1")
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
			if strings.Contains(stdout, "capacity cpu=8 applied") {
				t.Errorf("printed the stale condition as progress:\n%s", stdout)
			}
		})
	}
}

func TestResizeClearWaitsForTheHardware(t *testing.T) {
	f := &fakeNode{views: []types.NodeView{
		view(types.Configured{Present: true, Raw: map[string]string{"cpu": "4"}}, types.ReasonAccepted, `configured capacity {"cpu":"4"}: capacity cpu=4 applied`),
		view(types.Configured{}, types.ReasonAccepted, `configured capacity {"cpu":"4"}: capacity cpu=4 applied`),
		view(types.Configured{}, types.ReasonAccepted, "capacity cpu=8 applied (no configured capacity: following the hardware)"),
	}}
	code, stdout, stderr := ctl(t, f, "resize", "--clear", "--wait", "--timeout", "300ms")
	if code != exitOK || !strings.Contains(stdout, "following the hardware") || strings.Contains(stdout, "cpu=4 applied") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestResizeAPIErrors(t *testing.T) {
	for _, f := range []*fakeNode{
		{connectErr: errors.New("load kubeconfig /etc/kubernetes/kubelet.conf: permission denied")},
		{setErr: errors.New("patch Node worker-1: nodes \"worker-1\" is forbidden")},
	} {
		code, _, stderr := ctl(t, f, "resize", "--cpu", "4", "--wait")
		if code != exitAPI || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("exit %d, want %d, one line: %q", code, exitAPI, stderr)
		}
	}
}

// An API server that is not there: the real client fails the write at once.
func TestResizeUnreachableAPIServer(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"resize", "--cpu", "4", "--wait", "--timeout", "20s", "--kubeconfig", kubeconfig, "--node-name", "worker-1"}, &stdout, &stderr)
	if code != exitAPI || !strings.Contains(stderr.String(), "127.0.0.1:1") {
		t.Errorf("exit %d, want %d; stderr %q", code, exitAPI, stderr.String())
	}
	code = run(context.Background(), []string{"resize", "--cpu", "4", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, &stdout, &stderr)
	if code != exitAPI {
		t.Errorf("missing kubeconfig: exit %d, want %d", code, exitAPI)
	}
}

// --release writes the request with its release, waits through the
// release for the Accepted of the smaller machine, and prints what may be
// unplugged; the same capacity without --release is another request.
func TestResizeReleaseWaitsAndSaysWhatToUnplug(t *testing.T) {
	ours := types.Configured{Present: true, Raw: map[string]string{"cpu": "2"}, Release: true}
	held := types.Configured{Present: true, Raw: map[string]string{"cpu": "2"}}
	phrase := types.ConfiguredPhrase(ours.Key())
	f := &fakeNode{views: []types.NodeView{
		view(held, types.ReasonAccepted, types.ConfiguredPhrase(held.Key())+": capacity cpu=2 applied"),
		view(ours, types.ReasonInProgress, phrase+": capacity cpu=2 applied; releasing the CPUs and memory above it (planned release)"),
		view(ours, types.ReasonAccepted, phrase+": capacity cpu=2 applied; released: cpus 2-3; memory PNP0C80:00 [0x240000000-0x280000000) 1Gi, 8/8 blocks offline, safe to unplug"),
	}}
	code, stdout, stderr := ctl(t, f, "resize", "--cpu", "2", "--release", "--wait", "--timeout", "5s")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	if !f.release {
		t.Errorf("the release was not asked for")
	}
	for _, want := range []string{"releasing the CPUs", "Released (remove in the hypervisor what is safe to unplug): cpus 2-3; memory PNP0C80:00"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Count(stdout, "Accepted") != 1 {
		t.Errorf("the Accepted of the request without release ended the wait:\n%s", stdout)
	}
	code, _, stderr = ctl(t, &fakeNode{}, "resize", "--clear", "--release")
	if code != exitUsage || !strings.Contains(stderr, "--release goes with a capacity") {
		t.Errorf("--clear --release: exit %d, %q", code, stderr)
	}
}
