package hotplug

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/node-resized/node-resized/metrics"
)

// The default bounds of one write. The kernel's memory-hotplug.rst says an
// offline may retry for a long time, or forever, until a signal aborts
// it; a movable block of a lightly used machine goes offline in well under
// a second (0.4-1.8 s under QEMU's TCG, test/vm/README.md).
const (
	DefaultBlockTimeout = 30 * time.Second
	DefaultCPUTimeout   = 30 * time.Second
	// DefaultGrace is how long a write past its time is interrupted
	// before it is given up on as still running in the kernel.
	DefaultGrace = 5 * time.Second
)

// Config says how a Writer bounds its writes.
type Config struct {
	// BlockTimeout bounds one write of a memory block's state; 0 means
	// DefaultBlockTimeout.
	BlockTimeout time.Duration
	// CPUTimeout bounds one write of a CPU's online file; 0 means
	// DefaultCPUTimeout.
	CPUTimeout time.Duration
	// Grace is how long a write past its time is interrupted before the
	// Writer gives up on it and returns; 0 means DefaultGrace.
	Grace time.Duration
	// Metrics counts and times the writes; nil: a registry of its own.
	Metrics *metrics.Metrics
}

// Writer writes the CPU and memory-block hotplug files under a sysfs root.
// Each write is one write(2), bounded in time; the Writer only reports
// what the write returned: the caller reads the state back from sysfs. It
// is safe for concurrent use (the kernel serialises hotplug operations).
type Writer struct {
	root                string
	blockTimeout, cpuTO time.Duration
	grace               time.Duration
	holds               Holds
	m                   *metrics.Metrics

	// test seams: how a file is opened, and who is told the thread id
	// of each write
	open    func(path string) (fd int, err error)
	started func(tid int)
}

// NewWriter returns a writer of the hotplug files under the sysfs root
// sysRoot (/sys on a node, a synthetic tree in tests).
func NewWriter(sysRoot string, c Config) *Writer {
	w := &Writer{root: sysRoot, blockTimeout: c.BlockTimeout, cpuTO: c.CPUTimeout, grace: c.Grace, open: openSysfs}
	if w.blockTimeout <= 0 {
		w.blockTimeout = DefaultBlockTimeout
	}
	if w.cpuTO <= 0 {
		w.cpuTO = DefaultCPUTimeout
	}
	if w.grace <= 0 {
		w.grace = DefaultGrace
	}
	w.m = c.Metrics
	if w.m == nil {
		w.m = metrics.New()
	}
	for _, kind := range []string{kindCPU, kindBlock} {
		for _, op := range []string{opOnline, opOffline} {
			for _, r := range metrics.HotplugResults {
				w.m.HotplugWrites.WithLabelValues(kind, op, r)
			}
		}
	}
	return w
}

// Holds returns the CPUs and memory blocks the Writer will not online,
// shared by everyone who writes through it.
func (w *Writer) Holds() *Holds { return &w.holds }

// The values the kernel takes.
const (
	cpuOnline     = "1"
	cpuOffline    = "0"
	blockOnline   = "online"
	blockMovable  = "online_movable"
	blockOffline  = "offline"
	kindCPU       = "cpu"
	kindBlock     = "memory_block"
	opOnline      = "online"
	opOffline     = "offline"
	cpuDir        = "devices/system/cpu"
	memoryDir     = "devices/system/memory"
	cpuFile       = "online"
	blockFile     = "state"
	blockPrefix   = "memory"
	cpuNamePrefix = "cpu"
)

// cpuPath is the online file of CPU id under sysRoot.
func cpuPath(sysRoot string, id int) string {
	return filepath.Join(sysRoot, cpuDir, cpuNamePrefix+strconv.Itoa(id), cpuFile)
}

// blockPath is the state file of memory block id under sysRoot.
func blockPath(sysRoot string, id int) string {
	return filepath.Join(sysRoot, memoryDir, blockPrefix+strconv.Itoa(id), blockFile)
}

