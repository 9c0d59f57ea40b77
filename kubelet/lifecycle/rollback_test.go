package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// quickWatch watches a start for a millisecond, with an empty journal.
var quickWatch = Rollback{Window: time.Millisecond, Poll: time.Millisecond,
	Journal: func(context.Context, string, time.Time) ([]systemd.JournalEntry, error) { return nil, nil }}

// Lines of the kubelet v1.37.2's journal. Those up to lineMemoryFailed
// are verbatim from the node VM (test/node: TestKubeletCheckpointRollback
// and the boot); the others are built from the format strings of
// pkg/kubelet/cm in the same release, as klog writes them.
const (
	lineStarted = `I1201 18:59:07.696900     385 eviction_manager.go:193] "Eviction manager: starting control loop"`
	// The device manager's own checkpoint, missing on a fresh node: not a
	// CPU or memory manager checkpoint.
	lineDeviceCheckpoint = `E1201 18:59:07.631536     385 manager.go:550] "Failed to read data from checkpoint" err="checkpoint is not found" checkpoint="kubelet_internal_checkpoint"`
	lineMemoryCorrupt    = `E1201 20:02:06.561032     413 memory_manager.go:218] "Could not initialize checkpoint manager, please drain node and remove policy state file" err="could not restore state from checkpoint: could not load v3 checkpoint: checkpoint is corrupted, please drain this node and delete the memory manager checkpoint file \"/var/lib/kubelet/memory_manager_state\" before restarting Kubelet"`
	lineMemoryFailed     = `E1201 20:02:06.561314     413 kubelet.go:1850] "Failed to start ContainerManager" err="start memory manager error: could not restore state from checkpoint: could not load v3 checkpoint: checkpoint is corrupted, please drain this node and delete the memory manager checkpoint file \"/var/lib/kubelet/memory_manager_state\" before restarting Kubelet"`
	lineCPUMismatch      = `E1201 19:12:44.100200     640 policy_static.go:199] "invalid state, please drain node and remove policy state file" err="current set of available CPUs \"0-2\" doesn't match with CPUs in state \"0-1\""`
	lineCPUFailed        = `E1201 19:12:44.100900     640 kubelet.go:1850] "Failed to start ContainerManager" err="start cpu manager error: current set of available CPUs \"0-2\" doesn't match with CPUs in state \"0-1\""`
	lineCPUCorrupt       = `E1201 19:20:01.000001     700 cpu_manager.go:249] "Could not initialize checkpoint manager, please drain node and remove policy state file" err="could not restore state from checkpoint: could not load v4 checkpoint: checkpoint is corrupted, please drain this node and delete the CPU manager checkpoint file \"/var/lib/kubelet/cpu_manager_state\" before restarting Kubelet"`
	lineMemoryMachine    = `E1201 19:30:00.000001     710 policy_static.go:105] "Invalid state, please drain node and remove policy state file" err="[memorymanager] the expected machine state is different from the real one"`
	lineNoCheckpointDir  = `E1201 19:40:00.000001     720 kubelet.go:1850] "Failed to start ContainerManager" err="start cpu manager error: failed to initialize checkpoint manager: mkdir /var/lib/kubelet: read-only file system"`
	lineOther            = `E1201 19:50:00.000001     730 run.go:72] "command failed" err="failed to run Kubelet: validate service connection: validate CRI v1 runtime API for endpoint \"unix:///run/containerd/containerd.sock\": rpc error: code = Unavailable"`
)

func entries(pid uint32, lines ...string) []systemd.JournalEntry {
	var out []systemd.JournalEntry
	for _, l := range lines {
		out = append(out, systemd.JournalEntry{PID: pid, Message: l})
	}
	return out
}

