// Package daemon tests the real node-resized process: it builds the
// binaries, starts the daemon, and drives real CPU hotplug on this machine.
package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/internal/cpu1test"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/internal/daemontest"
	"github.com/node-resized/node-resized/uevent"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "node-resized-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		if err := daemontest.Build(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

type daemon struct {
	*daemontest.Daemon
	t *testing.T
}

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := daemontest.Start(t, filepath.Join(binDir, "node-resized"), append([]string{"--standalone"}, args...)...)
	return &daemon{Daemon: d, t: t}
}

func (d *daemon) socket() string { return d.Socket }

func (d *daemon) stop(t *testing.T) error { return d.Stop(t) }

func TestSIGTERMDrainsAndExitsZero(t *testing.T) {
	d := startDaemon(t, "--uevents=false")
	// A follower is connected while the daemon stops: it must not hold
	// the shutdown up.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followErr := make(chan error, 1)
	go func() { followErr <- d.Client.Follow(ctx, api.Cursor{}, func(api.Event) error { return nil }) }()
	time.Sleep(100 * time.Millisecond)
	if err := d.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0\n%s", err, d.Stderr.String())
	}
	if _, err := os.Lstat(d.socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after exit: %v", err)
	}
	select {
	case err := <-followErr:
		if err == nil {
			t.Error("follower saw no error when the daemon stopped")
		}
	case <-time.After(5 * time.Second):
		t.Error("follower still blocked after the daemon exited")
	}
}

func TestBadInputGivesOneLineAndNonZeroExit(t *testing.T) {
	tmp := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"--standalone", "--no-such-flag"}, 2, "flag provided but not defined"},
		{"bad duration", []string{"--standalone", "--coalesce-quiet", "soon"}, 2, "coalesce-quiet"},
		{"no cluster without standalone", []string{"--kubeconfig", filepath.Join(tmp, "none.conf"), "--socket", filepath.Join(tmp, "c.sock")}, 1, "--standalone"},
		{"missing sysfs", []string{"--standalone", "--socket", filepath.Join(tmp, "a.sock"), "--sysfs-root", filepath.Join(tmp, "nowhere")}, 1, "nowhere"},
		{"sysfs not a sysfs", []string{"--standalone", "--socket", filepath.Join(tmp, "b.sock"), "--sysfs-root", tmp}, 1, tmp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, "node-resized"), tc.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("exit = %v, want status %d; stderr:\n%s", err, tc.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			// The flag package prints the usage after its own error line;
			// the error itself must be the first line, and one line.
			if !strings.Contains(lines[0], tc.want) {
				t.Errorf("first line %q does not mention %q", lines[0], tc.want)
			}
			if tc.code == 1 && len(lines) != 1 {
				t.Errorf("want one error line, got %d:\n%s", len(lines), stderr.String())
			}
		})
	}
}

func TestCLIExplainsMissingDaemon(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	cmd := exec.Command(filepath.Join(binDir, "node-resizectl"), "--socket", socket, "status")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want 1", err)
	}
	for _, want := range []string{socket, "systemctl start node-resized"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q does not mention %q", out, want)
		}
	}
}

