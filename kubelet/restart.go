package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/node-resized/node-resized/topology"
)

// DefaultUnit is the kubelet's systemd unit on kubeadm and most
// distributions.
const DefaultUnit = "kubelet.service"

// JobResult is the result systemd reports for a job in its JobRemoved
// signal.
type JobResult string

// The results systemd reports (systemd's job_result_to_string).
const (
	JobDone       JobResult = "done"       // the unit was restarted
	JobCanceled   JobResult = "canceled"   // another job replaced this one
	JobTimeout    JobResult = "timeout"    // the unit's start timed out
	JobFailed     JobResult = "failed"     // the unit failed to start
	JobDependency JobResult = "dependency" // a required unit failed
	JobSkipped    JobResult = "skipped"    // a condition was not met
)

// ErrUnitNotActive is wrapped by the error Restart returns when the unit is
// not active: a kubelet that is stopped, failed or still starting is left
// alone.
var ErrUnitNotActive = errors.New("unit is not active")

// ErrBusGone is wrapped by the errors returned when the connection to the
// bus was lost; the next call dials again.
var ErrBusGone = errors.New("D-Bus connection lost")

// UnitState is what systemd knows of a service unit. It is a plain value.
type UnitState struct {
	Unit        string `json:"unit"`
	LoadState   string `json:"loadState"`   // "loaded", "not-found", …
	ActiveState string `json:"activeState"` // "active", "activating", "failed", …
	SubState    string `json:"subState"`    // "running", "auto-restart", …
	// MainPID is the service's main process, 0 when none runs.
	MainPID uint32 `json:"mainPID"`
	// NRestarts counts systemd's automatic restarts of the service (its
	// Restart= setting), not the restarts asked for over D-Bus.
	NRestarts uint32 `json:"nRestarts"`
	// ActiveEnter is when the unit last became active, MainStart when its
	// main process last started; zero when systemd reports none.
	ActiveEnter time.Time `json:"activeEnter,omitzero"`
	MainStart   time.Time `json:"mainStart,omitzero"`
}

// Active reports whether the unit is active (ActiveState "active").
func (u UnitState) Active() bool { return u.ActiveState == "active" }

// Started returns when the running kubelet started: its main process's
// start, or when that is unknown the time the unit became active.
func (u UnitState) Started() time.Time {
	if !u.MainStart.IsZero() {
		return u.MainStart
	}
	return u.ActiveEnter
}

// Systemd is a client of systemd's D-Bus API, narrowed to what the
// kubelet's restart needs. It connects on first use and dials again after
// the bus connection is lost. It is safe for concurrent use.
type Systemd struct {
	dial func() (*godbus.Conn, error)
	// poll is how often a wait for a job's result checks the connection.
	poll time.Duration

	mu   sync.Mutex // guards conn
	conn *sddbus.Conn
}

// NewSystemd returns a client of the system bus (DBUS_SYSTEM_BUS_ADDRESS,
// by default /var/run/dbus/system_bus_socket). Nothing is dialled yet.
func NewSystemd() *Systemd {
	return &Systemd{dial: authHello(func() (*godbus.Conn, error) { return godbus.SystemBusPrivate() }), poll: time.Second}
}

// NewSystemdAt returns a client of the bus at address, a D-Bus address
// such as "unix:path=/run/dbus/system_bus_socket".
func NewSystemdAt(address string) *Systemd {
	return &Systemd{dial: authHello(func() (*godbus.Conn, error) { return godbus.Dial(address) }), poll: time.Second}
}

// authHello authenticates as this process's uid (EXTERNAL, no user name
// lookup) and says Hello to the bus daemon, as go-systemd does.
func authHello(open func() (*godbus.Conn, error)) func() (*godbus.Conn, error) {
	return func() (*godbus.Conn, error) {
		c, err := open()
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
		return c, nil
	}
}

// connect returns the open connection, dialling when there is none or the
// last one was lost.
func (s *Systemd) connect() (*sddbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	c, err := sddbus.NewConnection(s.dial)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	s.conn = c
	return c, nil
}

// Close closes the connection, if any. The client dials again if used
// afterwards. Close is safe to call twice.
func (s *Systemd) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	return nil
}

// UnitState reads the unit's state: the Unit interface's ActiveState,
// SubState, LoadState and ActiveEnterTimestamp, and the Service interface's
// MainPID, ExecMainStartTimestamp and NRestarts.
func (s *Systemd) UnitState(ctx context.Context, unit string) (UnitState, error) {
	conn, err := s.connect()
	if err != nil {
		return UnitState{}, err
	}
	up, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return UnitState{}, s.callError(conn, "read the state of "+unit, err)
	}
	sp, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return UnitState{}, s.callError(conn, "read the service properties of "+unit, err)
	}
	st := UnitState{Unit: unit}
	st.LoadState, _ = up["LoadState"].(string)
	st.ActiveState, _ = up["ActiveState"].(string)
	st.SubState, _ = up["SubState"].(string)
	st.ActiveEnter = usecTime(up["ActiveEnterTimestamp"])
	st.MainPID, _ = sp["MainPID"].(uint32)
	st.NRestarts, _ = sp["NRestarts"].(uint32)
	st.MainStart = usecTime(sp["ExecMainStartTimestamp"])
	return st, nil
}

