// Package daemontest builds the node-resized binaries and runs the real
// daemon process for end-to-end tests.
package daemontest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/internal/cpu1test"
)

// Build compiles node-resized and node-resizectl (static, CGO off) into dir.
func Build(dir string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, name := range []string{"node-resized", "node-resizectl"} {
		cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", name, err, out)
		}
	}
	return nil
}

// Log is a goroutine-safe buffer for the daemon's stderr.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Records returns the JSON log lines whose msg is msg.
func (l *Log) Records(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Daemon is a running node-resized process.
type Daemon struct {
	Socket string
	Client *api.Client
	Stderr *Log
	cmd    *exec.Cmd
	done   chan error
	exited error
	once   sync.Once
}

// Start runs bin with args plus --socket and JSON logs, and waits until it
// answers on its socket. The process is killed when the test ends; its log
// is printed if the test failed.
func Start(t testing.TB, bin string, args ...string) *Daemon {
	t.Helper()
	return start(t, nil, bin, args)
}

// StartNoFile is Start with the daemon's open-files limit (RLIMIT_NOFILE,
// soft and hard) set to nofile, by prlimit(1) from util-linux.
func StartNoFile(t testing.TB, nofile uint64, bin string, args ...string) *Daemon {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) sets the daemon's open-files limit: %v", err)
	}
	return start(t, []string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}, bin, args)
}

func start(t testing.TB, prefix []string, bin string, args []string) *Daemon {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "run", "node-resized.sock")
	// Defaults first, so that args override them (the last flag wins).
	args = append([]string{"--socket", socket, "--log-format", "json", "--log-level", "debug",
		"--state-file", filepath.Join(t.TempDir(), "state.json")}, args...)
	d := &Daemon{Socket: socket, Stderr: new(Log), done: make(chan error, 1)}
	argv := append(append(prefix, bin), args...)
	d.cmd = exec.Command(argv[0], argv[1:]...) // prlimit execs the daemon: the same process
	d.cmd.Stderr = d.Stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.Kill()
		if t.Failed() || os.Getenv("NODE_RESIZED_TEST_DAEMON_LOG") != "" {
			t.Logf("daemon log (%s):\n%s", strings.Join(args, " "), d.Stderr.String())
		}
	})
	d.Client = api.NewClient(socket)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.Client.Status(ctx)
		cancel()
		if err == nil {
			return d
		}
		select {
		case err := <-d.done:
			d.exited = err
			t.Fatalf("daemon exited during start-up: %v\n%s", err, d.Stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not answer on %s within 30s: %v\n%s", socket, err, d.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM and returns the exit error (nil for status 0).
func (d *Daemon) Stop(t testing.TB) error {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-d.done:
		d.once.Do(func() {})
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("daemon did not exit within 15s of SIGTERM")
		return nil
	}
}

// Terminate is Stop for many daemons at once, from any goroutine: it
// sends SIGTERM and waits up to timeout for the exit, returning the exit
// error, or an error when the process did not exit in time.
func (d *Daemon) Terminate(timeout time.Duration) error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-d.done:
		d.once.Do(func() {})
		return err
	case <-time.After(timeout):
		return fmt.Errorf("daemon did not exit within %v of SIGTERM", timeout)
	}
}

// Signal sends sig to the process.
func (d *Daemon) Signal(sig os.Signal) error { return d.cmd.Process.Signal(sig) }

// Pid is the process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// OpenFiles counts the descriptors the process has open.
func (d *Daemon) OpenFiles() (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Pid()))
	if err != nil {
		return 0, fmt.Errorf("count the daemon's descriptors: %w", err)
	}
	return len(fds), nil
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (d *Daemon) RSS() (uint64, error) {
	path := fmt.Sprintf("/proc/%d/status", d.Pid())
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q: %w", path, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no VmRSS", path)
}

// Kill ends the process if it still runs.
func (d *Daemon) Kill() {
	d.once.Do(func() {
		_ = d.cmd.Process.Kill()
		<-d.done
	})
}

// Done receives the exit error when the process exits on its own.
func (d *Daemon) Done() <-chan error { return d.done }

// CPU1Online is the file that takes cpu1 offline and back.
const CPU1Online = cpu1test.Online

// SetCPU1 takes cpu1 offline or brings it back through the kernel. A test
// that calls it holds cpu1test.Lock (cpu1test.Need takes it).
func SetCPU1(online bool) error { return cpu1test.Set(online) }