func TestJudgeStart(t *testing.T) {
	running := func(pid uint32) systemd.UnitState {
		return systemd.UnitState{ActiveState: "active", SubState: "running", MainPID: pid}
	}
	autoRestart := systemd.UnitState{ActiveState: "activating", SubState: "auto-restart"}
	failed := systemd.UnitState{ActiveState: "failed", SubState: "failed"}
	for _, tc := range []struct {
		name    string
		unit    systemd.UnitState
		journal []systemd.JournalEntry
		up      bool
		blamed  []manager
		line    string
	}{
		{name: "up", unit: running(385), journal: entries(385, lineDeviceCheckpoint, lineStarted), up: true},
		{name: "starting, nothing yet", unit: running(385), journal: entries(385, lineDeviceCheckpoint)},
		{name: "memory refused, waiting to restart", unit: autoRestart, journal: entries(901, lineMemoryCorrupt, lineMemoryFailed),
			blamed: []manager{memoryManager}, line: lineMemoryCorrupt},
		{name: "memory refused, started again", unit: running(955), journal: append(entries(901, lineMemoryCorrupt, lineMemoryFailed), entries(955, lineDeviceCheckpoint)...),
			blamed: []manager{memoryManager}, line: lineMemoryCorrupt},
		{name: "refused by the process that still runs: not yet", unit: running(901), journal: entries(901, lineMemoryCorrupt)},
		{name: "refused, then a kubelet up on the same files", unit: running(955), journal: append(entries(901, lineMemoryFailed), entries(955, lineStarted)...), up: true},
		{name: "CPU set mismatch", unit: failed, journal: entries(640, lineCPUMismatch, lineCPUFailed),
			blamed: []manager{cpuManager}, line: lineCPUMismatch},
		{name: "CPU checkpoint corrupt", unit: autoRestart, journal: entries(700, lineCPUCorrupt), blamed: []manager{cpuManager}, line: lineCPUCorrupt},
		{name: "memory machine state", unit: autoRestart, journal: entries(710, lineMemoryMachine), blamed: []manager{memoryManager}, line: lineMemoryMachine},
		{name: "CPU, then memory", unit: autoRestart, journal: append(entries(640, lineCPUFailed), entries(901, lineMemoryFailed)...),
			blamed: []manager{cpuManager, memoryManager}, line: lineCPUFailed},
		{name: "no checkpoint directory: not the file", unit: autoRestart, journal: entries(720, lineNoCheckpointDir)},
		{name: "another failure", unit: autoRestart, journal: entries(730, lineOther, lineDeviceCheckpoint)},
		{name: "unknown PID while it runs: not yet", unit: running(955), journal: entries(0, lineMemoryFailed)},
		{name: "unknown PID, unit down", unit: failed, journal: entries(0, lineMemoryFailed), blamed: []manager{memoryManager}, line: lineMemoryFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeStart(tc.unit, tc.journal)
			if v.up != tc.up || !slices.Equal(v.blamed, tc.blamed) || v.line != tc.line {
				t.Errorf("judgeStart = up %v, blamed %v, line %q; want %v, %v, %q", v.up, v.blamed, v.line, tc.up, tc.blamed, tc.line)
			}
		})
	}
}

// fakeKubelet is a kubelet unit whose starts come to what its script says,
// in order (the last repeats): each start gets a new PID and journal lines.
type fakeKubelet struct {
	units   *recordingUnits
	script  []func(pid uint32) (systemd.UnitState, []string)
	pid     uint32
	starts  int
	journal []systemd.JournalEntry
	state   systemd.UnitState
	onStart func()
}

func (k *fakeKubelet) start() {
	k.starts++
	k.pid += 100
	f := k.script[min(k.starts, len(k.script))-1]
	st, lines := f(k.pid)
	k.state = st
	k.journal = append(k.journal, entries(k.pid, lines...)...)
	if k.onStart != nil {
		k.onStart()
	}
}

