package types

import (
	"fmt"
	"strings"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// RestartReport is how a kubelet restart ended, as its actuator saw it. It
// is a plain value.
type RestartReport struct {
	// At is the State.RestartAt of the restart the report is about.
	At time.Time `json:"at,omitzero"`
	// Failed says why the restart failed (the systemd job's result, a
	// checkpoint that could not be made safe, the bus); empty when systemd
	// started the kubelet again.
	Failed string `json:"failed,omitempty"`
}

// KubeletView is what the daemon knows of the running kubelet, gathered
// from systemd, the Node's status writes and the pod-resources API. It is
// the plain value the gathering part hands to the agent and the agent
// shows; safe for concurrent reads.
type KubeletView struct {
	// Unit is the kubelet's systemd unit, with its ActiveState and
	// SubState, its main PID and when that process started; UnitError says
	// why systemd could not be asked (empty when it answered).
	Unit        string    `json:"unit"`
	LoadState   string    `json:"loadState,omitempty"`
	ActiveState string    `json:"activeState,omitempty"`
	SubState    string    `json:"subState,omitempty"`
	MainPID     uint32    `json:"mainPID,omitempty"`
	Started     time.Time `json:"started,omitzero"`
	UnitError   string    `json:"unitError,omitempty"`
	// Version is the kubelet's version as its Node reports it
	// (status.nodeInfo.kubeletVersion); VersionNote says when it is
	// outside the versions whose checkpoints node-resized knows.
	Version     string `json:"version,omitempty"`
	VersionNote string `json:"versionNote,omitempty"`
	// Capacity is the capacity the running kubelet believes the machine
	// has, per resource where known; Sources says, per resource, where
	// that was learnt.
	Capacity resources.List    `json:"capacity,omitempty"`
	Sources  map[string]string `json:"sources,omitempty"`
	// Ready is the Node's Ready condition as the running kubelet wrote it:
	// false until that process has written status once.
	Ready bool `json:"ready"`
	// Stale is true when Capacity differs from the machine as it is now;
	// StaleSince is then the id of the model change the kubelet has not
	// seen (0: one from before this daemon started).
	Stale      bool   `json:"stale"`
	StaleSince uint64 `json:"staleSince,omitempty"`
	// PodResourcesCPUs are the CPUs the kubelet's pod-resources API says it
	// may allocate, PodResourcesError why it could not be asked.
	PodResourcesCPUs  []int  `json:"podResourcesCPUs,omitempty"`
	PodResourcesError string `json:"podResourcesError,omitempty"`
	// ObservedAt is when the view last changed.
	ObservedAt time.Time `json:"observedAt,omitzero"`
}

// UnitActive reports whether systemd says the unit is active.
func (v KubeletView) UnitActive() bool { return v.ActiveState == "active" }

// Known reports whether anything is known of the kubelet: its unit is
// loaded, or its capacity view is known.
func (v KubeletView) Known() bool { return v.LoadState == "loaded" || len(v.Capacity) > 0 }

// CheckpointRollback is how a kubelet restart ends when the kubelet
// refused a checkpoint node-resized had rewritten for it, and the files
// were put back from their backups: an error, for the restart failed. It
// is a plain value.
type CheckpointRollback struct {
	// Files are the checkpoints restored; Journal is the kubelet's journal
	// message that blamed them.
	Files   []string `json:"files"`
	Journal string   `json:"journal"`
	// Result is the result of systemd's job that started the kubelet
	// again; Problems what went wrong on the way (a backup not used, the
	// pre-start hold not written), empty when nothing did.
	Result   string   `json:"result"`
	Problems []string `json:"problems,omitempty"`
	// Starts are when the kubelet was started again, one per file
	// restored (each refusal, in turn, restores a file and starts it): kubelet
	// starts node-resized caused besides the restart, which the restart
	// budget counts.
	Starts []time.Time `json:"starts,omitempty"`
}

// Error implements error.
func (r *CheckpointRollback) Error() string {
	msg := fmt.Sprintf("the kubelet refused the checkpoint node-resized rewrote (its journal: %q); restored %s from the backups and started it again (job %s)",
		r.Journal, strings.Join(r.Files, ", "), r.Result)
	if len(r.Problems) > 0 {
		msg += "; " + strings.Join(r.Problems, "; ")
	}
	return msg
}