// usecTime converts systemd's timestamps, µs since the epoch with 0 for
// never.
func usecTime(v any) time.Time {
	us, ok := v.(uint64)
	if !ok || us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us))
}

// Restart restarts the unit (RestartUnit, mode "replace") and waits for
// the job's result, which it returns: JobDone when systemd started the
// unit again, another JobResult when the job ended otherwise. It refuses,
// with an error that wraps ErrUnitNotActive, when the unit is not active.
// An error is returned when the bus cannot be reached, when the connection
// is lost before the result arrives (wrapping ErrBusGone), or when ctx ends
// first; the restart may then still happen.
func (s *Systemd) Restart(ctx context.Context, unit string) (JobResult, error) {
	if err := s.requireActive(ctx, unit, "restart"); err != nil {
		return "", err
	}
	return s.job(ctx, unit, "restart", (*sddbus.Conn).RestartUnitContext)
}

// Stop stops the unit (StopUnit, mode "replace") and waits for the job's
// result, as Restart does; it too refuses a unit that is not active.
func (s *Systemd) Stop(ctx context.Context, unit string) (JobResult, error) {
	if err := s.requireActive(ctx, unit, "stop"); err != nil {
		return "", err
	}
	return s.job(ctx, unit, "stop", (*sddbus.Conn).StopUnitContext)
}

// Start starts the unit (StartUnit, mode "replace") and waits for the
// job's result, as Restart does. It starts a unit in any state.
func (s *Systemd) Start(ctx context.Context, unit string) (JobResult, error) {
	return s.job(ctx, unit, "start", (*sddbus.Conn).StartUnitContext)
}

// requireActive returns an error wrapping ErrUnitNotActive when the unit
// is not active.
func (s *Systemd) requireActive(ctx context.Context, unit, what string) error {
	st, err := s.UnitState(ctx, unit)
	if err != nil {
		return err
	}
	if !st.Active() {
		return fmt.Errorf("%s %s: %w (ActiveState %q, SubState %q)", what, unit, ErrUnitNotActive, st.ActiveState, st.SubState)
	}
	return nil
}

// job queues a job with call and waits for its result.
func (s *Systemd) job(ctx context.Context, unit, what string,
	call func(*sddbus.Conn, context.Context, string, string, chan<- string) (int, error)) (JobResult, error) {
	conn, err := s.connect()
	if err != nil {
		return "", err
	}
	done := make(chan string, 1)
	if _, err := call(conn, ctx, unit, "replace", done); err != nil {
		return "", s.callError(conn, what+" "+unit, err)
	}
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return JobResult(r), nil
		case <-ctx.Done():
			return "", fmt.Errorf("%s %s: waiting for the job's result: %w", what, unit, ctx.Err())
		case <-tick.C:
			if !conn.Connected() {
				return "", fmt.Errorf("%s %s: waiting for the job's result: %w", what, unit, ErrBusGone)
			}
		}
	}
}

