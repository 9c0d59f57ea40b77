package cases

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
	"github.com/node-resized/node-resized/topology"
)

// CPUFile is the CPU manager checkpoint's name in the kubelet's root
// directory.
const CPUFile = "cpu_manager_state"

// CPUState is the CPU manager's state as a kubelet holds it: what its
// state package is given to write, and what it loaded.
type CPUState struct {
	// Default is the shared pool (defaultCpuSet).
	Default []int
	// Containers maps pod UID → container → its exclusive CPUs.
	Containers map[string]map[string][]int
	// Pods maps pod UID → the CPUs of the pod as a whole
	// (PodLevelResourceManagers).
	Pods map[string][]int
	// Baselines maps pod UID → container → the CPUs it was admitted with
	// (v1.37, InPlacePodVerticalScalingExclusiveCPUs).
	Baselines map[string]map[string][]int
}

// CPUPolicy is the static CPU policy's configuration.
type CPUPolicy struct {
	// Reserved is reservedSystemCPUs.
	Reserved []int
	// Strict is the strict-cpu-reservation policy option.
	Strict bool
}

// CPUKubelet is one kubelet version's CPU manager, as its parity module
// wraps it.
type CPUKubelet interface {
	// WriteCPU writes st to dir/CPUFile with the kubelet's
	// state.NewCheckpointState, as a running kubelet does.
	WriteCPU(dir string, st CPUState) error
	// StartCPU loads dir/CPUFile with state.NewCheckpointState, and runs
	// the Start of the static policy built for m with p on it, as the
	// kubelet does when it starts. It returns the state as loaded, and the
	// first error.
	StartCPU(dir string, m Machine, p CPUPolicy) (CPUState, error)
}

// CPUCase is a CPU manager checkpoint on an old machine and the machine it
// changed into.
type CPUCase struct {
	Name     string
	Old, New Machine
	Policy   CPUPolicy
	// Start is the state on the old machine.
	Start CPUState
	// Dropped are the pods whose CPUs are gone (they were evicted first).
	Dropped []string
}

func one(cpus ...int) Machine { return Machine{{ID: 0, CPUs: cpus}} }

// CPUCases are the rewrites of the CPU manager's checkpoint.
func CPUCases() []CPUCase {
	return []CPUCase{
		{Name: "added", Old: one(seq(0, 3)...), New: one(seq(0, 7)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}},
				// admitted with one CPU, resized to two
				Baselines: map[string]map[string][]int{"pod-a": {"app": {1}}}}},
		{Name: "removed-unassigned", Old: one(seq(0, 7)...), New: one(seq(0, 5)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3, 4, 5, 6, 7}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}}},
		{Name: "removed-assigned", Old: one(seq(0, 7)...), New: one(seq(0, 5)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3, 4, 5},
				Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-b": {"db": {6}, "sidecar": {7}}}},
			Dropped: []string{"pod-b"}},
		{Name: "strict-added", Old: one(seq(0, 3)...), New: one(seq(0, 5)...), Policy: CPUPolicy{Reserved: []int{0}, Strict: true},
			Start: CPUState{Default: []int{3}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}}},
		{Name: "reserved-two-removed", Old: one(seq(0, 5)...), New: one(0, 1, 2, 3), Policy: CPUPolicy{Reserved: []int{0, 1}},
			Start: CPUState{Default: []int{0, 1, 4, 5}, Containers: map[string]map[string][]int{"pod-a": {"app": {2, 3}}}}},
		{Name: "numa-node-removed",
			Old:    Machine{{ID: 0, CPUs: seq(0, 3)}, {ID: 1, CPUs: seq(4, 7)}},
			New:    Machine{{ID: 0, CPUs: seq(0, 3)}},
			Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3, 6, 7},
				Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-b": {"db": {4, 5}}}},
			Dropped: []string{"pod-b"}},
		{Name: "numa-node-added",
			Old:    Machine{{ID: 0, CPUs: seq(0, 3)}},
			New:    Machine{{ID: 0, CPUs: seq(0, 3)}, {ID: 1, CPUs: seq(4, 7)}},
			Policy: CPUPolicy{Reserved: []int{0}},
			Start:  CPUState{Default: []int{0, 3}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}}},
		// Pod-level assignments (PodLevelResourceManagers): a pod holds
		// CPUs as a whole, its containers exclusive ones among them.
		{Name: "added-pod-level", Old: one(seq(0, 7)...), New: one(seq(0, 9)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3},
				Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-p": {"app": {4}, "sidecar": {5}}},
				Pods:       map[string][]int{"pod-p": {4, 5, 6, 7}}}},
		{Name: "removed-pod-level-kept", Old: one(seq(0, 7)...), New: one(seq(0, 5)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3, 5},
				Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}, "pod-b": {"db": {6, 7}}},
				Pods:       map[string][]int{"pod-c": {4}}},
			Dropped: []string{"pod-b"}},
		{Name: "removed-pod-level-dropped", Old: one(seq(0, 7)...), New: one(seq(0, 5)...), Policy: CPUPolicy{Reserved: []int{0}},
			Start: CPUState{Default: []int{0, 3, 4, 5}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}},
				Pods: map[string][]int{"pod-c": {6, 7}}},
			Dropped: []string{"pod-c"}},
	}
}

