package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/internal/fault"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

// PrestartDropIn is the file name of the kubelet unit's drop-in that runs
// `node-resized kubelet-prestart` as an ExecStartPre (with systemd's "-":
// its failure never fails the kubelet's start). The packages install it in
// /usr/lib/systemd/system/kubelet.service.d, make install in
// /etc/systemd/system/kubelet.service.d.
const PrestartDropIn = "90-node-resized.conf"

// HasPrestart reports whether the unit st has the pre-start drop-in
// loaded: then every start of the kubelet, whoever asks for it, rewrites
// its checkpoints first. systemd lists a masked drop-in among the
// DropInPaths too (a link to /dev/null or an empty file of the same name
// in /etc, as docs/operating.md says to turn it off), so the file listed
// must be a regular file that is not empty; one that cannot be read counts
// as none, and the restart then takes the way that needs no pre-start.
func HasPrestart(st systemd.UnitState) bool {
	return slices.ContainsFunc(st.DropInPaths, func(p string) bool {
		if filepath.Base(p) != PrestartDropIn {
			return false
		}
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
	})
}

// Checkpoints are the kubelet's CPU and memory manager checkpoints and
// what its configuration says that their planner needs. Both the
// Restarter and the pre-start plan with it. It is a plain value.
type Checkpoints struct {
	// CPUManager and MemoryManager are the checkpoints' paths (the
	// defaults when empty); a missing one needs no rewrite.
	CPUManager, MemoryManager string
	// ReservedCPUs and StrictReservation are the kubelet's
	// reservedSystemCPUs and its strict-cpu-reservation option;
	// ReservedMemory its reservedMemory (nil: as the checkpoint has it).
	ReservedCPUs      topology.CPUSet
	StrictReservation bool
	ReservedMemory    map[int]map[string]uint64
}

// NewCheckpoints returns the checkpoints under the kubelet's root
// directory rootDir, planned with its configuration cfg.
func NewCheckpoints(rootDir string, cfg *kubelet.Config) (Checkpoints, error) {
	c := Checkpoints{
		CPUManager:    filepath.Join(rootDir, "cpu_manager_state"),
		MemoryManager: filepath.Join(rootDir, "memory_manager_state"),
		ReservedCPUs:  topology.CPUSet(cfg.ReservedCPUs),
	}
	if cfg.Raw != nil {
		c.StrictReservation = cfg.Raw.CPUManagerPolicyOptions["strict-cpu-reservation"] == "true"
		if len(cfg.Raw.ReservedMemory) > 0 {
			m, err := cfg.ReservedMemory()
			if err != nil {
				return Checkpoints{}, err
			}
			c.ReservedMemory = m
		}
	}
	return c, nil
}

// checkpointPlans are the rewrites of both checkpoints for one machine;
// nil where a checkpoint is missing.
type checkpointPlans struct {
	cpu *checkpoint.CPUManagerPlan
	mem *checkpoint.MemoryManagerPlan
}

func (p checkpointPlans) changed() bool {
	return (p.cpu != nil && p.cpu.Changed) || (p.mem != nil && p.mem.Changed)
}

// dropped are the pods whose assignments the plans leave out.
func (p checkpointPlans) dropped() []string {
	var out []string
	if p.cpu != nil {
		out = append(out, p.cpu.Dropped...)
	}
	if p.mem != nil {
		for _, uid := range p.mem.Dropped {
			if !slices.Contains(out, uid) {
				out = append(out, uid)
			}
		}
	}
	return out
}

// plan plans both checkpoints for snap; it only reads.
func (c Checkpoints) plan(snap *topology.Snapshot) (checkpointPlans, error) {
	var p checkpointPlans
	var err error
	p.cpu, err = checkpoint.PlanCPUManager(c.CPUManager, checkpoint.CPUTarget{
		Online: snap.CPUs.Online, Reserved: c.ReservedCPUs, StrictReservation: c.StrictReservation})
	if errors.Is(err, fs.ErrNotExist) {
		p.cpu, err = nil, nil
	}
	if err != nil {
		return checkpointPlans{}, err
	}
	p.mem, err = checkpoint.PlanMemoryManager(c.MemoryManager, snap.Nodes, c.ReservedMemory)
	if errors.Is(err, fs.ErrNotExist) {
		p.mem, err = nil, nil
	}
	if err != nil {
		return checkpointPlans{}, err
	}
	return p, nil
}

// PrestartOutcome is what one run of the pre-start did.
type PrestartOutcome string

// The outcomes of Prestart.Run. Only PrestartRewritten changed a file.
const (
	PrestartRewritten PrestartOutcome = "rewritten" // a checkpoint was rewritten for the machine
	PrestartUnchanged PrestartOutcome = "unchanged" // the checkpoints fit the machine (or are missing)
	PrestartHeld      PrestartOutcome = "held"      // held after a rollback: nothing rewritten
	PrestartFailed    PrestartOutcome = "failed"    // nothing rewritten (or the rewrite undone)
	PrestartTimedOut  PrestartOutcome = "timeout"   // gave up at its deadline
)

