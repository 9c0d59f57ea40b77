package vm_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/node-resized/node-resized/test/vm"
)

// A guest with a static binary of the caller's, one CPU hot-added to NUMA
// node 1 and brought online.
func Example() {
	k, err := vm.FindKernel("") // unpacked by test/vm/fetch
	if err != nil {
		log.Fatal(err)
	}
	initrd, err := vm.BuildInitramfs(vm.InitramfsConfig{
		Kernel: k,
		Files:  []vm.File{{Path: "/bin/node-resized", Source: "/tmp/node-resized"}}, // CGO_ENABLED=0
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	guest, err := vm.Boot(ctx, vm.Config{Kernel: k.Image, Initramfs: initrd})
	if err != nil {
		log.Fatal(err)
	}
	defer guest.Close()

	if _, err := guest.HotAddCPU(ctx, 1); err != nil {
		log.Fatal(err)
	}
	out, code, err := guest.Exec(ctx, `
		until [ -e /sys/devices/system/cpu/cpu1 ]; do sleep 0.1; done
		echo 1 >/sys/devices/system/cpu/cpu1/online
		cat /sys/devices/system/cpu/online`)
	fmt.Println(out, code, err)
}
