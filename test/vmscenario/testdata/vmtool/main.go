// Command vmtool is a static helper put into the guest's initramfs by the
// vmscenario tests, for what busybox cannot do:
//
//	vmtool hog CGROUP BYTES READYFILE
//	    map and write anonymous memory, 256 KiB at a time, until the memory
//	    cgroup directory CGROUP (the process's own) has memory.current of
//	    at least BYTES; then write READYFILE and sleep until killed
//	vmtool get SOCKET PATH
//	    GET PATH from an HTTP server on a unix socket and print the body
//	    (the daemon's /metrics)
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 5 && os.Args[1] == "hog":
		err = hog(os.Args[2], os.Args[3], os.Args[4])
	case len(os.Args) == 4 && os.Args[1] == "get":
		err = get(os.Args[2], os.Args[3])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmtool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vmtool hog CGROUP BYTES READYFILE | vmtool get SOCKET PATH")
	os.Exit(2)
}

// hog grows its cgroup's memory.current to at least target bytes with
// touched anonymous memory, so that all of it is resident and charged.
func hog(cgroup, arg, ready string) error {
	target, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || target <= 0 {
		return fmt.Errorf("hog: bad size %q", arg)
	}
	const chunk = 256 << 10
	page := os.Getpagesize()
	var held [][]byte
	for {
		cur, err := readInt(filepath.Join(cgroup, "memory.current"))
		if err != nil {
			return fmt.Errorf("hog: %w", err)
		}
		if cur >= target {
			msg := fmt.Sprintf("pid %d holds %d KiB; %s/memory.current %d\n", os.Getpid(), len(held)*chunk>>10, cgroup, cur)
			if err := os.WriteFile(ready, []byte(msg), 0o644); err != nil {
				return err
			}
			break
		}
		mem, err := syscall.Mmap(-1, 0, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return fmt.Errorf("hog: mmap after %d KiB: %w", len(held)*chunk>>10, err)
		}
		for i := 0; i < chunk; i += page {
			mem[i] = 1
		}
		held = append(held, mem)
	}
	for {
		time.Sleep(time.Hour)
		held[0][0]++
	}
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// get prints the body of an HTTP GET over a unix socket. It speaks
// HTTP/1.0 by hand: net/http would triple the binary, and every byte of it
// stays in the guest's RAM.
func get(socket, path string) error {
	conn, err := net.DialTimeout("unix", socket, 30*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
		return err
	}
	resp, err := io.ReadAll(conn)
	if err != nil {
		return err
	}
	head, body, ok := strings.Cut(string(resp), "\r\n\r\n")
	if !ok {
		return fmt.Errorf("GET %s: no end of headers in %q", path, resp)
	}
	if status, _, _ := strings.Cut(head, "\r\n"); !strings.Contains(status, " 200 ") {
		return fmt.Errorf("GET %s: %s: %s", path, status, body)
	}
	_, err = io.WriteString(os.Stdout, body)
	return err
}
