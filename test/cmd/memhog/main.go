// Command memhog allocates memory and touches every page of it, step by
// step, then holds it: the workload of the node test bed's memory
// scenarios on the real container runtime (it is in the busybox image that
// test/node/build-runtime makes). It maps anonymous memory with mmap, so
// what it holds is exactly what it was asked for, whatever Go's heap does,
// and prints a line after each step so that a test can follow it in the
// container's log. It is a test tool, not part of the product.
//
//	memhog -mib 600 -step 16 -interval 50ms
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	total := flag.Int("mib", 256, "MiB to allocate and touch in all")
	step := flag.Int("step", 16, "MiB per step")
	interval := flag.Duration("interval", 50*time.Millisecond, "pause between steps")
	flag.Parse()
	if *total <= 0 || *step <= 0 {
		fmt.Fprintln(os.Stderr, "memhog: -mib and -step must be positive")
		os.Exit(2)
	}
	page := os.Getpagesize()
	var held [][]byte
	for done := 0; done < *total; {
		n := min(*step, *total-done)
		b, err := syscall.Mmap(-1, 0, n<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			fmt.Fprintf(os.Stderr, "memhog: mmap %d MiB after %d MiB: %v\n", n, done, err)
			os.Exit(1)
		}
		for i := 0; i < len(b); i += page {
			b[i] = 1
		}
		held = append(held, b)
		done += n
		fmt.Printf("memhog: %d MiB touched\n", done)
		time.Sleep(*interval)
	}
	fmt.Printf("memhog: holding %d MiB\n", *total)
	for {
		time.Sleep(time.Hour)
		_ = held
	}
}