func TestCLIAgainstDaemon(t *testing.T) {
	d := startDaemon(t, "--uevents=false")
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "node-resizectl"), append([]string{"--socket", d.socket()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("node-resizectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	if out := ctl("status"); !strings.Contains(out, "online "+strings.TrimSpace(string(online))) || !strings.Contains(out, "Physical capacity:") {
		t.Errorf("status table lacks the online set %s:\n%s", online, out)
	}
	if out := ctl("-o", "json", "status"); !strings.Contains(out, `"physical"`) {
		t.Errorf("status -o json lacks physical:\n%s", out)
	}
	if out := ctl("topology"); !strings.Contains(out, "NUMA NODE") {
		t.Errorf("topology table:\n%s", out)
	}
	if out := ctl("events"); !strings.Contains(out, "initial model") {
		t.Errorf("events table lacks the startup model:\n%s", out)
	}
	if out := ctl("resync"); !strings.Contains(out, "Resynced") {
		t.Errorf("resync:\n%s", out)
	}
	if out := ctl("version"); strings.Count(out, "node-resize") != 2 {
		t.Errorf("version should name both binaries:\n%s", out)
	}
}

// TestRealCPUHotplug takes cpu1 offline and back with the real kernel and
// checks that the daemon's socket follows, measuring the detection latency.
func TestRealCPUHotplug(t *testing.T) {
	cpu1test.Need(t)
	cycles := hotplugCycles(t)

	d := startDaemon(t, "--listen-address", "127.0.0.1:0")
	st, err := d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	initial := st.Physical["cpu"] / 1000
	if !st.CPUs.Online.Contains(1) {
		t.Fatalf("cpu1 not online at start: %s", st.CPUs.Online)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan monitor.Change, 1024)
	go func() {
		_ = d.Client.Follow(ctx, api.Cursor{Epoch: st.Epoch, ID: st.LastChange.ID}, func(ev api.Event) error {
			changes <- ev.Change
			return nil
		})
	}()
	await := func(wantCPU int64, wantKind string) monitor.Change {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case c := <-changes:
				if c.Capacity["cpu"] == wantCPU*1000 && hasKind(c, wantKind) {
					return c
				}
				t.Logf("skipping change #%d: %s", c.ID, c.Changes)
			case <-timeout:
				t.Fatalf("no change to %d CPUs (%s) within 10s", wantCPU, wantKind)
			}
		}
	}

	var offLat, onLat []time.Duration
	for i := range cycles {
		if err := daemontest.SetCPU1(false); err != nil {
			t.Fatalf("cycle %d: offline cpu1: %v", i, err)
		}
		c := await(initial-1, "cpu_offline")
		if c.Events < 1 || c.Seqnums.Count < 1 {
			t.Errorf("cycle %d: offline change has no uevent (%d events, seqnums %s)", i, c.Events, c.Seqnums.String())
		}
		offLat = append(offLat, c.Latency())
		if i == 0 {
			st, err := d.Client.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if q := st.Physical["cpu"] / 1000; q != initial-1 || st.CPUs.Online.Contains(1) {
				t.Errorf("status after offline: cpu %d online %s; want %d without cpu1", q, st.CPUs.Online, initial-1)
			}
		}
		if err := daemontest.SetCPU1(true); err != nil {
			t.Fatalf("cycle %d: online cpu1: %v", i, err)
		}
		c = await(initial, "cpu_online")
		onLat = append(onLat, c.Latency())
	}
	st, err = d.Client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if q := st.Physical["cpu"] / 1000; q != initial || !st.CPUs.Online.Contains(1) {
		t.Errorf("status at the end: cpu %d online %s; want %d with cpu1", q, st.CPUs.Online, initial)
	}
	all := append(append([]time.Duration(nil), offLat...), onLat...)
	t.Logf("detection latency over %d offline/online cycles (uevent arrival to updated model):", cycles)
	t.Logf("  offline: %s", summary(offLat))
	t.Logf("  online:  %s", summary(onLat))
	t.Logf("  all:     %s", summary(all))
	// Each loss is decided on and handed to the kubepods enforcer; its
	// "kubepods clamped" line says how long after the uevent. (On a
	// cgroup v1 or hybrid host the enforcer writes nothing: this is the
	// path up to the write.)
	var clamps []time.Duration
	for _, r := range d.Stderr.Records("kubepods clamped") {
		if ns, ok := r["latency"].(float64); ok {
			clamps = append(clamps, time.Duration(ns))
		}
	}
	if len(clamps) > 0 {
		t.Logf("  offline → kubepods clamp: %s", summary(clamps))
	}
	if out := os.Getenv("NODE_RESIZED_LATENCY_OUT"); out != "" {
		var b strings.Builder
		for _, l := range all {
			fmt.Fprintf(&b, "%d\n", l.Microseconds())
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if err := d.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if !strings.Contains(d.Stderr.String(), `"msg":"machine changed"`) {
		t.Error("the daemon logged no change")
	}
	assertLogFields(t, d.Stderr.String())
}

// TestRealCPUHotplugFloor is the floor under TestRealCPUHotplug's
// latencies: the same cycles of cpu1, with no daemon, seen by a bare
// listener in this process that reads only what any model of the CPU must
// read (cpu/online, and on an online cpu1's topology ids) on the goroutine
// that received the message. Run the two one after the other to compare.
func TestRealCPUHotplugFloor(t *testing.T) {
	cpu1test.Need(t)
	cycles := hotplugCycles(t)
	f := listenFloor(t)
	for i := range cycles {
		if err := daemontest.SetCPU1(false); err != nil {
			t.Fatalf("cycle %d: offline cpu1: %v", i, err)
		}
		f.await(t)
		if err := daemontest.SetCPU1(true); err != nil {
			t.Fatalf("cycle %d: online cpu1: %v", i, err)
		}
		f.await(t)
	}
	off, on := f.stop()
	if len(off) != cycles || len(on) != cycles {
		t.Errorf("%d offline and %d online events seen for cpu1, want %d of each", len(off), len(on), cycles)
	}
	all := append(slices.Clone(off), on...)
	t.Logf("bare listener over %d offline/online cycles (uevent arrival to cpu/online and cpu1's ids read):", cycles)
	t.Logf("  offline: %s", summary(off))
	t.Logf("  online:  %s", summary(on))
	t.Logf("  all:     %s", summary(all))
}

// hotplugCycles is NODE_RESIZED_HOTPLUG_CYCLES, 20 by default.
func hotplugCycles(t *testing.T) int {
	t.Helper()
	cycles := 20
	if v := os.Getenv("NODE_RESIZED_HOTPLUG_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NODE_RESIZED_HOTPLUG_CYCLES=%q: want a positive number", v)
		}
		cycles = n
	}
	return cycles
}

