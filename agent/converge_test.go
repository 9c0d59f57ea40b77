package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/cgroup/cgrouptest"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/types"
)

func TestMain(m *testing.M) {
	cgrouptest.AllowSyntheticTrees()
	os.Exit(m.Run())
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The machine shrank from 4 CPUs to 2 while the daemon was not running,
// and there is no state file: the first pass reads the kubepods limits,
// finds them written for 4 CPUs, clamps them to what the kubelet would
// write for 2 and reports it as an emergency. With a state file to resume
// from, the state says what is applied (2 CPUs): the limits written for 4
// are what is wrong, and the recorded ones are written again, with no
// event.
func TestConvergeAtStartClampsKubepods(t *testing.T) {
	weight := func(cpus int64) string {
		return strconv.FormatUint(decide.KubepodsLimits(map[string]int64{"cpu": cpus * 1000}, decide.Reservations{}).CPUWeight, 10)
	}
	start := func(t *testing.T, statePath string) (*run, string) {
		root := t.TempDir()
		kubepods := cgrouptest.Kubepods(t, root, decide.KubepodsLimits(map[string]int64{"cpu": 4000, "memory": 16 << 30}, decide.Reservations{}))
		e, err := cgroup.New(cgroup.Options{Root: root, SkipMagicCheck: true, ReassertInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
		r.a = New(Config{StatePath: statePath, Enforcer: e, Policy: decide.Policy{TaintWhileStale: true}}, r.relay)
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { r.done <- r.a.Run(ctx) }()
		t.Cleanup(r.stop)
		return r, kubepods
	}

	t.Run("no state: clamped as Path B", func(t *testing.T) {
		r, kubepods := start(t, "")
		hw(r, 2, 0)
		r.settle(types.ReasonAccepted, 2)
		if got, want := readTrim(t, filepath.Join(kubepods, "cpu.weight")), weight(2); got != want {
			t.Errorf("cpu.weight %s, want %s (the kubelet's for 2 CPUs)", got, want)
		}
		if !slices.Contains(r.relay.eventReasons(), types.EventEmergencyCapacityReduced) {
			t.Errorf("events %v, want a Warning %s", r.relay.eventReasons(), types.EventEmergencyCapacityReduced)
		}
		r.relay.mu.Lock()
		first := r.relay.statuses[0]
		r.relay.mu.Unlock()
		if first.Condition.Reason != types.ReasonInProgress || !strings.Contains(first.Condition.Message, "while node-resized was not running") || !first.Taint {
			t.Errorf("first status %+v, want InProgress saying the machine shrank while the daemon was down, with the taint", first)
		}
	})
	t.Run("resumed from state: the recorded limits re-asserted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.json")
		st := decide.State{Version: decide.StateVersion, Applied: machine(2).Capacity(), Physical: machine(2).Capacity(),
			Outcome: types.ReasonAccepted, Condition: types.Condition{Status: types.StatusTrue, Reason: types.ReasonAccepted}}
		if err := SaveState(path, st); err != nil {
			t.Fatal(err)
		}
		r, kubepods := start(t, path)
		hw(r, 2, 0)
		r.settle(types.ReasonAccepted, 2)
		if got, want := readTrim(t, filepath.Join(kubepods, "cpu.weight")), weight(2); got != want {
			t.Errorf("cpu.weight %s, want the recorded clamp's %s back", got, want)
		}
		if len(r.relay.eventReasons()) != 0 {
			t.Errorf("events %v", r.relay.eventReasons())
		}
	})
}

// The hardware takes a CPU of reservedSystemCPUs: the agent gives decide
// the online CPUs and the reserved ones, and the condition names it.
func TestReservedCPUGone(t *testing.T) {
	r := &run{t: t, relay: &fakeRelay{}, done: make(chan error, 1)}
	r.a = New(Config{ReservedCPUs: []int{3}}, r.relay)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.a.Run(ctx) }()
	t.Cleanup(r.stop)
	hw(r, 4, 0)
	r.settle(types.ReasonAccepted, 4)
	hw(r, 3, 0) // CPU 3 goes
	s := r.settle(types.ReasonEmergencyReduced, 3)
	if !strings.Contains(s.Condition.Message, "reserved CPU 3") {
		t.Fatalf("message %q, want CPU 3 named", s.Condition.Message)
	}
}
