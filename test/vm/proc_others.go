//go:build !linux

package vm

import (
	"os"
	"syscall"
)

// sysProcAttr: QEMU guests for hotplug tests run on Linux hosts; elsewhere
// the process is only started in its own group where possible.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}
