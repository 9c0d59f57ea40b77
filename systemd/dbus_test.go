package systemd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// These tests run go-systemd's client over a real bus: a dbus-daemon
// started by the test, on which the test exports a small stand-in for
// systemd's org.freedesktop.systemd1 (the Manager's RestartUnit, GetUnit and
// LoadUnit, the JobRemoved signal, and a unit's properties through
// org.freedesktop.DBus.Properties).

const (
	// testUnit is the unit the stand-in serves.
	testUnit = "kubelet.service"

	sdName    = "org.freedesktop.systemd1"
	sdPath    = godbus.ObjectPath("/org/freedesktop/systemd1")
	sdManager = "org.freedesktop.systemd1.Manager"
)

// bus is a dbus-daemon of the test's own, listening on a socket in a
// temporary directory.
type bus struct {
	addr    string
	cmd     *exec.Cmd
	stopped sync.Once
}

// startBus starts dbus-daemon with the session configuration on a socket
// at path and returns once it prints its address.
func startBus(t *testing.T, path string) *bus {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	cmd := exec.Command(daemon, "--session", "--nofork", "--print-address", "--address=unix:path="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon: %v", err)
	}
	b := &bus{cmd: cmd}
	t.Cleanup(b.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the bus address: %v", err)
	}
	b.addr = strings.TrimSpace(line)
	return b
}

// stop kills the daemon; safe to call twice.
func (b *bus) stop() {
	b.stopped.Do(func() {
		b.cmd.Process.Kill()
		b.cmd.Wait()
	})
}

// fakeSystemd is the stand-in for systemd: one service unit.
type fakeSystemd struct {
	conn  *godbus.Conn
	unit  string
	props *prop.Properties

	mu       sync.Mutex // guards the fields below
	deny     string     // non-empty: the D-Bus error RestartUnit refuses with
	result   string     // the JobRemoved result; "" sends none
	restarts []string   // the mode of each RestartUnit call
	starts   []string   // the mode of each StartUnit call
	jobs     []string   // each job: "restart", "stop" or "start"
	called   chan struct{}
}

