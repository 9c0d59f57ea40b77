package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/topology/topologytest"
)

// TestKubeletPrestart runs the subcommand as the drop-in does, with the
// daemon's flags, on a synthetic machine of 16 CPUs whose CPU manager
// checkpoint knows CPUs 0-12: it rewrites the checkpoint for 0-15, logs
// its outcome and duration, and exits 0; given a flag no one knows, or a
// kubelet configuration it cannot read, it changes nothing and exits 0
// too.
func TestKubeletPrestart(t *testing.T) {
	dir := t.TempDir()
	sys, proc := topologytest.Machine{CPUs: topologytest.SMTCPUs(0, 16, 0, 0), MemKB: 8 << 20}.Write(t, topologytest.Dir(t))
	root := filepath.Join(dir, "kubelet")
	os.Mkdir(root, 0o755)
	cpu0, err := os.ReadFile("../../kubelet/checkpoint/testdata/cpu_manager_state/v4")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(root, "cpu_manager_state")
	config := filepath.Join(dir, "config.yaml")
	os.WriteFile(config, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"), 0o644)
	args := func(extra ...string) []string {
		return append([]string{"--auto-online", "--kubelet-restart=never", "--sysfs-root", sys, "--procfs-root", proc,
			"--kubelet-root-dir", root, "--kubelet-config", config, "--state-file", filepath.Join(dir, "state", "state.json"),
			"--log-format", "text"}, extra...)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		rewrite bool
		log     string
	}{
		{"the daemon's flags", args(), true, "outcome=rewritten"},
		{"a flag no one knows", args("--no-such-flag"), false, "outcome=failed"},
		{"a configuration it cannot read", args("--kubelet-config", filepath.Join(dir, "absent.yaml")), false, "outcome=failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(state, cpu0, 0o644)
			var stdout, stderr bytes.Buffer
			if got := kubeletPrestart(tc.args, &stdout, &stderr); got != 0 {
				t.Errorf("exit status %d, want 0", got)
			}
			log := stderr.String()
			t.Logf("%s", log)
			if !strings.Contains(log, tc.log) {
				t.Errorf("log has no %s", tc.log)
			}
			if tc.rewrite && !strings.Contains(log, "duration=") {
				t.Error("log has no duration")
			}
			st, err := checkpoint.ReadCPUManager(state)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(state)
			if rewritten := !bytes.Equal(b, cpu0); rewritten != tc.rewrite {
				t.Fatalf("rewritten %v, want %v (CPUs %v)", rewritten, tc.rewrite, st.AllCPUs())
			}
			if tc.rewrite && len(st.AllCPUs()) != 16 {
				t.Errorf("the rewritten checkpoint covers CPUs %v, want 0-15", st.AllCPUs())
			}
		})
	}

	var stdout, stderr bytes.Buffer
	if got := kubeletPrestart([]string{"--sysfs-root", sys, "--help"}, &stdout, &stderr); got != 0 || !strings.Contains(stdout.String(), "ExecStartPre") {
		t.Errorf("--help: status %d, printed %q", got, stdout.String())
	}
}
