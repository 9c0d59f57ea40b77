package cases

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// MemoryFile is the memory manager checkpoint's name in the kubelet's root
// directory.
const MemoryFile = "memory_manager_state"

// The memory manager's state, with the JSON names of the kubelet's own
// types (state.MemoryTable, state.NUMANodeState, state.Block), through
// which a version module converts them.
type (
	// MemoryTable is one memory type of one NUMA node, in bytes.
	MemoryTable struct {
		TotalMemSize   uint64 `json:"total"`
		SystemReserved uint64 `json:"systemReserved"`
		Allocatable    uint64 `json:"allocatable"`
		Reserved       uint64 `json:"reserved"`
		Free           uint64 `json:"free"`
	}
	// NUMANodeState is one NUMA node of the machine state.
	NUMANodeState struct {
		NumberOfAssignments int                     `json:"numberOfAssignments"`
		MemoryMap           map[string]*MemoryTable `json:"memoryMap"`
		Cells               []int                   `json:"cells"`
	}
	// Block is memory of one type assigned on a set of NUMA nodes.
	Block struct {
		NUMAAffinity []int  `json:"numaAffinity"`
		Type         string `json:"type"`
		Size         uint64 `json:"size"`
	}
)

// MemoryState is the memory manager's state as a kubelet holds it.
type MemoryState struct {
	// Machine maps NUMA node → its memory as the kubelet accounts for it.
	Machine map[int]*NUMANodeState
	// Containers maps pod UID → container → its memory blocks.
	Containers map[string]map[string][]Block
	// Pods maps pod UID → the pod's own blocks (PodLevelResourceManagers).
	Pods map[string][]Block
}

// MemoryKubelet is one kubelet version's memory manager, as its parity
// module wraps it.
type MemoryKubelet interface {
	// WriteMemory writes st to dir/MemoryFile with the kubelet's
	// state.NewCheckpointState, as a running kubelet does.
	WriteMemory(dir string, st MemoryState) error
	// StartMemory loads dir/MemoryFile with state.NewCheckpointState and
	// runs the Start of the Static policy built for m with reserved (NUMA
	// node → resource → bytes, every node of m present) on it. On an
	// empty dir that writes the policy's own machine state for m.
	StartMemory(dir string, m Machine, reserved map[int]map[string]uint64) (MemoryState, error)
}

// MemoryCase is a memory manager checkpoint on an old machine and the
// machine it changed into.
type MemoryCase struct {
	Name     string
	Old, New Machine
	// Reserved is the kubelet's reservedMemory.
	Reserved map[int]map[string]uint64
	// Containers and Pods are the assignments on the old machine.
	Containers map[string]map[string][]Block
	Pods       map[string][]Block
	Dropped    []string
	// Infeasible: no checkpoint fits the new machine, the plan must refuse.
	Infeasible bool
}

// memMachine has NUMA nodes 0 and 1, and 2 when mem2 is not 0, of one CPU
// each; node 0 has huge0 2 MiB pages.
func memMachine(mem0, mem1, mem2 uint64, huge0 uint64) Machine {
	m := Machine{
		{ID: 0, CPUs: []int{0}, Mem: mem0, Huge: map[uint64]uint64{2 * MiB: huge0, GiB: 0}},
		{ID: 1, CPUs: []int{1}, Mem: mem1, Huge: map[uint64]uint64{2 * MiB: 0, GiB: 0}},
	}
	if mem2 > 0 {
		m = append(m, Node{ID: 2, CPUs: []int{2}, Mem: mem2, Huge: map[uint64]uint64{2 * MiB: 0, GiB: 0}})
	}
	return m
}

