// Command hotplugtool is the vmscenario tests' hand on package hotplug in
// the guest: it writes the kernel's hotplug files through a
// hotplug.Writer, as the daemon does. It is served to the guest from a
// read-only share, not from its RAM: package hotplug brings the daemon's
// metrics with it, and the guest's memory is counted (see oomInKubepods).
//
//	hotplugtool write TIMEOUT OP ID...
//	    OP is online-cpu, offline-cpu, online-block (movable),
//	    online-block-default or offline-block; one write per ID, in order,
//	    each bounded by TIMEOUT (a Go duration). Prints one JSON line per
//	    write (see result); exits 1 if any failed.
//	hotplugtool pin NODE READYFILE
//	    take one page of anonymous memory on NUMA node NODE and hold it in
//	    a pipe (vmsplice), so that the kernel cannot migrate it and its
//	    memory block cannot go offline; write "pid P pfn N" to READYFILE
//	    and sleep until killed
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/node-resized/node-resized/hotplug"
)

func main() {
	var err error
	switch {
	case len(os.Args) >= 5 && os.Args[1] == "write":
		err = write(os.Args[2], os.Args[3], os.Args[4:])
	case len(os.Args) == 4 && os.Args[1] == "pin":
		err = pin(os.Args[2], os.Args[3])
	default:
		fmt.Fprintln(os.Stderr, "usage: hotplugtool write TIMEOUT OP ID... | hotplugtool pin NODE READYFILE")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hotplugtool:", err)
		os.Exit(1)
	}
}

// result is one write, as the tests read it.
type result struct {
	ID      int     `json:"id"`
	Op      string  `json:"op"`
	Seconds float64 `json:"seconds"`
	Err     string  `json:"err,omitempty"`
	Errno   string  `json:"errno,omitempty"` // the write's errno: EBUSY, EINTR, ...
	Timeout bool    `json:"timeout,omitempty"`
	Running bool    `json:"running,omitempty"`
	Held    bool    `json:"held,omitempty"`
	NoFile  bool    `json:"noOnlineFile,omitempty"`
}

func write(timeoutArg, op string, ids []string) error {
	timeout, err := time.ParseDuration(timeoutArg)
	if err != nil {
		return err
	}
	w := hotplug.NewWriter("/sys", hotplug.Config{BlockTimeout: timeout, CPUTimeout: timeout})
	do := map[string]func(ctx context.Context, id int) error{
		"online-cpu":           w.OnlineCPU,
		"offline-cpu":          w.OfflineCPU,
		"online-block":         func(ctx context.Context, id int) error { return w.OnlineBlock(ctx, id, true) },
		"online-block-default": func(ctx context.Context, id int) error { return w.OnlineBlock(ctx, id, false) },
		"offline-block":        w.OfflineBlock,
	}[op]
	if do == nil {
		return fmt.Errorf("unknown op %q", op)
	}
	failed := 0
	enc := json.NewEncoder(os.Stdout)
	for _, a := range ids {
		id, err := strconv.Atoi(a)
		if err != nil {
			return err
		}
		start := time.Now()
		err = do(context.Background(), id)
		r := result{ID: id, Op: op, Seconds: time.Since(start).Seconds()}
		if err != nil {
			failed++
			r.Err = err.Error()
			var errno unix.Errno
			if errors.As(err, &errno) {
				r.Errno = unix.ErrnoName(errno)
			}
			var werr *hotplug.WriteError
			if errors.As(err, &werr) {
				r.Timeout, r.Running = werr.TimedOut(), werr.Running
			}
			r.Held, r.NoFile = errors.Is(err, hotplug.ErrHeld), errors.Is(err, hotplug.ErrNotHotpluggable)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d writes failed", failed, len(ids))
	}
	return nil
}

const mpolBind = 2 // MPOL_BIND, include/uapi/linux/mempolicy.h

func pin(nodeArg, ready string) error {
	node, err := strconv.Atoi(nodeArg)
	if err != nil || node < 0 || node > 63 {
		return fmt.Errorf("pin: bad node %q", nodeArg)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("pin: mmap: %w", err)
	}
	mask := uint64(1) << node
	if _, _, e := unix.Syscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(&mem[0])), uintptr(page), mpolBind,
		uintptr(unsafe.Pointer(&mask)), 64, 0); e != 0 {
		return fmt.Errorf("pin: mbind to node %d: %w", node, e)
	}
	mem[0] = 1 // fault it in, on the node
	pfn, err := pfnOf(uintptr(unsafe.Pointer(&mem[0])), page)
	if err != nil {
		return err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	// The pipe takes a reference on the page: until it is read or
	// closed, migration fails and offline_pages() retries for ever.
	iov := []unix.Iovec{{Base: &mem[0]}}
	iov[0].SetLen(page)
	if _, err := unix.Vmsplice(p[1], iov, 0); err != nil {
		return fmt.Errorf("pin: vmsplice: %w", err)
	}
	if err := os.WriteFile(ready, fmt.Appendf(nil, "pid %d pfn %d\n", os.Getpid(), pfn), 0o644); err != nil {
		return err
	}
	for {
		time.Sleep(time.Hour)
		mem[0]++
	}
}

// pfnOf reads the page frame number of the page at addr from
// /proc/self/pagemap (root sees the PFNs).
func pfnOf(addr uintptr, page int) (uint64, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], int64(addr/uintptr(page))*8); err != nil {
		return 0, fmt.Errorf("pin: pagemap: %w", err)
	}
	e := binary.LittleEndian.Uint64(b[:])
	if e&(1<<63) == 0 {
		return 0, errors.New("pin: the page is not present")
	}
	return e & (1<<55 - 1), nil
}
