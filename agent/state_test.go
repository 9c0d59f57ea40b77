package agent

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
)

// TestRemoveState: the state file and the temporary files of a cut-short
// save go, files moved aside and other files stay, and a second removal
// finds nothing.
func TestRemoveState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := SaveState(path, decide.State{Version: decide.StateVersion, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.json.tmp-123", "state.json.corrupt-20260101T000000", "other.json", "other.json.tmp-1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveState(path)
	if err != nil || !removed {
		t.Fatalf("RemoveState = %v, %v; want true, nil", removed, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"other.json", "other.json.tmp-1", "state.json.corrupt-20260101T000000"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if st, err := LoadState(path, time.Now()); st != nil || err != nil {
		t.Errorf("LoadState after the removal = %+v, %v; want no state", st, err)
	}
	if removed, err := RemoveState(path); err != nil || removed {
		t.Errorf("second RemoveState = %v, %v; want false, nil", removed, err)
	}
	if removed, err := RemoveState(filepath.Join(dir, "absent", "state.json")); err != nil || removed {
		t.Errorf("RemoveState in a missing directory = %v, %v; want false, nil", removed, err)
	}
}

// TestLoadStateRefuses: a state file that is not what the daemon wrote is
// refused promptly (a FIFO does not block the open), moved aside, and the
// error says why; a good file loads.
func TestLoadStateRefuses(t *testing.T) {
	now := time.Now()
	good := decide.State{Version: decide.StateVersion, Generation: 3, Applied: resources.List{"cpu": 2000}, ChangedAt: now.Add(-time.Hour)}
	encode := func(st decide.State) []byte {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	file := func(b []byte, mode os.FileMode) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, mode); err != nil { // past the umask
				t.Fatal(err)
			}
		}
	}
	with := func(change func(*decide.State)) []byte {
		st := good
		st.Applied = good.Applied.Clone()
		change(&st)
		return encode(st)
	}
	for _, tc := range []struct {
		name     string
		make     func(t *testing.T, path string)
		want     string // in the error; "" for the good state
		notAside bool   // the refused file stays where it is
	}{
		{name: "good", make: file(encode(good), 0o600)},
		{name: "good, world-readable", make: file(encode(good), 0o644)},
		{name: "FIFO", make: func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "is not a regular file (a FIFO)"},
		{name: "directory", make: func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, want: "is not a regular file (a directory)"},
		{name: "socket", make: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}, want: "is not a regular file (a socket)"},
		{name: "symlink to a good file", make: func(t *testing.T, path string) {
			target := path + ".target"
			file(encode(good), 0o600)(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, want: "is not a regular file (a symbolic link)"},
		{name: "oversize", make: file(append(encode(good), bytes.Repeat([]byte(" "), maxStateSize)...), 0o600), want: "is larger than 1048576 bytes"},
		{name: "world-writable", make: file(encode(good), 0o666), want: "is writable by group or others (mode 0666)"},
		{name: "group-writable", make: file(encode(good), 0o620), want: "is writable by group or others (mode 0620)"},
		{name: "owned by another user", make: func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			file(encode(good), 0o600)(t, path)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, want: "is owned by uid 65534"},
		{name: "torn", make: file([]byte("{torn"), 0o600), want: "does not decode"},
		{name: "version 0", make: file(with(func(s *decide.State) { s.Version = 0 }), 0o600), want: "out of range: version 0"},
		{name: "negative generation", make: file(with(func(s *decide.State) { s.Generation = -5 }), 0o600), want: "generation -5 is negative"},
		{name: "restart in 2099", make: file(with(func(s *decide.State) {
			s.RestartAt, s.RestartPending = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), true
		}), 0o600), want: "restartAt 2099-01-01T00:00:00Z is in the future"},
		{name: "evicting towards nothing", make: file(with(func(s *decide.State) { s.Evicting, s.Applied = true, nil }), 0o600), want: "evicting with no applied capacity"},
		{name: "evicting towards zero cpu", make: file([]byte(`{"version":1,"generation":2,"evicting":true,"applied":{"cpu":"0","memory":"1Gi"}}`), 0o600), want: "applied cpu 0"},
		{name: "negative memory", make: file([]byte(`{"version":1,"generation":2,"applied":{"cpu":"2","memory":"-1Gi"}}`), 0o600), want: "applied memory is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			tc.make(t, path)
			type result struct {
				st  *decide.State
				err error
			}
			done := make(chan result, 1)
			go func() {
				st, err := LoadState(path, now)
				done <- result{st, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("LoadState did not return within 5s") // a FIFO opened blocking
			}
			if tc.want == "" {
				if r.err != nil || r.st == nil || r.st.Generation != good.Generation {
					t.Fatalf("LoadState = %+v, %v; want the good state", r.st, r.err)
				}
				return
			}
			if r.st != nil || r.err == nil || !strings.Contains(r.err.Error(), tc.want) || !strings.Contains(r.err.Error(), path) {
				t.Fatalf("LoadState = %+v, %v; want no state and an error naming %s with %q", r.st, r.err, path, tc.want)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if _, err := os.Lstat(path); err == nil || len(aside) != 1 {
				t.Fatalf("the refused file is not moved aside: still at the path: %v; aside: %v", err == nil, aside)
			}
			if !strings.Contains(r.err.Error(), "moved to "+aside[0]) {
				t.Errorf("error %q does not say where the file went", r.err)
			}
			// Nothing is read again: the next start has no state.
			if st, err := LoadState(path, now); st != nil || err != nil {
				t.Errorf("second LoadState = %+v, %v; want no state", st, err)
			}
		})
	}
}

// TestLoadStateCannotMoveAside: a refused file that cannot be moved aside
// (its directory is read-only) stays, and the error says to remove it.
func TestLoadStateCannotMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root renames in a read-only directory; a directory at the
		// target name makes the rename fail instead.
		if err := os.Mkdir(path+".corrupt-"+time.Unix(0, 0).UTC().Format("20060102T150405"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path+".corrupt-19700101T000000", "x"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	} else {
		os.Chmod(dir, 0o500)
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
	}
	st, err := LoadState(path, time.Unix(0, 0))
	if st != nil || err == nil || !strings.Contains(err.Error(), "could not be moved aside") || !strings.Contains(err.Error(), "remove it; node-resized starts fresh") {
		t.Fatalf("LoadState = %+v, %v; want an error that says to remove the file", st, err)
	}
}

// TestRemoveStaleTemps: at start the temporary files of SaveState's own
// pattern go; anything else beside the state file stays.
func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := SaveState(path, decide.State{Version: decide.StateVersion, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.json.tmp-123", "state.json.tmp-4294967295", "state.json.tmp-", "state.json.tmp-x1", "other.json.tmp-1", "state.json.corrupt-20260101T000000"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "state.json.tmp-7"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path, filepath.Join(dir, "state.json.tmp-8")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "state.json.tmp-9")
		if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveStaleTemps(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "state.json.tmp-123"), filepath.Join(dir, "state.json.tmp-4294967295")}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	wantLeft := []string{"other.json.tmp-1", "state.json", "state.json.corrupt-20260101T000000", "state.json.tmp-", "state.json.tmp-7", "state.json.tmp-8", "state.json.tmp-x1"}
	if os.Geteuid() == 0 {
		wantLeft = append(wantLeft, "state.json.tmp-9")
		slices.Sort(wantLeft)
	}
	if !slices.Equal(left, wantLeft) {
		t.Errorf("left %v, want %v", left, wantLeft)
	}
	if removed, err := RemoveStaleTemps(filepath.Join(dir, "absent", "state.json")); removed != nil || err != nil {
		t.Errorf("RemoveStaleTemps in a missing directory = %v, %v", removed, err)
	}
}

// TestSaveStateRemovesItsTemp: a save that fails after its temporary file
// was created (the rename onto a non-empty directory) leaves no temporary
// file.
func TestSaveStateRemovesItsTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(path, decide.State{Version: decide.StateVersion}); err == nil || !strings.Contains(err.Error(), "rename") {
		t.Fatalf("SaveState onto a directory = %v, want a rename error", err)
	}
	if left, _ := filepath.Glob(path + ".tmp-*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestAgentStartsFromARefusedStateFile: the agent starts on a FIFO at the
// state path, fresh, with stale temporary files gone.
func TestAgentStartsFromARefusedStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp-42", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Agent, 1)
	go func() { done <- New(Config{StatePath: path}, nil) }()
	select {
	case a := <-done:
		if st := a.State(); st.Generation != 0 || st.Version != 0 {
			t.Errorf("state from a FIFO: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("New did not return within 5s with a FIFO at the state path")
	}
	if _, err := os.Lstat(path + ".tmp-42"); err == nil {
		t.Error("the stale temporary file is still there")
	}
}