// MemoryCases are the rewrites of the memory manager's checkpoint.
func MemoryCases() []MemoryCase {
	reserved := map[int]map[string]uint64{0: {"memory": 512 * MiB}, 1: {"memory": 256 * MiB}}
	podA := map[string][]Block{"app": {{NUMAAffinity: []int{0}, Type: "memory", Size: GiB},
		{NUMAAffinity: []int{0}, Type: "hugepages-2Mi", Size: 256 * MiB}}}
	podB := map[string][]Block{"db": {{NUMAAffinity: []int{1, 2}, Type: "memory", Size: 5 * GiB}}}
	both := map[string]map[string][]Block{"pod-a": podA, "pod-b": podB}
	// pod-p holds 3 GiB on node 1 as a whole (PodLevelResourceManagers):
	// 1 GiB exclusive to app, the rest the pod's shared pool, which its
	// other containers are assigned; the kubelet accounts the pod's
	// blocks, not its containers'.
	podP := map[string][]Block{
		"app":     {{NUMAAffinity: []int{1}, Type: "memory", Size: GiB}},
		"sidecar": {{NUMAAffinity: []int{1}, Type: "memory", Size: 2 * GiB}},
		"log":     {{NUMAAffinity: []int{1}, Type: "memory", Size: 2 * GiB}},
	}
	podPBlocks := []Block{{NUMAAffinity: []int{1}, Type: "memory", Size: 3 * GiB}}
	podQ := map[string][]Block{"app": {{NUMAAffinity: []int{2}, Type: "memory", Size: GiB}}}
	podQBlocks := []Block{{NUMAAffinity: []int{2}, Type: "memory", Size: GiB}}
	return []MemoryCase{
		{Name: "grown", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(4*GiB, 6*GiB, 4*GiB, 512),
			Reserved: reserved, Containers: both},
		{Name: "shrunk-still-fits", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(3*GiB, 3*GiB, 4*GiB, 512),
			Reserved: reserved, Containers: both},
		{Name: "hugepages-added", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(4*GiB, 4*GiB, 4*GiB, 1024),
			Reserved: reserved, Containers: both},
		{Name: "node-removed", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(4*GiB, 4*GiB, 0, 512),
			Reserved: reserved, Containers: both, Dropped: []string{"pod-b"}},
		{Name: "node-added", Old: memMachine(4*GiB, 4*GiB, 0, 512), New: memMachine(4*GiB, 4*GiB, 2*GiB, 512),
			Reserved: reserved, Containers: map[string]map[string][]Block{"pod-a": podA}},
		{Name: "shrunk-below-assigned", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(1536*MiB, 4*GiB, 4*GiB, 512),
			Reserved: reserved, Containers: both, Infeasible: true},
		{Name: "shrunk-below-reserved", Old: memMachine(4*GiB, 4*GiB, 4*GiB, 512), New: memMachine(4*GiB, 128*MiB, 4*GiB, 512),
			Reserved: reserved, Containers: map[string]map[string][]Block{"pod-a": podA}, Infeasible: true},
		{Name: "grown-pod-level", Old: memMachine(4*GiB, 4*GiB, 0, 512), New: memMachine(4*GiB, 6*GiB, 0, 512),
			Reserved: reserved, Containers: map[string]map[string][]Block{"pod-a": podA, "pod-p": podP},
			Pods: map[string][]Block{"pod-p": podPBlocks}},
		{Name: "node-removed-pod-level", Old: memMachine(4*GiB, 4*GiB, 2*GiB, 512), New: memMachine(4*GiB, 4*GiB, 0, 512),
			Reserved: reserved, Containers: map[string]map[string][]Block{"pod-a": podA, "pod-p": podP, "pod-q": podQ},
			Pods: map[string][]Block{"pod-p": podPBlocks, "pod-q": podQBlocks}, Dropped: []string{"pod-q"}},
	}
}

func (c MemoryCase) runsOn(k Kubelet) bool { return len(c.Pods) == 0 || k.PodLevel }

// reserved is the Static policy's reservation table for m: every node of
// m, as the kubelet's convertReserved builds it.
func (c MemoryCase) reserved(m Machine) map[int]map[string]uint64 {
	out := map[int]map[string]uint64{}
	for _, n := range m {
		out[n.ID] = maps.Clone(c.Reserved[n.ID])
		if out[n.ID] == nil {
			out[n.ID] = map[string]uint64{}
		}
	}
	return out
}