// exportSystemd connects to the bus at addr, takes systemd's name and
// exports the manager and a unit in the given ActiveState whose restart
// job ends with result.
func exportSystemd(t *testing.T, addr, unit, active, result string) *fakeSystemd {
	t.Helper()
	conn, err := godbus.Connect(addr)
	if err != nil {
		t.Fatalf("stand-in: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fakeSystemd{conn: conn, unit: unit, result: result, called: make(chan struct{}, 8)}
	if err := conn.Export(f, sdPath, sdManager); err != nil {
		t.Fatal(err)
	}
	started := uint64(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro())
	f.props, err = prop.Export(conn, f.unitPath(), prop.Map{
		"org.freedesktop.systemd1.Unit": {
			"Id":                   {Value: unit},
			"LoadState":            {Value: "loaded"},
			"ActiveState":          {Value: active},
			"SubState":             {Value: map[bool]string{true: "running", false: "dead"}[active == "active"]},
			"ActiveEnterTimestamp": {Value: started + 1000},
			"DropInPaths":          {Value: []string{"/usr/lib/systemd/system/" + unit + ".d/10-test.conf"}},
		},
		"org.freedesktop.systemd1.Service": {
			"MainPID":                {Value: uint32(100)},
			"ExecMainStartTimestamp": {Value: started},
			"NRestarts":              {Value: uint32(0)},
			"TimeoutStopUSec":        {Value: uint64(90_000_000)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prop.Export(conn, sdPath, prop.Map{sdManager: {"SystemState": {Value: "running"}}}); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(sdName, godbus.NameFlagDoNotQueue)
	if err != nil || reply != godbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("stand-in: request %s: %v %v", sdName, reply, err)
	}
	return f
}

func (f *fakeSystemd) unitPath() godbus.ObjectPath {
	return godbus.ObjectPath("/org/freedesktop/systemd1/unit/" + sddbus.PathBusEscape(f.unit))
}

// RestartUnit queues a job and, when a result is set, announces its end
// with JobRemoved as systemd does; a successful restart starts a new main
// process.
func (f *fakeSystemd) RestartUnit(name, mode string) (godbus.ObjectPath, *godbus.Error) {
	if name != f.unit {
		return "", godbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not found."})
	}
	f.mu.Lock()
	f.restarts = append(f.restarts, mode)
	deny := f.deny
	f.mu.Unlock()
	if deny != "" {
		return "", godbus.NewError(deny, []any{"Interactive authentication required."})
	}
	return f.queue(name, "restart")
}

// StopUnit stops the unit: when the job is done it is inactive, with no
// main process.
func (f *fakeSystemd) StopUnit(name, mode string) (godbus.ObjectPath, *godbus.Error) {
	if name != f.unit {
		return "", godbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	return f.queue(name, "stop")
}

// StartUnit starts the unit: when the job is done it is active with a
// new main process.
func (f *fakeSystemd) StartUnit(name, mode string) (godbus.ObjectPath, *godbus.Error) {
	if name != f.unit {
		return "", godbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not found."})
	}
	f.mu.Lock()
	f.starts = append(f.starts, mode)
	f.mu.Unlock()
	return f.queue(name, "start")
}

// queue records a job and, when a result is set, announces its end with
// JobRemoved as systemd does, after changing the unit's state as the job
// would.
func (f *fakeSystemd) queue(name, kind string) (godbus.ObjectPath, *godbus.Error) {
	f.mu.Lock()
	f.jobs = append(f.jobs, kind)
	id := uint32(len(f.jobs))
	result := f.result
	f.mu.Unlock()
	job := godbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	if result == "done" {
		switch kind {
		case "stop":
			f.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "inactive")
			f.props.SetMust("org.freedesktop.systemd1.Unit", "SubState", "dead")
			f.props.SetMust("org.freedesktop.systemd1.Service", "MainPID", uint32(0))
		default:
			f.props.SetMust("org.freedesktop.systemd1.Unit", "ActiveState", "active")
			f.props.SetMust("org.freedesktop.systemd1.Unit", "SubState", "running")
			f.props.SetMust("org.freedesktop.systemd1.Service", "MainPID", uint32(200))
			f.props.SetMust("org.freedesktop.systemd1.Service", "ExecMainStartTimestamp", uint64(time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC).UnixMicro()))
		}
	}
	f.called <- struct{}{}
	if result != "" {
		go f.conn.Emit(sdPath, sdManager+".JobRemoved", id, job, name, result)
	}
	return job, nil
}

func (f *fakeSystemd) jobKinds() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.jobs...)
}

// GetUnit and LoadUnit return the unit's object path, as systemd does.
func (f *fakeSystemd) GetUnit(name string) (godbus.ObjectPath, *godbus.Error) {
	if name != f.unit {
		return "", godbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	return f.unitPath(), nil
}

func (f *fakeSystemd) LoadUnit(name string) (godbus.ObjectPath, *godbus.Error) {
	return f.GetUnit(name)
}

func (f *fakeSystemd) modes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.restarts...)
}

// newTestClient returns a client of addr that checks its connection
// every 20ms while waiting for a job.
func newTestClient(t *testing.T, addr string) *Client {
	s := NewClientAt(addr)
	s.poll = 20 * time.Millisecond
	t.Cleanup(func() { s.Close() })
	return s
}

func TestRestartDone(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	f := exportSystemd(t, b.addr, testUnit, "active", "done")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	before, err := s.UnitState(ctx, testUnit)
	if err != nil {
		t.Fatal(err)
	}
	want := UnitState{Unit: testUnit, LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: 100, TimeoutStop: 90 * time.Second,
		DropInPaths: []string{"/usr/lib/systemd/system/" + testUnit + ".d/10-test.conf"},
		MainStart:   time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		ActiveEnter: time.Date(2026, 1, 2, 3, 4, 5, 1000000, time.UTC)}
	if !before.MainStart.Equal(want.MainStart) || !before.ActiveEnter.Equal(want.ActiveEnter) {
		t.Errorf("times %v %v, want %v %v", before.MainStart, before.ActiveEnter, want.MainStart, want.ActiveEnter)
	}
	before.MainStart, before.ActiveEnter, want.MainStart, want.ActiveEnter = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(before, want) {
		t.Errorf("state %+v, want %+v", before, want)
	}

	res, err := s.Restart(ctx, testUnit)
	if err != nil || res != JobDone {
		t.Fatalf("Restart = %q, %v; want done", res, err)
	}
	if m := f.modes(); len(m) != 1 || m[0] != "replace" {
		t.Errorf("RestartUnit modes %q, want one \"replace\"", m)
	}
	after, err := s.UnitState(ctx, testUnit)
	if err != nil {
		t.Fatal(err)
	}
	if after.MainPID != 200 || !after.Started().After(before.Started()) {
		t.Errorf("after the restart: pid %d started %v; want pid 200, later than %v", after.MainPID, after.Started(), before.Started())
	}
}

func TestRestartFailed(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	exportSystemd(t, b.addr, testUnit, "active", "failed")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Restart(ctx, testUnit)
	if err != nil || res != JobFailed {
		t.Fatalf("Restart = %q, %v; want failed", res, err)
	}
}

func TestRestartRefusedWhenInactive(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	for _, state := range []string{"failed", "inactive", "activating"} {
		t.Run(state, func(t *testing.T) {
			f := exportSystemd(t, b.addr, "kubelet-"+state+".service", state, "done")
			s := newTestClient(t, b.addr)
			res, err := s.Restart(context.Background(), f.unit)
			if !errors.Is(err, ErrUnitNotActive) || res != "" {
				t.Fatalf("Restart = %q, %v; want ErrUnitNotActive", res, err)
			}
			if m := f.modes(); len(m) != 0 {
				t.Errorf("RestartUnit called %d times", len(m))
			}
			f.conn.Close() // release systemd's name for the next case
		})
	}
}

// TestRestartNotAuthorized: systemd's refusal (as it answers a caller
// that is not root) is an ErrNotAuthorized that says what to do, and keeps
// systemd's own words; the bus stays usable.
func TestRestartNotAuthorized(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	for _, name := range []string{errInteractiveAuthorization, errAccessDenied} {
		f := exportSystemd(t, b.addr, testUnit, "active", "done")
		f.mu.Lock()
		f.deny = name
		f.mu.Unlock()
		s := newTestClient(t, b.addr)
		_, err := s.Restart(context.Background(), testUnit)
		if !errors.Is(err, ErrNotAuthorized) || !strings.Contains(err.Error(), "Interactive authentication required") ||
			!strings.Contains(err.Error(), "run node-resized as root") || errors.Is(err, ErrBusGone) {
			t.Fatalf("%s: %v; want ErrNotAuthorized with systemd's message", name, err)
		}
		if _, err := s.UnitState(context.Background(), testUnit); err != nil {
			t.Fatalf("%s: the bus after the refusal: %v", name, err)
		}
		f.conn.Close()
	}
	// Any other error is not a refusal.
	f := exportSystemd(t, b.addr, testUnit, "active", "done")
	f.mu.Lock()
	f.deny = "org.freedesktop.systemd1.NoSuchUnit"
	f.mu.Unlock()
	if _, err := newTestClient(t, b.addr).Restart(context.Background(), testUnit); err == nil || errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("NoSuchUnit: %v; want an error that is not ErrNotAuthorized", err)
	}
}