// DefaultPrestartTimeout is the pre-start's own deadline: far below any
// kubelet's start timeout (systemd's default is 90s), far above the few
// milliseconds it takes.
const DefaultPrestartTimeout = 5 * time.Second

// Prestart makes the kubelet's checkpoints acceptable to it just before it
// starts (`node-resized kubelet-prestart`, an ExecStartPre of its unit): it
// plans both from the files as they are and the machine as it is, with
// the planner the Restarter uses, keeping every assignment that still
// fits, and writes what changed. It is idempotent. It never keeps a
// kubelet from starting that would have started without it: on any
// failure (configuration, sysfs, a checkpoint no plan can make safe, a
// write, a panic, its deadline) it logs why and leaves the files as they
// were, undoing the CPU manager checkpoint's rewrite when the memory
// manager one's then fails. Its fields are set before Run; Run is called
// once.
type Prestart struct {
	// Checkpoints reads the kubelet's configuration and returns its
	// checkpoints; Machine reads the machine.
	Checkpoints func() (Checkpoints, error)
	Machine     func() (*topology.Snapshot, error)
	// HoldFile is the pre-start hold (in the state directory,
	// HoldFile); empty: none.
	HoldFile string
	// Timeout is its deadline (DefaultPrestartTimeout when 0).
	Timeout time.Duration
	Log     *slog.Logger

	mu sync.Mutex // guards the fields below, shared with the worker
	// step is how far the worker got; cpuPlan is its applied CPU
	// manager rewrite, to undo while step is stepCPUWritten.
	step      prestartStep
	cpuPlan   *checkpoint.CPUManagerPlan
	abandoned bool // Run gave up at the deadline: the worker writes no more

	betweenWrites func() // a test's seam: after the CPU manager checkpoint's write
}

type prestartStep int

const (
	stepPlanning   prestartStep = iota
	stepCPUWriting              // writing the CPU manager checkpoint
	stepCPUWritten              // it is written, the memory manager one not begun
	stepMemWriting              // writing the memory manager checkpoint
	stepDone
)

// errAbandoned ends the worker once Run has given up on it.
var errAbandoned = errors.New("abandoned at the pre-start's deadline")

// Run runs the pre-start and logs one record of what it did, with its
// duration; it returns the outcome. It returns by the deadline whatever
// the worker does.
func (p *Prestart) Run(ctx context.Context) PrestartOutcome {
	start := time.Now()
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPrestartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		outcome PrestartOutcome
		attrs   []any
		err     error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- result{outcome: PrestartFailed, err: fmt.Errorf("panic: %v", v)}
			}
		}()
		o, attrs, err := p.work(ctx)
		done <- result{o, attrs, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r = result{outcome: PrestartTimedOut, err: p.abandon(ctx.Err())}
	}
	if r.err != nil && r.outcome != PrestartTimedOut {
		r.err = errors.Join(r.err, p.undoIfHalf())
	}
	log := p.logger().With("outcome", string(r.outcome), "duration", time.Since(start))
	switch r.outcome {
	case PrestartRewritten:
		log.Info("kubelet pre-start: checkpoints rewritten for the machine as it is", r.attrs...)
	case PrestartUnchanged:
		log.Info("kubelet pre-start: the checkpoints fit the machine as it is", r.attrs...)
	case PrestartHeld:
		log.Warn("kubelet pre-start: held after a rollback, the checkpoints are left as they are", r.attrs...)
	default:
		log.Warn("kubelet pre-start failed: the checkpoints are as they were, the kubelet starts as it would without node-resized",
			append(r.attrs, "err", r.err)...)
	}
	return r.outcome
}

func (p *Prestart) logger() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

// abandon stops the worker from writing more and, when it is between the
// two writes, undoes the first; it says what is left.
func (p *Prestart) abandon(cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandoned = true
	err := fmt.Errorf("gave up: %w", cause)
	switch p.step {
	case stepCPUWriting:
		return fmt.Errorf("%w while writing the CPU manager checkpoint (the old file or the new one is in place, whole)", err)
	case stepCPUWritten:
		if uerr := p.cpuPlan.Undo(); uerr != nil {
			return fmt.Errorf("%w; the CPU manager checkpoint, rewritten, could not be put back: %w", err, uerr)
		}
		return fmt.Errorf("%w; the CPU manager checkpoint's rewrite was undone", err)
	case stepMemWriting:
		if p.cpuPlan != nil {
			return fmt.Errorf("%w while writing the memory manager checkpoint (the CPU manager one is rewritten)", err)
		}
		return fmt.Errorf("%w while writing the memory manager checkpoint (the old file or the new one is in place, whole)", err)
	}
	return err
}