// RunMemory runs every memory case k can hold against kubelet k (kl), as
// RunCPU does for the CPU manager: the starting checkpoint by k's own code,
// accepted on the old machine and refused on the new one; node-resized's
// rewrite in the newest layout (v3) with the legacy fields older kubelets
// read; k's Start on the new machine; the controls. A change no checkpoint
// fits must be refused by the plan, the file left as it is.
func RunMemory(t *testing.T, k Kubelet, kl MemoryKubelet) {
	t.Helper()
	if err := k.check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range MemoryCases() {
		if !c.runsOn(k) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			writeMemoryStart(t, k, kl, dir, c)
			if c.Infeasible {
				path := filepath.Join(dir, MemoryFile)
				before, _ := os.ReadFile(path)
				if _, err := checkpoint.PlanMemoryManager(path, c.New.Model(), c.Reserved); !errors.Is(err, checkpoint.ErrInfeasible) {
					t.Fatalf("plan: %v, want ErrInfeasible", err)
				}
				if after, _ := os.ReadFile(path); string(after) != string(before) {
					t.Error("the checkpoint changed")
				}
				return
			}
			b := rewriteMemory(t, c, dir)
			checkMemoryStarts(t, k, kl, dir, c)
			t.Run("controls", func(t *testing.T) {
				runControls(t, k, b, MemoryFile, func(dir string, m Machine) error {
					_, err := kl.StartMemory(dir, m, c.reserved(m))
					return err
				}, c.Old, c.New)
			})
		})
	}
}

// RunMemoryDowngrade is RunCPUDowngrade for the memory manager.
func RunMemoryDowngrade(t *testing.T, k Kubelet, kl MemoryKubelet) {
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
			for _, c := range MemoryCases() {
				if !c.runsOn(from) || c.Infeasible {
					continue
				}
				t.Run(c.Name, func(t *testing.T) {
					dir := t.TempDir()
					b := readStarting(t, from, MemoryFile, c.Name)
					if st, err := checkpoint.ParseMemoryManager(b); err != nil || st.Format != from.MemoryWrites() {
						t.Fatalf("testdata of %s: layout %q, %v; want %s", from, st.Format, err, from.MemoryWrites())
					}
					if err := os.WriteFile(filepath.Join(dir, MemoryFile), b, 0o644); err != nil {
						t.Fatal(err)
					}
					// What the downgrade would meet without the rewrite, for
					// the log: the newer kubelet's own file on the old machine.
					if _, err := kl.StartMemory(dir, c.Old, c.reserved(c.Old)); err != nil {
						t.Logf("%s refuses the file %s wrote, on the machine it was written for: %v", k, from, err)
					}
					if after, err := os.ReadFile(filepath.Join(dir, MemoryFile)); err != nil || string(after) != string(b) {
						t.Fatalf("%s changed the file it started on (%v)", k, err)
					}
					rewriteMemory(t, c, dir)
					if len(dropPods(c.Pods, c.Dropped)) > 0 && !k.PodLevel {
						_, err := kl.StartMemory(dir, c.New, c.reserved(c.New))
						if err == nil {
							t.Fatalf("%s started on pod-level memory it cannot hold", k)
						}
						t.Logf("%s cannot hold pod-level memory, and refuses: %v", k, err)
						return
					}
					checkMemoryStarts(t, k, kl, dir, c)
				})
			}
		})
	}
}