// callError wraps a failed call, with ErrBusGone when the connection has
// been lost meanwhile.
func (s *Systemd) callError(conn *sddbus.Conn, what string, err error) error {
	if !conn.Connected() {
		return fmt.Errorf("%s: %w: %w", what, ErrBusGone, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// UnitControl is what Restarter needs of systemd; *Systemd satisfies it.
type UnitControl interface {
	UnitState(ctx context.Context, unit string) (UnitState, error)
	Restart(ctx context.Context, unit string) (JobResult, error)
	Stop(ctx context.Context, unit string) (JobResult, error)
	Start(ctx context.Context, unit string) (JobResult, error)
}

var _ UnitControl = (*Systemd)(nil)

// Restarter restarts the kubelet into a changed machine, with its CPU and
// memory manager checkpoints made safe first, so that the kubelet's static
// policies accept them when it starts. Its fields are set before first use
// and not changed afterwards; it is then safe for concurrent use.
type Restarter struct {
	// Unit is the kubelet's unit (DefaultUnit when empty) and Systemd the
	// client that restarts it.
	Unit    string
	Systemd UnitControl
	// CPUManagerCheckpoint and MemoryManagerCheckpoint are the
	// checkpoints' paths (the defaults when empty); a missing one needs no
	// rewrite.
	CPUManagerCheckpoint, MemoryManagerCheckpoint string
	// ReservedCPUs and StrictReservation are the kubelet's
	// reservedSystemCPUs and its strict-cpu-reservation option;
	// ReservedMemory its reservedMemory (nil: as the checkpoint has it).
	ReservedCPUs      topology.CPUSet
	StrictReservation bool
	ReservedMemory    map[int]map[string]uint64
}

// NewRestarter returns a restarter for the kubelet whose configuration is
// cfg and whose root directory is rootDir.
func NewRestarter(sd UnitControl, unit, rootDir string, cfg *Config) (*Restarter, error) {
	r := &Restarter{Unit: unit, Systemd: sd,
		CPUManagerCheckpoint:    filepath.Join(rootDir, "cpu_manager_state"),
		MemoryManagerCheckpoint: filepath.Join(rootDir, "memory_manager_state"),
		ReservedCPUs:            topology.CPUSet(cfg.ReservedCPUs),
	}
	if cfg.Raw != nil {
		r.StrictReservation = cfg.Raw.CPUManagerPolicyOptions["strict-cpu-reservation"] == "true"
		if len(cfg.Raw.ReservedMemory) > 0 {
			m, err := cfg.ReservedMemory()
			if err != nil {
				return nil, err
			}
			r.ReservedMemory = m
		}
	}
	return r, nil
}

func (r *Restarter) unit() string {
	if r.Unit == "" {
		return DefaultUnit
	}
	return r.Unit
}

// checkpointPlans are the rewrites of both checkpoints for one machine;
// nil where a checkpoint is missing.
type checkpointPlans struct {
	cpu *CPUManagerPlan
	mem *MemoryManagerPlan
}

func (p checkpointPlans) changed() bool {
	return (p.cpu != nil && p.cpu.Changed) || (p.mem != nil && p.mem.Changed)
}

// plan plans both checkpoints for snap.
func (r *Restarter) plan(snap *topology.Snapshot) (checkpointPlans, error) {
	var p checkpointPlans
	var err error
	p.cpu, err = PlanCPUManagerCheckpoint(r.CPUManagerCheckpoint, CPUTarget{
		Online: snap.CPUs.Online, Reserved: r.ReservedCPUs, StrictReservation: r.StrictReservation})
	if errors.Is(err, fs.ErrNotExist) {
		p.cpu, err = nil, nil
	}
	if err != nil {
		return checkpointPlans{}, err
	}
	p.mem, err = PlanMemoryManagerCheckpoint(r.MemoryManagerCheckpoint, snap.Nodes, r.ReservedMemory)
	if errors.Is(err, fs.ErrNotExist) {
		p.mem, err = nil, nil
	}
	if err != nil {
		return checkpointPlans{}, err
	}
	return p, nil
}

// Check reports whether the kubelet may be restarted into the machine
// snap: nil when both checkpoints can be made safe (or need nothing), an
// error otherwise; one that wraps ErrCheckpointInfeasible says what an
// operator must do first. It only reads.
func (r *Restarter) Check(snap *topology.Snapshot) error {
	_, err := r.plan(snap)
	return err
}

// Restart restarts the kubelet into the machine snap and waits for the
// result. When a checkpoint must be rewritten the order is stop, rewrite
// (planned again on the files the stopped kubelet left), start, so that
// no running kubelet writes the old state over the new one; otherwise one
// restart job. The unit must be active. When the rewrite fails after the
// stop, the kubelet is started anyway, as it was, and the error returned.
func (r *Restarter) Restart(ctx context.Context, snap *topology.Snapshot) (JobResult, error) {
	unit := r.unit()
	p, err := r.plan(snap)
	if err != nil {
		return "", fmt.Errorf("restart %s: %w", unit, err)
	}
	if !p.changed() {
		return r.Systemd.Restart(ctx, unit)
	}
	res, err := r.Systemd.Stop(ctx, unit)
	if err != nil {
		return "", err
	}
	if res != JobDone {
		return res, fmt.Errorf("stop %s before rewriting its checkpoints: job %s", unit, res)
	}
	if err := r.rewrite(snap); err != nil {
		res, serr := r.Systemd.Start(ctx, unit)
		return res, errors.Join(fmt.Errorf("restart %s: %w; started it with its checkpoints as they were", unit, err), serr)
	}
	return r.Systemd.Start(ctx, unit)
}

// rewrite plans both checkpoints again and applies the plans.
func (r *Restarter) rewrite(snap *topology.Snapshot) error {
	p, err := r.plan(snap)
	if err != nil {
		return err
	}
	if p.cpu != nil {
		if err := p.cpu.Apply(); err != nil {
			return err
		}
	}
	if p.mem != nil {
		if err := p.mem.Apply(); err != nil {
			return err
		}
	}
	return nil
}
