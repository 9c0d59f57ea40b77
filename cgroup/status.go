package cgroup

import (
	"time"
)

// HistoryLen is how many changes Status keeps.
const HistoryLen = 32

// Result says what one Apply did.
type Result string

// The results of an Apply.
const (
	// ResultChanged: at least one file was written and every write held.
	ResultChanged Result = "changed"
	// ResultUnchanged: every file already held its target; nothing was
	// written.
	ResultUnchanged Result = "unchanged"
	// ResultSkipped: nothing could be looked at (cgroup v1, kubepods does
	// not exist yet); Reason says why. Not an error.
	ResultSkipped Result = "skipped"
	// ResultFailed: a read or a write failed; Files shows which writes
	// were made and Error what went wrong.
	ResultFailed Result = "failed"
)

// FileChange is one cgroup file the Enforcer looked at. It is a plain
// value.
type FileChange struct {
	// Path is the file.
	Path string `json:"path"`
	// Before is the value read before the write, as the kernel spells it
	// ("max", "0-3", "" for an inheriting cpuset).
	Before string `json:"before"`
	// Want is the target value; empty when the file was left alone.
	Want string `json:"want,omitempty"`
	// After is the value read back after the write (equal to Before when
	// nothing was written).
	After string `json:"after"`
	// Written is true when the file was written.
	Written bool `json:"written"`
	// Note says why a file was left alone or how it was written
	// ("inherits its parent's CPUs", "cgroupfs only: ...").
	Note string `json:"note,omitempty"`
}

// Change records one Apply: what was asked, what was found, what was
// written and what happened to the pods' OOM kill count meanwhile. It is a
// plain value; Status hands out copies.
type Change struct {
	Time time.Time `json:"time"`
	// Action is the request's Kind.
	Action     Kind  `json:"action"`
	Generation int64 `json:"generation"`
	// Reapply is true when the change came from Reapply rather than from
	// a decision.
	Reapply bool   `json:"reapply,omitempty"`
	Result  Result `json:"result"`
	// Reason says why the action was skipped.
	Reason string       `json:"reason,omitempty"`
	Files  []FileChange `json:"files,omitempty"`
	// OOMKillsBefore and OOMKillsAfter are oom_kill from kubepods'
	// memory.events (every OOM kill inside kubepods) read before the first
	// write and after the last. Shrinking memory.max below the pods' usage
	// OOM-kills inside the write itself, so the difference counts the kills
	// the clamp caused. Nil when memory.events could not be read.
	OOMKillsBefore *uint64 `json:"oomKillsBefore,omitempty"`
	OOMKillsAfter  *uint64 `json:"oomKillsAfter,omitempty"`
	// WrittenAt is when the last file written was read back: on a clamp
	// of memory alone, memory.max, which is written first. Zero when
	// nothing was written.
	WrittenAt time.Time `json:"writtenAt,omitzero"`
	// DurationSeconds is how long the Apply took.
	DurationSeconds float64 `json:"durationSeconds"`
	Error           string  `json:"error,omitempty"`
}

// Status is the Enforcer's view for the local API. It is a plain value.
type Status struct {
	Mode   Mode   `json:"mode"`
	Driver string `json:"driver"`
	// Kubepods is the kubepods cgroup directory; Found says whether it
	// exists now (it does not before the kubelet first starts; on cgroup
	// v1 it is looked for under the memory controller).
	Kubepods string `json:"kubepods"`
	Found    bool   `json:"found"`
	Paths    Paths  `json:"paths"`
	// Unsupported says why nothing is enforced on this host (cgroup v1).
	Unsupported string `json:"unsupported,omitempty"`
	// Last is the newest Apply or Reapply, whatever its result.
	Last *Change `json:"last,omitempty"`
	// History holds the newest HistoryLen changes that wrote something or
	// failed, oldest first.
	History []Change `json:"history,omitempty"`
}

// Summary names the files the change wrote with their values before and
// after ("kubepods/memory.max 8589934592→7516192768; kubepods/cpu.weight
// 118→157"), or "none".
func (c Change) Summary() string { return summarize(c.Files) }

func (c Change) clone() Change {
	c.Files = append([]FileChange(nil), c.Files...)
	return c
}
