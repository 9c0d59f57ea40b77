package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a child has after SIGTERM before its process group
// gets SIGKILL.
const stopGrace = 20 * time.Second

// process is one running control-plane child. It is safe for concurrent
// use: done is closed once the child has been waited for, and waitErr is
// written before that.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// startProcess starts bin with args in its own process group, appending its
// stdout and stderr to logPath. The child gets SIGTERM (to its whole group)
// when the parent context ends or Stop is called, SIGKILL stopGrace later,
// and SIGKILL at once if this process dies (parent-death signal).
func startProcess(parent context.Context, name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening %s log: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))

	ctx, cancel := context.WithCancel(parent)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		return killGroup(cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, cancel: cancel, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		// Anything the child left in its group goes with it.
		_ = killGroup(cmd.Process.Pid, syscall.SIGKILL)
		p.waitErr = err
		close(p.done)
	}()
	return p, nil
}

// Stop ends the child (SIGTERM to its group, SIGKILL after stopGrace) and
// waits for it. It is safe to call more than once.
func (p *process) Stop() {
	p.stop.Do(p.cancel)
	<-p.done
}

// exited reports whether the child has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// failure describes a child that ended or never became ready, with the tail
// of its log.
func (p *process) failure(what string, cause error) error {
	b, _ := os.ReadFile(p.logPath)
	return fmt.Errorf("cluster: %s %s: %w (log %s)\n--- last lines of %s ---\n%s",
		p.name, what, cause, p.logPath, p.logPath, tail(string(b), 40))
}

func killGroup(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return nil
	}
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
