package vm

import (
	"testing"
	"time"
)

func TestExecStats(t *testing.T) {
	v := &VM{}
	if got := v.ExecStats(); got != "0 in 0s" {
		t.Errorf("no commands: %q", got)
	}
	v.countExec("systemctl is-active kubelet", 700*time.Millisecond)
	v.countExec("  journalctl -u kubelet", 2*time.Second)
	v.countExec("systemctl show kubelet", 500*time.Millisecond)
	v.countExec("true", 0)
	want := "4 in 3s; journalctl 1 in 2s; systemctl 2 in 1.2s; true 1 in 0s"
	if got := v.ExecStats(); got != want {
		t.Errorf("ExecStats() = %q, want %q", got, want)
	}
}
