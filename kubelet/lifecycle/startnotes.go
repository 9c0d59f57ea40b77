package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// StartNotesFile is the name, in node-resized's state directory, of the
// kubelet starts a recovery made with no daemon to tell them to
// (`node-resized kubelet-recover`, node-resized.service's ExecStopPost,
// which runs while the daemon does not): the daemon's Run takes them, for
// its restart budget, and removes the file.
const StartNotesFile = "kubelet-started.json"

// maxStartNotes caps the starts the notes keep (the newest), and
// maxStartNotesSize the file's size.
const (
	maxStartNotes     = 16
	maxStartNotesSize = 4096
)

// startNotes is the notes' JSON.
type startNotes struct {
	Starts []time.Time `json:"starts"`
}

// noteStart adds at to the notes at path, durably (a temporary file,
// fsync, rename, fsync of the directory); the newest maxStartNotes are
// kept. Notes that cannot be read are replaced.
func noteStart(path string, at time.Time) error {
	starts, _ := readStartNotes(path)
	starts = append(starts, at)
	slices.SortFunc(starts, time.Time.Compare)
	if len(starts) > maxStartNotes {
		starts = starts[len(starts)-maxStartNotes:]
	}
	b, err := json.Marshal(startNotes{Starts: starts})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return checkpoint.WriteFileAtomic(path, append(b, '\n'), 0o600)
}

// readStartNotes reads the notes at path; missing ones are none. The file
// is untrusted as the stop record is: a regular file, at most 4 KiB, and
// no more than maxStartNotes starts, none of them the zero time.
func readStartNotes(path string) ([]time.Time, error) {
	b, err := readRecord(path, maxStartNotesSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var n startNotes
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(n.Starts) > maxStartNotes {
		return nil, fmt.Errorf("%s: %d starts, more than the %d kept", path, len(n.Starts), maxStartNotes)
	}
	if slices.ContainsFunc(n.Starts, time.Time.IsZero) {
		return nil, fmt.Errorf("%s: a start at the zero time", path)
	}
	return n.Starts, nil
}

// started counts a start Recover made at at: Started is told, or, with no
// one to tell, it is noted in StartNotes.
func (r *Restarter) started(at time.Time) error {
	if r.Started != nil {
		r.Started(at)
		return nil
	}
	if r.StartNotes == "" {
		return nil
	}
	if err := noteStart(r.StartNotes, at); err != nil {
		return fmt.Errorf("note the kubelet's start for node-resized's restart budget: %w", err)
	}
	return nil
}

// takeStartNotes tells Started of the starts noted in StartNotes and
// removes the notes; notes that cannot be read are removed too.
func (r *Restarter) takeStartNotes() error {
	if r.Started == nil || r.StartNotes == "" {
		return nil
	}
	starts, err := readStartNotes(r.StartNotes)
	for _, at := range starts {
		r.Started(at)
	}
	if len(starts) == 0 && err == nil {
		return nil
	}
	if len(starts) > 0 {
		r.log().Info("counted the kubelet starts a recovery made while node-resized was not running", "starts", starts)
	}
	return errors.Join(err, removeRecord(r.StartNotes))
}