// runsOn reports whether k can hold c's state: pod-level assignments need
// PodLevelResourceManagers.
func (c CPUCase) runsOn(k Kubelet) bool { return len(c.Start.Pods) == 0 || k.PodLevel }

// start is c's starting state as k holds it: without the baselines before
// v1.37.
func (c CPUCase) start(k Kubelet) CPUState {
	st := c.Start
	if !k.Baselines {
		st.Baselines = nil
	}
	return st
}

// target is the new machine as node-resized plans for it.
func (c CPUCase) target() checkpoint.CPUTarget {
	return checkpoint.CPUTarget{Online: c.New.Online(), Reserved: topology.CPUSet(c.Policy.Reserved), StrictReservation: c.Policy.Strict}
}

// want is the state kubelet k must load from the rewrite of c's starting
// checkpoint as kubelet from wrote it: the pods not dropped keep their
// CPUs, the shared pool is the rest of the new machine's CPUs (less the
// reserved ones with strict reservation).
func (c CPUCase) want(from, k Kubelet) CPUState {
	st := c.start(from)
	out := CPUState{Containers: dropPods(st.Containers, c.Dropped), Pods: dropPods(st.Pods, c.Dropped)}
	if k.Baselines {
		out.Baselines = dropPods(st.Baselines, c.Dropped)
	}
	held := map[int]bool{}
	for _, containers := range out.Containers {
		for _, cpus := range containers {
			for _, id := range cpus {
				held[id] = true
			}
		}
	}
	for _, cpus := range out.Pods {
		for _, id := range cpus {
			held[id] = true
		}
	}
	for _, id := range c.New.CPUs() {
		if !held[id] && !(c.Policy.Strict && slices.Contains(c.Policy.Reserved, id)) {
			out.Default = append(out.Default, id)
		}
	}
	return out
}

func dropPods[V any](m map[string]V, dropped []string) map[string]V {
	if len(m) == 0 {
		return nil
	}
	out := maps.Clone(m)
	for _, uid := range dropped {
		delete(out, uid)
	}
	return out
}

// RunCPU runs every CPU case k can hold against kubelet k (kl): the
// starting checkpoint written by k's own state package, which k must
// accept on the old machine and refuse on the new one; node-resized's
// rewrite for the new machine, in the newest layout (v4) with the legacy
// fields in the layout older kubelets read; k's Start on the new machine,
// which must accept it and load the assignments kept; and the controls.
// Then the infeasible changes: node-resized must refuse to plan them and
// leave the file as it is.
func RunCPU(t *testing.T, k Kubelet, kl CPUKubelet) {
	t.Helper()
	if err := k.check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range CPUCases() {
		if !c.runsOn(k) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			writeCPUStart(t, k, kl, dir, c)
			b := rewriteCPU(t, c, dir)
			checkCPUStarts(t, k, k, kl, dir, c)
			t.Run("controls", func(t *testing.T) {
				runControls(t, k, b, CPUFile, func(dir string, m Machine) error {
					_, err := kl.StartCPU(dir, m, c.Policy)
					return err
				}, c.Old, c.New)
			})
		})
	}
	t.Run("infeasible", func(t *testing.T) { runCPUInfeasible(t, kl) })
}