// undoIfHalf undoes the CPU manager checkpoint's rewrite when the worker
// failed after it.
func (p *Prestart) undoIfHalf() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cpuPlan == nil || (p.step != stepCPUWritten && p.step != stepMemWriting) {
		return nil
	}
	if err := p.cpuPlan.Undo(); err != nil {
		return fmt.Errorf("the CPU manager checkpoint, rewritten, could not be put back: %w", err)
	}
	return nil
}

// advance moves the worker to step, unless Run gave up on it.
func (p *Prestart) advance(step prestartStep) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandoned {
		return errAbandoned
	}
	p.step = step
	return nil
}

// work is the pre-start proper: the hold, the plans, the writes.
func (p *Prestart) work(ctx context.Context) (PrestartOutcome, []any, error) {
	if p.HoldFile != "" {
		held, err := checkHold(p.HoldFile)
		if held != nil {
			return PrestartHeld, []any{"hold", p.HoldFile, "since", held.At, "reason", held.Reason}, nil
		}
		if err != nil {
			p.logger().Warn("kubelet pre-start: the hold after a rollback no longer applies; removed it", "hold", p.HoldFile, "why", err)
		}
	}
	cp, err := p.Checkpoints()
	if err != nil {
		return PrestartFailed, nil, fmt.Errorf("the kubelet's configuration: %w", err)
	}
	snap, err := p.Machine()
	if err != nil {
		return PrestartFailed, nil, fmt.Errorf("read the machine: %w", err)
	}
	attrs := []any{"cpus", snap.CPUs.Online.String()}
	plans, err := cp.plan(snap)
	if err != nil {
		return PrestartFailed, attrs, err
	}
	corrupt := fault.Armed("checkpoint-corrupt")
	if !plans.changed() && !corrupt {
		return PrestartUnchanged, attrs, nil
	}
	if ctx.Err() != nil {
		return PrestartFailed, attrs, ctx.Err()
	}
	if d := plans.dropped(); len(d) > 0 {
		attrs = append(attrs, "dropped_pods", d)
	}
	if plans.cpu != nil && plans.cpu.Changed {
		if err := p.advance(stepCPUWriting); err != nil {
			return PrestartFailed, attrs, err
		}
		if err := plans.cpu.Apply(); err != nil {
			return PrestartFailed, attrs, err
		}
		p.mu.Lock()
		p.cpuPlan = plans.cpu
		p.mu.Unlock()
		if err := p.advance(stepCPUWritten); err != nil {
			return PrestartFailed, attrs, err
		}
		attrs = append(attrs, "cpu_manager", plans.cpu.Path)
		if p.betweenWrites != nil {
			p.betweenWrites()
		}
	}
	// A test build with the fault checkpoint-corrupt armed applies an
	// unchanged memory plan too, so that the fault acts here as in the
	// Restarter's rewrite.
	if plans.mem != nil && (plans.mem.Changed || corrupt) {
		if err := p.advance(stepMemWriting); err != nil {
			return PrestartFailed, attrs, err
		}
		if err := plans.mem.Apply(); err != nil {
			return PrestartFailed, attrs, err
		}
		attrs = append(attrs, "memory_manager", plans.mem.Path)
	}
	if err := p.advance(stepDone); err != nil {
		return PrestartFailed, attrs, err
	}
	return PrestartRewritten, append(attrs, "backup_suffix", checkpoint.BackupSuffix), nil
}

// prestartHold is the pre-start hold's JSON (the rollback writes it):
// the checkpoints it restored and the sha256 of each as restored.
type prestartHold struct {
	At     time.Time         `json:"at"`
	Reason string            `json:"reason"`
	Files  map[string]string `json:"files"`
}

// maxHoldSize caps the hold's read; maxHoldFiles the files it may name.
const (
	maxHoldSize  = 64 << 10
	maxHoldFiles = 16
)

// checkHold reads the hold at path. It returns the hold when it applies:
// every file it names is there with its sha256. A hold that does not
// apply (a file changed or missing, or the hold unreadable) is removed
// and the reason returned; no hold at all is nil, nil.
func checkHold(path string) (*prestartHold, error) {
	b, err := readRegular(path, maxHoldSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	why := err
	var h prestartHold
	if why == nil {
		why = json.Unmarshal(b, &h)
	}
	if why == nil {
		why = h.applies()
	}
	if why == nil {
		return &h, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		why = errors.Join(why, err)
	}
	return nil, why
}

// applies returns nil when every file the hold names has its sha256.
func (h *prestartHold) applies() error {
	if len(h.Files) == 0 || len(h.Files) > maxHoldFiles {
		return fmt.Errorf("the hold names %d files, want 1 to %d", len(h.Files), maxHoldFiles)
	}
	for path, sum := range h.Files {
		b, err := readRegular(path, 16<<20)
		if err != nil {
			return err
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			return fmt.Errorf("%s changed since the rollback", path)
		}
	}
	return nil
}

// readRegular reads the regular file at path, at most max bytes, without
// blocking on a FIFO or a device.
func readRegular(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("not a regular file (%v)", fi.Mode().Type())}
	}
	return capped.Read(f, max)
}