// writeMemoryStart writes c's starting checkpoint with k's own code: the
// Static policy's own machine state for the old machine (its Start on no
// checkpoint), then the assignments, accounted on it as the policy
// accounts them. k must accept it on the old machine, and refuse it on the
// new one.
func writeMemoryStart(t *testing.T, k Kubelet, kl MemoryKubelet, dir string, c MemoryCase) {
	t.Helper()
	empty, err := kl.StartMemory(dir, c.Old, c.reserved(c.Old))
	if err != nil {
		t.Fatalf("%s on no checkpoint: %v", k, err)
	}
	start := MemoryState{Machine: empty.Machine, Containers: c.Containers, Pods: c.Pods}
	account(start, k.PodLevel)
	if err := kl.WriteMemory(dir, start); err != nil {
		t.Fatalf("%s writes the starting checkpoint: %v", k, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := checkpoint.ParseMemoryManager(b); err != nil || st.Format != k.MemoryWrites() {
		t.Fatalf("%s wrote layout %q (%v), want %s", k, st.Format, err, k.MemoryWrites())
	}
	got, err := kl.StartMemory(dir, c.Old, c.reserved(c.Old))
	if err != nil {
		t.Fatalf("%s refuses its starting checkpoint on the old machine: %v", k, err)
	}
	if d := diffMemory(got, start); d != "" {
		t.Fatalf("%s loads its starting checkpoint as %s", k, d)
	}
	if _, err := kl.StartMemory(dir, c.New, c.reserved(c.New)); err == nil {
		t.Fatalf("%s accepts the old checkpoint on the new machine: the case shows nothing", k)
	}
}

// account reserves st's assignments on its machine state as the Static
// policy's validateState does: a pod's own blocks when it has them (and
// the kubelet holds them: podLevel), else its containers'.
func account(st MemoryState, podLevel bool) {
	for _, uid := range slices.Sorted(maps.Keys(st.Containers)) {
		if blocks := st.Pods[uid]; podLevel && len(blocks) > 0 {
			accountBlocks(st.Machine, blocks)
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(st.Containers[uid])) {
			accountBlocks(st.Machine, st.Containers[uid][name])
		}
	}
}

func accountBlocks(ms map[int]*NUMANodeState, blocks []Block) {
	for _, b := range blocks {
		left := b.Size
		for _, id := range b.NUMAAffinity {
			n := ms[id]
			n.NumberOfAssignments++
			n.Cells = b.NUMAAffinity
			t := n.MemoryMap[b.Type]
			take := min(left, t.Free)
			t.Reserved += take
			t.Free -= take
			left -= take
		}
	}
}

// rewriteMemory plans and applies node-resized's rewrite of dir/MemoryFile
// for c's new machine, checks what it dropped and the layouts it wrote, and
// returns the file written.
func rewriteMemory(t *testing.T, c MemoryCase, dir string) []byte {
	t.Helper()
	path := filepath.Join(dir, MemoryFile)
	plan, err := checkpoint.PlanMemoryManager(path, c.New.Model(), c.Reserved)
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
	st, err := checkpoint.ParseMemoryManager(b)
	if err != nil || st.Format != checkpoint.MemoryManagerV3 {
		t.Fatalf("the rewrite is in layout %q (%v), want %s", st.Format, err, checkpoint.MemoryManagerV3)
	}
	// The legacy fields: v1, which every kubelet before v1.37 reads, or v2
	// when a pod holds pod-level memory, which only v2 holds and v1.36 with
	// PodLevelResourceManagers reads.
	want := checkpoint.MemoryManagerV1
	if len(st.Pods) > 0 {
		want = checkpoint.MemoryManagerV2
	}
	if got, err := legacyLayout(b, memoryFormat); err != nil || got != want {
		t.Errorf("the rewrite's legacy fields are in layout %q (%v), want %s", got, err, want)
	}
	return b
}

// checkMemoryStarts starts kubelet k on c's rewritten checkpoint in dir on
// the new machine: it must accept it (its validateState recomputes the
// machine state from the assignments and compares) and load the
// assignments not dropped.
func checkMemoryStarts(t *testing.T, k Kubelet, kl MemoryKubelet, dir string, c MemoryCase) {
	t.Helper()
	got, err := kl.StartMemory(dir, c.New, c.reserved(c.New))
	if err != nil {
		t.Fatalf("%s refuses the rewritten checkpoint: %v", k, err)
	}
	want := MemoryState{Machine: got.Machine, Containers: dropPods(c.Containers, c.Dropped)}
	if k.PodLevel {
		want.Pods = dropPods(c.Pods, c.Dropped)
	}
	if d := diffMemory(got, want); d != "" {
		t.Errorf("%s loads the rewrite as %s", k, d)
	}
}

// diffMemory describes how got differs from want, "" when it does not.
// Empty and absent maps are the same.
func diffMemory(got, want MemoryState) string {
	if !reflect.DeepEqual(got.Machine, want.Machine) {
		return fmt.Sprintf("machine state %s, want %s", dumpJSON(got.Machine), dumpJSON(want.Machine))
	}
	if len(got.Containers) != len(want.Containers) || !maps.EqualFunc(got.Containers, want.Containers, func(a, b map[string][]Block) bool {
		return len(a) == len(b) && maps.EqualFunc(a, b, equalBlocks)
	}) {
		return fmt.Sprintf("containers %v, want %v", got.Containers, want.Containers)
	}
	if len(got.Pods) != len(want.Pods) || !maps.EqualFunc(got.Pods, want.Pods, equalBlocks) {
		return fmt.Sprintf("pod-level memory %v, want %v", got.Pods, want.Pods)
	}
	return ""
}

func equalBlocks(a, b []Block) bool {
	return slices.EqualFunc(a, b, func(x, y Block) bool {
		return x.Type == y.Type && x.Size == y.Size && slices.Equal(x.NUMAAffinity, y.NUMAAffinity)
	})
}