// OnlineCPU writes 1 to CPU id's online file. A held CPU is refused with
// ErrHeld.
func (w *Writer) OnlineCPU(ctx context.Context, id int) error {
	return w.cpu(ctx, id, opOnline, cpuOnline)
}

// OfflineCPU writes 0 to CPU id's online file. A CPU without one (cpu0 on
// most x86 kernels) is refused with ErrNotHotpluggable.
func (w *Writer) OfflineCPU(ctx context.Context, id int) error {
	return w.cpu(ctx, id, opOffline, cpuOffline)
}

// OnlineBlock writes online_movable (movable) or online to memory block
// id's state; a held block is refused with ErrHeld. The kernel refuses online_movable (EINVAL) for a block that
// cannot go to ZONE_MOVABLE; online takes the block's default zone.
func (w *Writer) OnlineBlock(ctx context.Context, id int, movable bool) error {
	v := blockOnline
	if movable {
		v = blockMovable
	}
	return w.block(ctx, id, opOnline, v)
}

// OfflineBlock writes offline to memory block id's state. The kernel
// migrates the block's pages away first; it answers EBUSY when some cannot
// move, and may keep trying for as long as it is let: the write is cut
// after the Writer's BlockTimeout (or when ctx is done), and the kernel
// then gives up and leaves the block online.
func (w *Writer) OfflineBlock(ctx context.Context, id int) error {
	return w.block(ctx, id, opOffline, blockOffline)
}

func (w *Writer) cpu(ctx context.Context, id int, op, value string) error {
	start := time.Now()
	wrote, err := w.cpuWrite(ctx, id, op, value)
	w.count(kindCPU, op, err, wrote, time.Since(start))
	return err
}

func (w *Writer) block(ctx context.Context, id int, op, value string) error {
	start := time.Now()
	wrote, err := w.blockWrite(ctx, id, op, value)
	w.count(kindBlock, op, err, wrote, time.Since(start))
	return err
}

// count counts a write by its result, and times it if it was tried.
func (w *Writer) count(kind, op string, err error, wrote bool, took time.Duration) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrTimeout):
		result = "timeout"
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		result = "interrupted"
	case errors.Is(err, ErrHeld) || errors.Is(err, ErrNotHotpluggable) || errors.Is(err, fs.ErrInvalid):
		result = "refused"
	case errors.Is(err, fs.ErrNotExist):
		result = "gone"
	default:
		result = "error"
	}
	w.m.HotplugWrites.WithLabelValues(kind, op, result).Inc()
	if wrote {
		w.m.HotplugWriteDuration.WithLabelValues(kind, op).Observe(took.Seconds())
	}
}

// cpuWrite writes a CPU's online file; wrote says whether it tried.
func (w *Writer) cpuWrite(ctx context.Context, id int, op, value string) (bool, error) {
	path := cpuPath(w.root, id)
	if id < 0 {
		return false, &WriteError{Path: path, Value: value, Err: fmt.Errorf("cpu %d: %w", id, fs.ErrInvalid)}
	}
	// A CPU the kernel cannot take offline has no online file; it must
	// be refused, not written (and never created on a synthetic tree).
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Lstat(filepath.Dir(path)); derr == nil {
			err = ErrNotHotpluggable
		}
		return false, &WriteError{Path: path, Value: value, Err: err}
	}
	if op == opOnline && w.holds.CPUHeld(id) {
		return false, &WriteError{Path: path, Value: value, Err: ErrHeld}
	}
	return true, w.write(ctx, w.cpuTO, path, value)
}

// blockWrite writes a memory block's state; wrote says whether it tried.
func (w *Writer) blockWrite(ctx context.Context, id int, op, value string) (bool, error) {
	path := blockPath(w.root, id)
	if id < 0 {
		return false, &WriteError{Path: path, Value: value, Err: fmt.Errorf("memory block %d: %w", id, fs.ErrInvalid)}
	}
	if op == opOnline && w.holds.BlockHeld(id) {
		return false, &WriteError{Path: path, Value: value, Err: ErrHeld}
	}
	return true, w.write(ctx, w.blockTimeout, path, value)
}