// floorListener receives the kernel's uevents as the daemon does and, for
// cpu1's, reads only what any model of an online or offline CPU must read,
// timing it from the message's arrival.
type floorListener struct {
	l       *uevent.Listener
	done    chan struct{}
	seen    chan struct{} // one for each of cpu1's events measured
	off, on []time.Duration
}

// await waits for the listener to have measured one more event.
func (f *floorListener) await(t *testing.T) {
	t.Helper()
	select {
	case <-f.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the bare listener saw no event of cpu1 within 10s")
	}
}

func listenFloor(t *testing.T) *floorListener {
	t.Helper()
	l, err := uevent.Listen(uevent.Options{Subsystems: []string{"cpu"}})
	if err != nil {
		t.Fatalf("listen for uevents: %v", err)
	}
	f := &floorListener{l: l, done: make(chan struct{}), seen: make(chan struct{}, 1024)}
	read := func(path string) {
		if _, err := os.ReadFile(path); err != nil {
			t.Errorf("floor listener: %v", err)
		}
	}
	go func() {
		defer close(f.done)
		for {
			ev, err := l.Receive()
			if errors.Is(err, uevent.ErrLost) {
				continue
			}
			if err != nil {
				return // closed
			}
			if ev.DevPath != "/devices/system/cpu/cpu1" {
				continue
			}
			switch ev.Action {
			case uevent.ActionOffline:
				read("/sys/devices/system/cpu/online")
				f.off = append(f.off, time.Since(ev.Received))
				f.seen <- struct{}{}
			case uevent.ActionOnline:
				read("/sys/devices/system/cpu/online")
				read("/sys/devices/system/cpu/cpu1/topology/core_id")
				read("/sys/devices/system/cpu/cpu1/topology/physical_package_id")
				f.on = append(f.on, time.Since(ev.Received))
				f.seen <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() { f.stop() })
	return f
}

// stop closes the listener and returns what it measured.
func (f *floorListener) stop() (off, on []time.Duration) {
	_ = f.l.Close()
	<-f.done
	return f.off, f.on
}

func hasKind(c monitor.Change, kind string) bool {
	for _, ch := range c.Changes {
		if ch.Kind == kind {
			return true
		}
	}
	return false
}

// summary gives the distribution of ls: its quantiles are nearest-rank
// (the smallest value with at least that share of ls at or below it).
func summary(ls []time.Duration) string {
	s := slices.Clone(ls)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, i)].Round(time.Microsecond)
	}
	return fmt.Sprintf("n=%d min=%s p50=%s p90=%s p99=%s max=%s", len(s), s[0].Round(time.Microsecond),
		q(0.5), q(0.9), q(0.99), s[len(s)-1].Round(time.Microsecond))
}

// assertLogFields checks that change lines carry structured fields.
func assertLogFields(t *testing.T, log string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"msg":"machine changed"`) {
			for _, f := range []string{`"change_id":`, `"seqnums":`, `"latency":`, `"cpus_online":`} {
				if !strings.Contains(line, f) {
					t.Errorf("change log line lacks %s: %s", f, line)
				}
			}
			return
		}
	}
}