// RunCPUDowngrade holds against kubelet k the rewrites of the starting
// checkpoints of the kubelets one minor version newer (testdata/, written
// by their own code): a kubelet downgraded after node-resized rewrote its
// checkpoint must start. A pod-level assignment only a kubelet with
// PodLevelResourceManagers holds must be refused by one without it, as the
// newer kubelet's own file is.
func RunCPUDowngrade(t *testing.T, k Kubelet, kl CPUKubelet) {
	t.Helper()
	if err := k.check(); err != nil {
		t.Fatal(err)
	}
	newer := k.Newer()
	if len(newer) == 0 {
		t.Fatalf("%s: no newer kubelet to downgrade from", k)
	}
	for _, from := range newer {
		t.Run("from "+from.String(), func(t *testing.T) {
			for _, c := range CPUCases() {
				if !c.runsOn(from) {
					continue
				}
				t.Run(c.Name, func(t *testing.T) {
					dir := t.TempDir()
					b := readStarting(t, from, CPUFile, c.Name)
					if st, err := checkpoint.ParseCPUManager(b); err != nil || st.Format != from.CPUWrites() {
						t.Fatalf("testdata of %s: layout %q, %v; want %s", from, st.Format, err, from.CPUWrites())
					}
					if err := os.WriteFile(filepath.Join(dir, CPUFile), b, 0o644); err != nil {
						t.Fatal(err)
					}
					// What the downgrade would meet without the rewrite, for
					// the log: the newer kubelet's own file on the old machine.
					if _, err := kl.StartCPU(dir, c.Old, c.Policy); err != nil {
						t.Logf("%s refuses the file %s wrote, on the machine it was written for: %v", k, from, err)
					}
					if after, err := os.ReadFile(filepath.Join(dir, CPUFile)); err != nil || string(after) != string(b) {
						t.Fatalf("%s changed the file it started on (%v)", k, err)
					}
					rewriteCPU(t, c, dir)
					if want := c.want(from, k); len(want.Pods) > 0 && !k.PodLevel {
						_, err := kl.StartCPU(dir, c.New, c.Policy)
						if err == nil {
							t.Fatalf("%s started on pod-level CPUs it cannot hold", k)
						}
						t.Logf("%s cannot hold pod-level CPUs, and refuses: %v", k, err)
						return
					}
					checkCPUStarts(t, from, k, kl, dir, c)
				})
			}
		})
	}
}

// writeCPUStart writes c's starting checkpoint with k's own state package,
// and checks its layout and that k takes it on the old machine only.
func writeCPUStart(t *testing.T, k Kubelet, kl CPUKubelet, dir string, c CPUCase) {
	t.Helper()
	start := c.start(k)
	if err := kl.WriteCPU(dir, start); err != nil {
		t.Fatalf("%s writes the starting checkpoint: %v", k, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CPUFile))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := checkpoint.ParseCPUManager(b); err != nil || st.Format != k.CPUWrites() {
		t.Fatalf("%s wrote layout %q (%v), want %s", k, st.Format, err, k.CPUWrites())
	}
	got, err := kl.StartCPU(dir, c.Old, c.Policy)
	if err != nil {
		t.Fatalf("%s refuses its starting checkpoint on the old machine: %v", k, err)
	}
	if d := diffCPU(caseBaselines(got, start), start); d != "" {
		t.Fatalf("%s loads its starting checkpoint as %s", k, d)
	}
	if _, err := kl.StartCPU(dir, c.New, c.Policy); err == nil {
		t.Fatalf("%s accepts the old checkpoint on the new machine: the case shows nothing", k)
	}
}

