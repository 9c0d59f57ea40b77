package api

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenCreatesSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "nr.sock")
	ln, err := Listen(path, "")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != SocketMode {
		t.Errorf("socket mode %v, want a socket with %v", fi.Mode(), SocketMode)
	}
	if matches, _ := filepath.Glob(path + ".*"); len(matches) != 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the new socket: %v", err)
	}
	c.Close()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket not removed on close: %v", err)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nr.sock")
	// A crashed daemon leaves its socket file behind.
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	ln, err := Listen(path, "")
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()
}

func TestListenRefusesLiveSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nr.sock")
	first, err := Listen(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = Listen(path, "")
	if err == nil || !strings.Contains(err.Error(), "another node-resized is running") {
		t.Fatalf("second Listen = %v, want an in-use error", err)
	}
}

// TestServing: a served socket is serving; a stale socket file and no
// file are not.
func TestServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nr.sock")
	if Serving(path) {
		t.Error("serving without a socket file")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if !Serving(path) {
		t.Error("not serving while listening")
	}
	// A crashed daemon leaves its socket file behind.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket file is gone: %v", err)
	}
	if Serving(path) {
		t.Error("serving on a stale socket file")
	}
}

func TestListenRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nr.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(path, "")
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Error("the regular file was replaced")
	}
}

func TestListenUnknownGroup(t *testing.T) {
	_, err := Listen(filepath.Join(t.TempDir(), "nr.sock"), "no-such-group-node-resized")
	if err == nil || !strings.Contains(err.Error(), "socket group") {
		t.Fatalf("Listen with an unknown group = %v, want a group error", err)
	}
}

func TestClientSaysDaemonIsNotRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.sock")
	_, err := NewClient(path).Status(context.Background())
	var nr *NotRunningError
	if !errors.As(err, &nr) {
		t.Fatalf("Status without a daemon = %v, want a NotRunningError", err)
	}
	msg := err.Error()
	for _, want := range []string{path, "systemctl start node-resized", "--socket"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}
