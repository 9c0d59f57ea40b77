// Command pause is the pod sandbox's process for the node test bed's real
// container runtime (test/node with Config.Runtime "containerd"): what the
// upstream pause image runs, written here because no registry is
// reachable. As PID 1 of the pod's namespaces it waits, reaps every child
// that is handed to it, and exits 0 on SIGINT or SIGTERM. It is a test
// tool, not part of the product.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not PID 1")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
