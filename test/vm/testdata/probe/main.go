// Command probe is a static Go binary put into the guest's initramfs by
// the tests, standing in for node-resized: it shows that CGO_ENABLED=0
// binaries run in the guest and see its CPUs.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	fmt.Printf("probe: go=%s numcpu=%d online=%s", runtime.Version(), runtime.NumCPU(), online)
}