func (k *fakeKubelet) UnitState(context.Context, string) (systemd.UnitState, error) {
	if k.starts == 0 && k.state.ActiveState == "" {
		// Before the restart: the kubelet runs.
		return systemd.UnitState{ActiveState: "active", SubState: "running", MainPID: 1}, nil
	}
	return k.state, nil
}
func (k *fakeKubelet) Restart(ctx context.Context, u string) (systemd.JobResult, error) {
	if k.starts > 0 && !k.state.Active() {
		return "", systemd.ErrUnitNotActive // as systemd.Client's
	}
	res, err := k.units.Restart(ctx, u)
	k.start()
	return res, err
}
func (k *fakeKubelet) Stop(ctx context.Context, u string) (systemd.JobResult, error) {
	res, err := k.units.Stop(ctx, u)
	if err == nil {
		k.state = systemd.UnitState{ActiveState: "inactive", SubState: "dead"}
	}
	return res, err
}
func (k *fakeKubelet) Start(ctx context.Context, u string) (systemd.JobResult, error) {
	res, err := k.units.Start(ctx, u)
	k.start()
	return res, err
}
func (k *fakeKubelet) Journal(context.Context, string, time.Time) ([]systemd.JournalEntry, error) {
	return slices.Clone(k.journal), nil
}

func up(pid uint32) (systemd.UnitState, []string) {
	return systemd.UnitState{ActiveState: "active", SubState: "running", MainPID: pid}, []string{lineDeviceCheckpoint, lineStarted}
}

func refusesMemory(uint32) (systemd.UnitState, []string) {
	return systemd.UnitState{ActiveState: "activating", SubState: "auto-restart"}, []string{lineMemoryCorrupt, lineMemoryFailed}
}

func refusesCPU(uint32) (systemd.UnitState, []string) {
	return systemd.UnitState{ActiveState: "activating", SubState: "auto-restart"}, []string{lineCPUFailed}
}

