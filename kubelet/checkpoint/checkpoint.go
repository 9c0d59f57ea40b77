package checkpoint

import (
	"errors"
	"fmt"

	"github.com/node-resized/node-resized/internal/capped"
)

// maxSize caps a checkpoint read: a few hundred bytes per pod.
const maxSize = 16 << 20

// BackupSuffix names the copy of a checkpoint kept beside it when
// node-resized rewrites it: cpu_manager_state.node-resized.bak.
const BackupSuffix = ".node-resized.bak"

// ErrCorrupt is wrapped by the errors returned for a checkpoint the
// kubelet itself would refuse: not JSON, unparsable CPU sets, a checksum
// that does not match, or larger than any kubelet writes. Such a
// checkpoint stops the kubelet from starting until it is removed; it is
// never rewritten.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ErrInfeasible is wrapped by the errors the plans return when no
// checkpoint the kubelet would accept keeps the pods that still run: an
// operator has to act first, and the message says what to do. The kubelet
// must not be restarted meanwhile.
var ErrInfeasible = errors.New("no checkpoint the kubelet accepts fits the new machine")

// ErrChanged is wrapped by the error a plan's Apply returns when the file
// is no longer the one the plan was made from (the kubelet wrote it
// meanwhile): plan again.
var ErrChanged = errors.New("checkpoint changed since it was read")

// codec is one of the kubelet's checkpoints, which the skeleton below
// reads, verifies, plans and writes the same way.
type codec[S any] struct {
	name        string // as errors name it: "CPU manager checkpoint"
	defaultPath string // for an empty path
	// parse decodes and verifies a checkpoint's contents as the kubelet
	// does; its errors wrap ErrCorrupt. It may return a state with an
	// error (see ReadCPUManager).
	parse func([]byte) (S, error)
}

// read reads the checkpoint at path (the codec's default when empty),
// capped at maxSize, and parses it. It returns the path read and the bytes
// as read, for a plan to compare with before it writes. A missing file
// gives an error wrapping fs.ErrNotExist.
func (c codec[S]) read(path string) (string, []byte, S, error) {
	var zero S
	if path == "" {
		path = c.defaultPath
	}
	b, err := capped.ReadFile(path, maxSize)
	if errors.Is(err, capped.ErrTooLarge) {
		return path, nil, zero, fmt.Errorf("%s: %w: %w", c.name, err, ErrCorrupt)
	}
	if err != nil {
		return path, nil, zero, fmt.Errorf("%s: %w", c.name, err)
	}
	st, err := c.parse(b)
	if err != nil {
		return path, b, st, fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	return path, b, st, nil
}

// A layout decodes a checkpoint in one layout some kubelet version writes,
// from F, the file as the codec decodes it first. ok false means the file
// is not in this layout and the kubelet tries the next, older one;
// otherwise the kubelet loads st, or refuses the file when err (wrapping
// ErrCorrupt) is not nil.
type layout[F, S any] func(f F) (st S, ok bool, err error)

// decode tries the layouts in order, newest first, as the kubelet loads a
// checkpoint: the first that takes the file decides. The oldest layout
// takes every file the others leave.
func decode[F, S any](f F, layouts []layout[F, S]) (S, error) {
	for _, l := range layouts {
		if st, ok, err := l(f); ok {
			return st, err
		}
	}
	var zero S
	return zero, fmt.Errorf("%w: in no layout the kubelet reads", ErrCorrupt)
}

// Plan is a rewrite of a checkpoint for a changed machine, made by
// PlanCPUManager or PlanMemoryManager and written by Apply. It is not safe
// for concurrent use.
type Plan[S any] struct {
	Path string
	// Old is the checkpoint as read, New as it will be written.
	Old, New S
	// Dropped are the pods whose assignments are no longer all on the
	// machine (CPUs offline, NUMA nodes gone): they are left out of New,
	// and must have been evicted.
	Dropped []string
	// Changed reports whether New differs from Old; Apply writes nothing
	// otherwise.
	Changed bool

	old, data []byte
}

// replan plans a checkpoint for the changed machine from the state st read
// from the bytes b: the state the kubelet will accept, the pods dropped
// from it, and the file to write; data is nil when the file needs no
// change.
type replan[S any] func(b []byte, st S) (next S, dropped []string, data []byte, err error)

// plan reads and verifies the checkpoint at path (a corrupt one is an
// error, never rewritten) and plans its rewrite with rp.
func (c codec[S]) plan(path string, rp replan[S]) (*Plan[S], error) {
	path, b, st, err := c.read(path)
	if err != nil {
		return nil, err
	}
	p := &Plan[S]{Path: path, Old: st, New: st, old: b}
	if p.New, p.Dropped, p.data, err = rp(b, st); err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	p.Changed = p.data != nil
	return p, nil
}

// Apply writes the planned checkpoint when it changed: atomically, with
// the previous file kept at Path+BackupSuffix. It fails, wrapping
// ErrChanged, when the file is no longer the one planned from.
func (p *Plan[S]) Apply() error {
	if b := faultCorrupt(p); b != nil {
		return replace(p.Path, p.old, b)
	}
	if !p.Changed {
		return nil
	}
	return replace(p.Path, p.old, p.data)
}

// Bytes returns the checkpoint Apply writes (nil when unchanged).
func (p *Plan[S]) Bytes() []byte { return p.data }
