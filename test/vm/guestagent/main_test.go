package main

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// agent runs serve over pipes and returns a request writer and a reply
// reader.
func agent(t *testing.T, run func(tok, cmd string) ([]byte, int)) (func(tok, cmd string), func() (string, string, int)) {
	t.Helper()
	reqR, reqW := io.Pipe()
	repR, repW := io.Pipe()
	done := make(chan struct{})
	go func() { serve(reqR, repW, run); close(done) }()
	t.Cleanup(func() {
		reqW.CloseWithError(io.ErrClosedPipe)
		repR.Close()
		<-done
	})
	br := bufio.NewReader(repR)
	if l, _ := br.ReadString('\n'); l != "@@READY\n" {
		t.Fatalf("first line %q, want @@READY", l)
	}
	send := func(tok, cmd string) {
		fmt.Fprintf(reqW, "%s %s\n", tok, base64.StdEncoding.EncodeToString([]byte(cmd)))
	}
	recv := func() (tok, out string, rc int) {
		var body strings.Builder
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read reply: %v", err)
			}
			l = strings.TrimSuffix(l, "\n")
			if strings.HasPrefix(l, "@@END ") {
				fmt.Sscanf(l, "@@END %s %d", &tok, &rc)
				b, err := base64.StdEncoding.DecodeString(body.String())
				if err != nil {
					t.Fatalf("reply of %s: %v", tok, err)
				}
				return tok, string(b), rc
			}
			if len(l) > 76 {
				t.Errorf("reply line of %d characters", len(l))
			}
			body.WriteString(l)
		}
	}
	return send, recv
}

func TestServeConcurrent(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	old := outDir
	outDir = t.TempDir()
	t.Cleanup(func() { outDir = old })
	send, recv := agent(t, runShell)

	// A command that blocks does not hold up the next one.
	send("slow", "sleep 1; echo slow")
	send("fast", "echo fast; exit 3")
	if tok, out, rc := recv(); tok != "fast" || out != "fast\n" || rc != 3 {
		t.Errorf("first reply %s %q %d, want fast \"fast\\n\" 3", tok, out, rc)
	}
	if tok, out, rc := recv(); tok != "slow" || out != "slow\n" || rc != 0 {
		t.Errorf("second reply %s %q %d, want slow", tok, out, rc)
	}

	// A process left running with the output open does not hold the
	// reply: it blocks opening a FIFO until the test opens the other end,
	// which the test does only once the reply came (or, failing that,
	// after a while, so that the test ends and says so).
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	release := sync.OnceFunc(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		close(released)
	})
	timer := time.AfterFunc(10*time.Second, release)
	defer timer.Stop()
	send("bg", "cat "+fifo+" & echo started")
	tok, out, _ := recv()
	select {
	case <-released:
		t.Errorf("the reply came only once the background process could end")
	default:
	}
	release()
	if tok != "bg" || out != "started\n" {
		t.Errorf("reply %s %q", tok, out)
	}

	// Long output, stderr with stdout, a signal.
	send("long", "seq 1 2000; echo err >&2")
	if _, out, _ := recv(); !strings.HasPrefix(out, "1\n2\n") || !strings.HasSuffix(out, "2000\nerr\n") {
		t.Errorf("long output: %d bytes, ends %q", len(out), out[max(0, len(out)-12):])
	}
	send("sig", "kill -9 $$")
	if _, _, rc := recv(); rc != 137 {
		t.Errorf("killed command: rc %d, want 137", rc)
	}
	entries, _ := os.ReadDir(outDir)
	if len(entries) != 0 {
		t.Errorf("output files left: %v", entries)
	}
}

func TestServeBadBase64(t *testing.T) {
	reqR, reqW := io.Pipe()
	repR, repW := io.Pipe()
	go serve(reqR, repW, func(string, string) ([]byte, int) { return nil, 0 })
	br := bufio.NewReader(repR)
	br.ReadString('\n')
	fmt.Fprintf(reqW, "tok %%%%\n")
	var lines []string
	for len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], "@@END") {
		l, _ := br.ReadString('\n')
		lines = append(lines, strings.TrimSpace(l))
	}
	if got := lines[len(lines)-1]; got != "@@END tok 255" {
		t.Errorf("end line %q, want @@END tok 255", got)
	}
	reqW.Close()
}

func TestPlainCat(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("A\n"), 0o644)
	os.WriteFile(b, []byte("B"), 0o644)
	for _, c := range []struct {
		cmd   string
		plain bool
	}{
		{"cat " + a, true},
		{"cat " + a + " " + b, true},
		{"cat /sys/fs/cgroup/kubepods.slice/memory.max", true},
		{"cat " + a + " | wc -l", false},
		{"cat $HOME/x", false},
		{"cat '" + a + "'", false},
		{"cat " + a + "; reboot", false},
		{"cat -A " + a, false},
		{"cat", false},
		{"catx " + a, false},
	} {
		if got := plainCat.MatchString(c.cmd); got != c.plain {
			t.Errorf("plainCat(%q) = %v, want %v", c.cmd, got, c.plain)
		}
	}
	out, rc := runShell("t", "cat "+a+" "+filepath.Join(dir, "missing")+" "+b)
	want := "A\ncat: " + filepath.Join(dir, "missing") + ": No such file or directory\nB"
	if string(out) != want || rc != 1 {
		t.Errorf("cat with a missing file: %q %d, want %q 1", out, rc, want)
	}
}

func TestUnixGet(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("a_metric 1\n"))
	})}
	go srv.Serve(l)
	defer srv.Close()
	for _, c := range []struct {
		cmd  string
		fast bool
	}{
		{"curl -sf --unix-socket " + sock + " http://localhost/metrics", true},
		{"curl -sf --unix-socket " + sock + " http://localhost/v1/status?x=1", true},
		{"curl -sf --unix-socket " + sock + " http://localhost/metrics | grep x", false},
		{"curl -sS --unix-socket " + sock + " http://localhost/metrics", false},
		{"curl -sf --unix-socket $S http://localhost/metrics", false},
		{"curl -sf http://localhost/metrics", false},
	} {
		if got := unixGet.MatchString(c.cmd); got != c.fast {
			t.Errorf("unixGet(%q) = %v, want %v", c.cmd, got, c.fast)
		}
	}
	for _, c := range []struct {
		sock, path string
		out        string
		rc         int
	}{
		{sock, "/metrics", "a_metric 1\n", 0},
		{sock, "/other", "", 22},
		{sock + ".missing", "/metrics", "", 7},
	} {
		out, rc := runShell("t", "curl -sf --unix-socket "+c.sock+" http://localhost"+c.path)
		if string(out) != c.out || rc != c.rc {
			t.Errorf("GET %s on %s: %q %d, want %q %d", c.path, c.sock, out, rc, c.out, c.rc)
		}
		if _, err := exec.LookPath("curl"); err == nil {
			// curl itself agrees on the exit code and the output.
			cmd := exec.Command("curl", "-sf", "--unix-socket", c.sock, "http://localhost"+c.path)
			cout, _ := cmd.Output()
			if cmd.ProcessState.ExitCode() != c.rc || string(cout) != c.out {
				t.Errorf("curl -sf for GET %s on %s: %q %d, the agent says %q %d", c.path, c.sock, cout, cmd.ProcessState.ExitCode(), out, rc)
			}
		}
	}
}
