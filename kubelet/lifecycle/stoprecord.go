package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// StopRecordFile is the stop record's name in node-resized's state
// directory (the directory of its --state-file).
const StopRecordFile = "kubelet-stopped.json"

// maxStopRecord caps the stop record's size: it holds a few short fields.
const maxStopRecord = 4096

// StopRecord says that node-resized stopped the kubelet's unit to rewrite
// its checkpoints and has not yet seen it started again. It is written
// durably before the stop is queued and removed once the start job is
// done and the unit active; whoever finds it with the unit stopped, in
// the same boot, starts the unit. It is a plain value.
type StopRecord struct {
	Unit string    `json:"unit"`
	At   time.Time `json:"at"`
	// BootID is the kernel's boot id when the unit was stopped: a record
	// from another boot is void (the unit's enablement decided at boot).
	BootID string `json:"bootID"`
	// PID is the node-resized process that stopped it.
	PID int `json:"pid"`
}

// writeStopRecord writes rec to path durably: a temporary file beside it,
// synced, renamed over path, and the directory synced.
func writeStopRecord(path string, rec StopRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return checkpoint.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// removeRecord removes the record at path durably; a missing one is
// no error.
func removeRecord(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// ReadStopRecord reads the stop record at path. A missing record wraps
// fs.ErrNotExist. The file is untrusted: it must be a regular file (the
// open never blocks, a FIFO included), at most 4 KiB, and name a unit
// and a time.
func ReadStopRecord(path string) (StopRecord, error) {
	b, err := readRecord(path, maxStopRecord)
	if err != nil {
		return StopRecord{}, err
	}
	var rec StopRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return StopRecord{}, fmt.Errorf("%s: %w", path, err)
	}
	if rec.Unit == "" || rec.At.IsZero() {
		return StopRecord{}, fmt.Errorf("%s: no unit or no time", path)
	}
	return rec, nil
}

// readRecord reads one of node-resized's records in its state directory
// (the stop record, the start notes): a regular file (opened without
// following a symlink and without blocking, a FIFO included) of at most
// max bytes.
func readRecord(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return capped.Read(f, max)
}

// readBootID reads the kernel's boot id (/proc/sys/kernel/random/boot_id).
func readBootID(path string) (string, error) {
	b, err := capped.ReadFile(path, 64)
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("read the boot id: %s is empty", path)
	}
	return id, nil
}
