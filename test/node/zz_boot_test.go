package node

import (
	"os"
	"testing"
)

func TestZZBoot(t *testing.T) {
	if os.Getenv("ZZ_IDLE") == "" {
		t.Skip("ZZ_IDLE")
	}
	c := startCluster(t, "node-1")
	n := bootNode(t, c, Config{Name: "node-1"})
	t.Logf("agent %v ready %v", n.AgentReadyTime(), n.ReadyTime())
	for _, cmd := range []string{"systemd-analyze", "systemd-analyze blame | head -25", "systemd-analyze critical-chain", "dmesg | grep -E 'Run /init|Freeing unused|systemd\\[1\\]' | head", "cat /proc/cmdline", "ls -la /boot /initrd* 2>/dev/null | head", "dmesg | tail -5"} {
		out, _ := n.Run(t.Context(), cmd+" 2>&1")
		t.Logf("$ %s\n%s", cmd, out)
	}
}