func TestRestartUnknownUnit(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	exportSystemd(t, b.addr, testUnit, "active", "done")
	s := newTestClient(t, b.addr)
	if _, err := s.UnitState(context.Background(), "nope.service"); err == nil || !strings.Contains(err.Error(), "nope.service") {
		t.Fatalf("UnitState of an unknown unit: %v", err)
	}
}

func TestRestartBusGone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	b := startBus(t, sock)
	f := exportSystemd(t, b.addr, testUnit, "active", "") // the job never ends
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The bus goes away while the client waits for the job's result: the
	// stand-in has replied with the job's path by then (a reply takes
	// microseconds), and sends no JobRemoved.
	go func() {
		<-f.called
		time.Sleep(200 * time.Millisecond)
		b.stop()
	}()
	start := time.Now()
	res, err := s.Restart(ctx, testUnit)
	if !errors.Is(err, ErrBusGone) || res != "" {
		t.Fatalf("Restart = %q, %v; want ErrBusGone", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Restart noticed the lost bus after %v", d)
	}
	// No bus at all: an error, not a hang.
	if _, err := s.UnitState(ctx, testUnit); err == nil {
		t.Fatal("UnitState without a bus succeeded")
	}
	// The bus is back (systemd re-registers): the client dials again.
	b2 := startBus(t, sock)
	exportSystemd(t, b2.addr, testUnit, "active", "done")
	if st, err := s.UnitState(ctx, testUnit); err != nil || st.MainPID != 100 {
		t.Fatalf("UnitState after the bus came back: %+v, %v", st, err)
	}
}

func TestRestartContextEnds(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	exportSystemd(t, b.addr, testUnit, "active", "")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Restart(ctx, testUnit); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Restart with a job that never ends: %v, want DeadlineExceeded", err)
	}
}

// TestStopStart: Stop and Start queue their jobs over the bus and return
// the jobs' results; the unit's state follows.
func TestStopStart(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	f := exportSystemd(t, b.addr, testUnit, "active", "done")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := s.Stop(ctx, testUnit); err != nil || res != JobDone {
		t.Fatalf("Stop = %q, %v; want done", res, err)
	}
	if st, err := s.UnitState(ctx, testUnit); err != nil || st.Active() || st.MainPID != 0 {
		t.Fatalf("after Stop: %+v, %v", st, err)
	}
	// A stopped unit is not stopped again.
	if _, err := s.Stop(ctx, testUnit); !errors.Is(err, ErrUnitNotActive) {
		t.Fatalf("Stop of a stopped unit: %v, want ErrUnitNotActive", err)
	}
	if res, err := s.Start(ctx, testUnit); err != nil || res != JobDone {
		t.Fatalf("Start = %q, %v; want done", res, err)
	}
	if st, err := s.UnitState(ctx, testUnit); err != nil || !st.Active() || st.MainPID != 200 {
		t.Fatalf("after Start: %+v, %v", st, err)
	}
	if got := f.jobKinds(); !slices.Equal(got, []string{"stop", "start"}) {
		t.Errorf("jobs %v, want stop, start", got)
	}
}

func TestStartFailed(t *testing.T) {
	b := startBus(t, filepath.Join(t.TempDir(), "bus"))
	exportSystemd(t, b.addr, testUnit, "failed", "failed")
	s := newTestClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := s.Start(ctx, testUnit); err != nil || res != JobFailed {
		t.Fatalf("Start = %q, %v; want failed", res, err)
	}
}