// rollbackNode is a kubelet root with the v4 CPU manager checkpoint (CPUs
// 0-12) and a None policy memory manager checkpoint, and a restarter for
// it that restarts kubelet.
func rollbackNode(t *testing.T, k *fakeKubelet) (*Restarter, string, string) {
	t.Helper()
	cpu := v4Checkpoint(t)
	mem := filepath.Join(filepath.Dir(cpu), "memory_manager_state")
	b, err := os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "memory_manager_state", "v1-none"))
	if err == nil {
		err = os.WriteFile(mem, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	k.units = &recordingUnits{checkpoint: cpu, active: true, result: systemd.JobDone}
	r := &Restarter{Systemd: k, CPUManagerCheckpoint: cpu, MemoryManagerCheckpoint: mem, ReservedCPUs: topology.CPUSet{0},
		Rollback: Rollback{HoldPath: filepath.Join(t.TempDir(), HoldFile), Window: 2 * time.Second, Poll: time.Millisecond, Journal: k.Journal}}
	return r, cpu, mem
}

func sum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func grow(t *testing.T) *topology.Snapshot {
	cpus, err := topology.ParseCPUSet("0-15")
	if err != nil {
		t.Fatal(err)
	}
	return &topology.Snapshot{CPUs: topology.CPUs{Online: cpus}}
}

// A kubelet that refuses the memory manager checkpoint rewritten with the
// CPU manager's: the memory one is restored from its backup, the CPU one
// (which the kubelet loaded first, and accepted) kept, the hold written
// with both as they are, the kubelet restarted in one job; the restart
// ends with a CheckpointRollback that names the file and the line.
func TestRollbackRestoresTheRefusedCheckpoint(t *testing.T) {
	k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusesMemory, up}}
	r, cpu, mem := rollbackNode(t, k)
	memBefore, _ := os.ReadFile(mem)
	// The rewrite also corrupts the memory checkpoint, as the fault does.
	k.onStart = func() {
		if k.starts == 1 {
			if err := checkpoint.WriteFileAtomic(mem+checkpoint.BackupSuffix, memBefore, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(mem, []byte(`{"policyName":"None","machineState":{},"checksum":1}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	began := time.Now()
	res, err := r.Restart(context.Background(), grow(t))
	var rb *types.CheckpointRollback
	if !errors.As(err, &rb) {
		t.Fatalf("Restart = %q, %v; want a CheckpointRollback", res, err)
	}
	// The start again is one node-resized caused besides the restart: the
	// report says when, for the restart budget.
	if len(rb.Starts) != 1 || rb.Starts[0].Before(began) || rb.Starts[0].After(time.Now()) {
		t.Errorf("rollback starts %v; want the one start again, since %v", rb.Starts, began)
	}
	t.Logf("Restart: %q, %v", res, err)
	if res != systemd.JobDone || !slices.Equal(rb.Files, []string{mem}) || rb.Journal != lineMemoryCorrupt || rb.Result != "done" || len(rb.Problems) != 0 {
		t.Errorf("rollback %+v, result %q", rb, res)
	}
	if !slices.Equal(k.units.calls, []string{"stop", "start", "start"}) || k.starts != 2 {
		t.Errorf("jobs %v, %d starts; want stop, start, then one start of the unit waiting to auto-restart", k.units.calls, k.starts)
	}
	if got, _ := os.ReadFile(mem); string(got) != string(memBefore) {
		t.Errorf("memory checkpoint %q, want it restored", got)
	}
	if now, bak := sum(t, cpu), sum(t, cpu+checkpoint.BackupSuffix); now == bak {
		t.Error("the CPU checkpoint, which the kubelet accepted, was restored too")
	}
	var h prestartHold
	b, err := os.ReadFile(r.Rollback.HoldPath)
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	t.Logf("hold: %s", b)
	if len(h.Files) != 2 || h.Files[cpu] != sum(t, cpu) || h.Files[mem] != sum(t, mem) || h.At.IsZero() || !strings.Contains(h.Reason, mem) {
		t.Errorf("hold %+v; want both checkpoints as they are now", h)
	}
}

// A kubelet that refuses the CPU checkpoint (loaded first), then the
// memory one once the CPU one is back: each is restored, once.
func TestRollbackEachRewrittenFileOnce(t *testing.T) {
	k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusesCPU, refusesMemory}}
	r, cpu, mem := rollbackNode(t, k)
	old, _ := os.ReadFile(cpu)
	memBefore, _ := os.ReadFile(mem)
	k.onStart = func() {
		if k.starts == 1 {
			checkpoint.WriteFileAtomic(mem+checkpoint.BackupSuffix, memBefore, 0o644)
		}
	}
	_, err := r.Restart(context.Background(), grow(t))
	var rb *types.CheckpointRollback
	if !errors.As(err, &rb) || !slices.Equal(rb.Files, []string{cpu, mem}) || rb.Journal != lineCPUFailed {
		t.Fatalf("Restart: %v; want both files rolled back, the CPU one blamed first", err)
	}
	if !slices.Equal(k.units.calls, []string{"stop", "start", "start", "start"}) {
		t.Errorf("jobs %v; want one start per file restored, no more", k.units.calls)
	}
	if len(rb.Starts) != 2 || rb.Starts[1].Before(rb.Starts[0]) {
		t.Errorf("rollback starts %v; want each start again, in order", rb.Starts)
	}
	if got, _ := os.ReadFile(cpu); string(got) != string(old) {
		t.Error("the CPU checkpoint is not its backup")
	}
}

// No rollback: a kubelet that comes up; a refusal of a checkpoint this
// restart did not rewrite (its backup is old, or there is none); a backup
// that cannot be used (the restart fails, the files are left).
func TestNoRollback(t *testing.T) {
	t.Run("up", func(t *testing.T) {
		k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){up}}
		r, _, _ := rollbackNode(t, k)
		r.Rollback.Window = time.Hour // it returns as soon as the kubelet is up
		if res, err := r.Restart(context.Background(), grow(t)); err != nil || res != systemd.JobDone {
			t.Fatalf("Restart = %q, %v", res, err)
		}
		if _, err := os.Stat(r.Rollback.HoldPath); err == nil {
			t.Error("a hold written with no rollback")
		}
	})
	t.Run("not rewritten", func(t *testing.T) {
		k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusesMemory}}
		r, _, mem := rollbackNode(t, k)
		os.WriteFile(mem+checkpoint.BackupSuffix, []byte("{}"), 0o644)
		old := time.Now().Add(-time.Hour)
		os.Chtimes(mem+checkpoint.BackupSuffix, old, old)
		before, _ := os.ReadFile(mem)
		if _, err := r.Restart(context.Background(), grow(t)); err != nil {
			t.Fatalf("Restart: %v; want no rollback of a file the restart did not write", err)
		}
		if got, _ := os.ReadFile(mem); string(got) != string(before) || !slices.Equal(k.units.calls, []string{"stop", "start"}) {
			t.Errorf("memory checkpoint touched, or jobs %v", k.units.calls)
		}
	})
	t.Run("nothing rewritten", func(t *testing.T) {
		k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusesMemory}}
		r, _, _ := rollbackNode(t, k)
		r.Rollback.Window = time.Hour // not watched at all
		cpus, _ := topology.ParseCPUSet("0-12")
		if _, err := r.Restart(context.Background(), &topology.Snapshot{CPUs: topology.CPUs{Online: cpus}}); err != nil || !slices.Equal(k.units.calls, []string{"restart"}) {
			t.Fatalf("Restart: %v, jobs %v", err, k.units.calls)
		}
	})
	t.Run("backup unusable", func(t *testing.T) {
		k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusesCPU}}
		r, cpu, _ := rollbackNode(t, k)
		k.onStart = func() { os.WriteFile(cpu+checkpoint.BackupSuffix, []byte("not a checkpoint"), 0o644) }
		_, err := r.Restart(context.Background(), grow(t))
		var rb *types.CheckpointRollback
		if err == nil || errors.As(err, &rb) || !strings.Contains(err.Error(), "not rolled back") {
			t.Fatalf("Restart: %v; want a failure that says it was not rolled back", err)
		}
		t.Logf("Restart: %v", err)
		if !slices.Equal(k.units.calls, []string{"stop", "start"}) {
			t.Errorf("jobs %v; want no restart after a rollback that did not happen", k.units.calls)
		}
		if _, err := os.Stat(r.Rollback.HoldPath); err == nil {
			t.Error("a hold written with nothing restored")
		}
	})
}

// A kubelet that refused the memory checkpoint and that systemd already
// started again (on the corrupt file, before the restore) is restarted,
// not started: it must read the restored file.
func TestRollbackRestartsAKubeletBackMeanwhile(t *testing.T) {
	refusedAndBack := func(pid uint32) (systemd.UnitState, []string) {
		return systemd.UnitState{ActiveState: "active", SubState: "running", MainPID: pid + 1}, []string{lineMemoryFailed}
	}
	k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){refusedAndBack, up}}
	r, _, mem := rollbackNode(t, k)
	memBefore, _ := os.ReadFile(mem)
	k.onStart = func() {
		if k.starts == 1 {
			checkpoint.WriteFileAtomic(mem+checkpoint.BackupSuffix, memBefore, 0o644)
		}
	}
	_, err := r.Restart(context.Background(), grow(t))
	var rb *types.CheckpointRollback
	if !errors.As(err, &rb) || rb.Result != "done" || len(rb.Problems) > 0 {
		t.Fatalf("Restart: %v", err)
	}
	if !slices.Equal(k.units.calls, []string{"stop", "start", "restart"}) {
		t.Errorf("jobs %v; want a restart of the kubelet systemd had started again", k.units.calls)
	}
	if len(rb.Starts) != 1 {
		t.Errorf("rollback starts %v; want the restart that started it again", rb.Starts)
	}
}

// A restart removes the hold an earlier rollback left: it is for another
// change, whose rewrite the pre-start must make.
func TestRestartRemovesAnEarlierHold(t *testing.T) {
	k := &fakeKubelet{script: []func(uint32) (systemd.UnitState, []string){up}}
	r, _, _ := rollbackNode(t, k)
	if err := os.WriteFile(r.Rollback.HoldPath, []byte(`{"files":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restart(context.Background(), grow(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Rollback.HoldPath); err == nil {
		t.Error("the hold of an earlier rollback is still there")
	}
}
