package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
)

// v4Checkpoint copies the checkpoint package's v4 CPU manager checkpoint
// (CPUs 0-12; pods hold 1-2 and 8-12) into a temporary directory.
func v4Checkpoint(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "cpu_manager_state", "v4"))
	path := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// recordingUnits is a UnitControl that records the calls and, at each,
// what the CPU manager checkpoint held.
type recordingUnits struct {
	checkpoint string
	active     bool
	result     systemd.JobResult
	dropIns    []string // the unit's DropInPaths
	calls      []string
	seen       [][]byte
}

func (u *recordingUnits) job(kind string) (systemd.JobResult, error) {
	u.calls = append(u.calls, kind)
	b, _ := os.ReadFile(u.checkpoint)
	u.seen = append(u.seen, b)
	if kind == "stop" && !u.active {
		return "", systemd.ErrUnitNotActive
	}
	u.active = kind != "stop"
	return u.result, nil
}

func (u *recordingUnits) UnitState(_ context.Context, unit string) (systemd.UnitState, error) {
	st := systemd.UnitState{Unit: unit, LoadState: "loaded", ActiveState: "inactive", SubState: "dead", DropInPaths: u.dropIns}
	if u.active {
		st.ActiveState, st.SubState = "active", "running"
	}
	return st, nil
}

func (u *recordingUnits) Restart(context.Context, string) (systemd.JobResult, error) {
	return u.job("restart")
}
func (u *recordingUnits) Stop(context.Context, string) (systemd.JobResult, error) {
	return u.job("stop")
}
func (u *recordingUnits) Start(context.Context, string) (systemd.JobResult, error) {
	return u.job("start")
}

// TestRestarterOrder: with a checkpoint to rewrite, the kubelet is stopped,
// the checkpoint rewritten (the old one kept beside it), then started; with
// nothing to rewrite, one restart job; with a checkpoint no kubelet would
// accept, no job at all.
func TestRestarterOrder(t *testing.T) {
	snap := func(online string) *topology.Snapshot {
		cpus, err := topology.ParseCPUSet(online)
		if err != nil {
			t.Fatal(err)
		}
		return &topology.Snapshot{CPUs: topology.CPUs{Online: cpus}}
	}
	for _, tc := range []struct {
		name   string
		online string
		calls  []string
		infeas bool
	}{
		{name: "CPUs added", online: "0-15", calls: []string{"stop", "start"}},
		{name: "unchanged", online: "0-12", calls: []string{"restart"}},
		{name: "reserved CPU gone", online: "1-12", infeas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := v4Checkpoint(t)
			old, _ := os.ReadFile(path)
			u := &recordingUnits{checkpoint: path, active: true, result: systemd.JobDone}
			r := &Restarter{Systemd: u, CPUManagerCheckpoint: path,
				MemoryManagerCheckpoint: filepath.Join(t.TempDir(), "absent"), ReservedCPUs: topology.CPUSet{0}, Rollback: quickWatch}
			checkErr := r.Check(snap(tc.online))
			res, err := r.Restart(context.Background(), snap(tc.online))
			if tc.infeas {
				if !errors.Is(checkErr, checkpoint.ErrInfeasible) || !errors.Is(err, checkpoint.ErrInfeasible) || len(u.calls) != 0 {
					t.Fatalf("Check %v, Restart %q %v, calls %v; want checkpoint.ErrInfeasible and no job", checkErr, res, err, u.calls)
				}
				return
			}
			if checkErr != nil || err != nil || res != systemd.JobDone || !slices.Equal(u.calls, tc.calls) {
				t.Fatalf("Check %v, Restart %q %v, calls %v; want %v", checkErr, res, err, u.calls, tc.calls)
			}
			now, _ := os.ReadFile(path)
			if len(tc.calls) == 2 {
				if !bytes.Equal(u.seen[0], old) || bytes.Equal(u.seen[1], old) || !bytes.Equal(u.seen[1], now) {
					t.Fatal("the checkpoint was not rewritten between the stop and the start")
				}
				if bak, _ := os.ReadFile(path + checkpoint.BackupSuffix); !bytes.Equal(bak, old) {
					t.Fatal("the previous checkpoint was not kept beside it")
				}
			} else if !bytes.Equal(now, old) {
				t.Fatal("a checkpoint that needed nothing was rewritten")
			}
		})
	}
}

// TestRestarterPrestart: when the kubelet's unit has the pre-start
// drop-in, a restart is one restart job whatever the checkpoints need, and
// node-resized itself writes nothing (the pre-start does, inside the job);
// a checkpoint no kubelet would accept still means no job.
func TestRestarterPrestart(t *testing.T) {
	snap := func(online string) *topology.Snapshot {
		cpus, err := topology.ParseCPUSet(online)
		if err != nil {
			t.Fatal(err)
		}
		return &topology.Snapshot{CPUs: topology.CPUs{Online: cpus}}
	}
	dropIn := filepath.Join(t.TempDir(), PrestartDropIn)
	if err := os.WriteFile(dropIn, []byte("[Service]\nExecStartPre=-/usr/bin/node-resized kubelet-prestart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIns := []string{"/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", dropIn}
	for _, tc := range []struct {
		name   string
		online string
		calls  []string
		infeas bool
	}{
		{name: "CPUs added", online: "0-15", calls: []string{"restart"}},
		{name: "unchanged", online: "0-12", calls: []string{"restart"}},
		{name: "reserved CPU gone", online: "1-12", infeas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := v4Checkpoint(t)
			old, _ := os.ReadFile(path)
			u := &recordingUnits{checkpoint: path, active: true, result: systemd.JobDone, dropIns: dropIns}
			r := &Restarter{Systemd: u, CPUManagerCheckpoint: path,
				MemoryManagerCheckpoint: filepath.Join(t.TempDir(), "absent"), ReservedCPUs: topology.CPUSet{0}}
			res, err := r.Restart(context.Background(), snap(tc.online))
			if tc.infeas {
				if !errors.Is(err, checkpoint.ErrInfeasible) || len(u.calls) != 0 {
					t.Fatalf("Restart %q %v, calls %v; want checkpoint.ErrInfeasible and no job", res, err, u.calls)
				}
				return
			}
			if err != nil || res != systemd.JobDone || !slices.Equal(u.calls, tc.calls) {
				t.Fatalf("Restart %q %v, calls %v; want %v", res, err, u.calls, tc.calls)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
				t.Error("node-resized rewrote the checkpoint itself: with the drop-in that is the pre-start's")
			}
			if _, err := os.Stat(path + checkpoint.BackupSuffix); err == nil {
				t.Error("a backup was written")
			}
		})
	}
}