// rewriteCPU plans and applies node-resized's rewrite of dir/CPUFile for
// c's new machine, checks what it dropped and the layouts it wrote, and
// returns the file written.
func rewriteCPU(t *testing.T, c CPUCase, dir string) []byte {
	t.Helper()
	path := filepath.Join(dir, CPUFile)
	plan, err := checkpoint.PlanCPUManager(path, c.target())
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if !slices.Equal(plan.Dropped, c.Dropped) {
		t.Errorf("dropped %v, want %v", plan.Dropped, c.Dropped)
	}
	if err := plan.Apply(); err != nil {
		t.Fatalf("apply: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + checkpoint.BackupSuffix); err != nil {
		t.Errorf("no backup: %v", err)
	}
	st, err := checkpoint.ParseCPUManager(b)
	if err != nil || st.Format != checkpoint.CPUManagerV4 {
		t.Fatalf("the rewrite is in layout %q (%v), want %s", st.Format, err, checkpoint.CPUManagerV4)
	}
	// The legacy fields: v2, which every kubelet before v1.37 reads, or v3
	// when a pod holds pod-level CPUs, which only v3 holds and v1.36 with
	// PodLevelResourceManagers reads.
	want := checkpoint.CPUManagerV2
	if len(st.Pods) > 0 {
		want = checkpoint.CPUManagerV3
	}
	if got, err := legacyLayout(b, cpuFormat); err != nil || got != want {
		t.Errorf("the rewrite's legacy fields are in layout %q (%v), want %s", got, err, want)
	}
	return b
}

// checkCPUStarts starts kubelet k on c's rewritten checkpoint in dir (its
// starting checkpoint written by kubelet from) on the new machine: it must
// accept it and load the state c wants.
func checkCPUStarts(t *testing.T, from, k Kubelet, kl CPUKubelet, dir string, c CPUCase) {
	t.Helper()
	got, err := kl.StartCPU(dir, c.New, c.Policy)
	if err != nil {
		t.Fatalf("%s refuses the rewritten checkpoint: %v", k, err)
	}
	want := c.want(from, k)
	if d := diffCPU(caseBaselines(got, want), want); d != "" {
		t.Errorf("%s loads the rewrite as %s", k, d)
	}
}

// caseBaselines returns got with only the baselines of the pods want has
// baselines for: a kubelet that keeps baselines has one for every
// container, its CPUs as first assigned unless the case says otherwise.
func caseBaselines(got, want CPUState) CPUState {
	out := got
	out.Baselines = nil
	for uid := range want.Baselines {
		if b, ok := got.Baselines[uid]; ok {
			if out.Baselines == nil {
				out.Baselines = map[string]map[string][]int{}
			}
			out.Baselines[uid] = b
		}
	}
	return out
}

// diffCPU describes how got differs from want, "" when it does not. Empty
// and absent maps are the same.
func diffCPU(got, want CPUState) string {
	if !slices.Equal(got.Default, want.Default) {
		return fmt.Sprintf("shared pool %v, want %v", got.Default, want.Default)
	}
	if !equalNested(got.Containers, want.Containers) {
		return fmt.Sprintf("containers %v, want %v", got.Containers, want.Containers)
	}
	if !equalFlat(got.Pods, want.Pods) {
		return fmt.Sprintf("pod-level CPUs %v, want %v", got.Pods, want.Pods)
	}
	if !equalNested(got.Baselines, want.Baselines) {
		return fmt.Sprintf("baselines %v, want %v", got.Baselines, want.Baselines)
	}
	return ""
}

func equalFlat(a, b map[string][]int) bool {
	return len(a) == len(b) && maps.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

func equalNested(a, b map[string]map[string][]int) bool {
	return len(a) == len(b) && maps.EqualFunc(a, b, equalFlat)
}

// runCPUInfeasible: a reserved CPU that goes offline, or a shared pool
// that would be empty, is refused rather than written.
func runCPUInfeasible(t *testing.T, kl CPUKubelet) {
	dir := t.TempDir()
	st := CPUState{Default: []int{0, 3}, Containers: map[string]map[string][]int{"pod-a": {"app": {1, 2}}}}
	if err := kl.WriteCPU(dir, st); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, CPUFile)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []checkpoint.CPUTarget{
		{Online: topology.CPUSet{0, 1, 2}, Reserved: topology.CPUSet{0, 3}},
		{Online: topology.CPUSet{0, 1, 2, 3}, Reserved: topology.CPUSet{0, 3}, StrictReservation: true},
	} {
		p, err := checkpoint.PlanCPUManager(path, target)
		if !errors.Is(err, checkpoint.ErrInfeasible) {
			t.Errorf("%+v: plan %+v, err %v; want ErrInfeasible", target, p, err)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the checkpoint changed")
	}
}
