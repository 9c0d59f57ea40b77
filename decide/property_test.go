package decide

import (
	"github.com/node-resized/node-resized/types"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// randomInput draws an input from a space wide enough to include garbage:
// zero and negative hardware, malformed and oversized specs, unknown names,
// swap, odd reservations, kubelet views, eviction reports, and a previous
// state that is either real (from a chain of passes) or made up.
func randomInput(rng *rand.Rand, prev State) Input {
	pick := func(xs ...int64) int64 { return xs[rng.Intn(len(xs))] }
	values := []string{"0", "-1", "lots", "1", "2", "4", "8", "100m", "1500m", "512Mi", "1Gi", "2Gi", "8Gi",
		"16Gi", "32Gi", "50G", "200G", "1E30", "0.5", "1e3", ""}
	keys := []string{"cpu", "memory", "hugepages-2Mi", "hugepages-1Gi", "hugepages-2048Ki", "hugepages-x",
		"ephemeral-storage", "pods", "example.com/foo"}

	p := Physical{
		Capacity: resources.List{
			resources.CPU:    pick(0, 1, 2, 4, 8, 16, -1) * 1000,
			resources.Memory: pick(0, 512*Mi, 2*Gi, 8*Gi, 16*Gi, 32*Gi) + int64(rng.Intn(256))*Mi,
			"hugepages-2Mi":  pick(0, Gi, 4*Gi),
			"hugepages-1Gi":  pick(0, Gi),
		},
		SwapActive: rng.Intn(6) == 0,
	}
	if v := pick(0, 32768, 4194304); v > 0 {
		p.Capacity[resources.PID] = v
	}
	if rng.Intn(4) > 0 {
		p.Capacity[resources.EphemeralStorage] = pick(10_000_000_000, 100_000_000_000)
	}
	var c types.Configured
	if rng.Intn(4) > 0 {
		c = types.Configured{Present: true, Raw: map[string]string{}}
		for i := rng.Intn(4); i > 0; i-- {
			c.Raw[keys[rng.Intn(len(keys))]] = values[rng.Intn(len(values))]
		}
	}
	r := Reservations{
		SystemReserved: resources.List{"cpu": pick(0, 100, 500), "memory": pick(0, 256*Mi, Gi)},
		KubeReserved:   resources.List{"cpu": pick(0, 100), "memory": pick(0, 256*Mi), "ephemeral-storage": pick(0, 1_000_000_000)},
	}
	switch rng.Intn(3) {
	case 0:
		r.MemoryAvailable = Threshold{Quantity: 100 * Mi}
	case 1:
		r.MemoryAvailable = Threshold{Percentage: float32(5) / 100}
	}
	if rng.Intn(2) == 0 {
		r.NodeFsAvailable = Threshold{Percentage: float32(10) / 100}
	}
	r.PodsNotEnforced = rng.Intn(5) == 0

	in := Input{
		Physical:     p,
		Configured:   c,
		Reservations: r,
		JitterMemory: pick(0, 0, Mi, 100*Mi),
		Previous:     prev,
		Now:          t0.Add(time.Duration(rng.Intn(3600)) * time.Second),
		Policy:       Policy{SettleDelay: time.Duration(pick(0, 1, 60)) * time.Second, TaintWhileStale: rng.Intn(2) == 0},
	}
	if rng.Intn(3) == 0 {
		in.Enforced = CgroupLimits{MemoryMax: pick(0, 4*Gi, 16*Gi, 64*Gi), CPUWeight: uint64(pick(0, 1, 39, 157, 10000, 20000))}
	}
	if g := prev.Generation; g > 0 && rng.Intn(2) == 0 {
		in.Eviction = types.EvictionReport{Generation: g - int64(rng.Intn(2)), Done: rng.Intn(2) == 0}
		if !in.Eviction.Done && rng.Intn(2) == 0 {
			in.Eviction.Blocked = "PodDisruptionBudget"
		}
	}
	if rng.Intn(2) == 0 {
		in.Kubelet = Kubelet{
			Known:          true,
			Ready:          rng.Intn(4) > 0,
			RestartAllowed: rng.Intn(3) > 0,
			Capacity:       resources.List{"cpu": pick(1000, 4000, 8000), "memory": pick(8*Gi, 16*Gi)},
		}
	}
	return in
}

// madeUpState is a previous state that no pass produced.
func madeUpState(rng *rand.Rand) State {
	reasons := []types.Reason{"", types.ReasonAccepted, types.ReasonInProgress, types.ReasonInfeasible, types.ReasonEmergencyReduced}
	s := State{
		Outcome:    reasons[rng.Intn(len(reasons))],
		Condition:  types.Condition{Reason: reasons[rng.Intn(len(reasons))], Status: types.StatusFalse},
		Applied:    resources.List{"cpu": int64(rng.Intn(16000)), "memory": int64(rng.Intn(64)) * Gi, "hugepages-1Gi": int64(rng.Intn(3)) * Gi},
		Physical:   resources.List{"memory": int64(rng.Intn(32)) * Gi},
		Generation: int64(rng.Intn(5)),
		Evicting:   rng.Intn(2) == 0,
		RestartAt:  t0.Add(-time.Duration(rng.Intn(1200)) * time.Second),
	}
	s.RestartPending = rng.Intn(2) == 0
	if rng.Intn(3) == 0 {
		s.Spec = `{"memory":"16Gi"}`
		s.EmergencySpec = s.Spec
		s.EmergencyTarget = resources.List{"memory": int64(rng.Intn(32)) * Gi}
	}
	if rng.Intn(4) == 0 {
		s.Applied = nil
	}
	return s
}

// TestProperties: for random inputs, every decision keeps the target within
// the physical capacity, allocatable within the target, never actuates with
// Infeasible, never acts on a nonsense reading, and is idempotent.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var prev State
	cases := 20000
	if testing.Short() {
		cases = 2000
	}
	for i := 0; i < cases; i++ {
		if rng.Intn(10) == 0 {
			prev = madeUpState(rng)
		}
		in := randomInput(rng, prev)
		d := Decide(in)
		checkInvariants(t, in, d)

		in.Previous = d.Next
		again := Decide(in)
		if len(again.Actions) != 0 {
			t.Fatalf("case %d: not idempotent: %v then %v\ninput %+v", i, kinds(d.Actions), kinds(again.Actions), in)
		}
		prev = d.Next
		if rng.Intn(50) == 0 {
			prev = State{}
		}
	}
}

// TestRestartVerdictOnlyWhereConsidered: whether a pass considers the
// restart verdict does not depend on the verdict, and a pass that does not
// consider it decides the same whatever it says. The agent relies on it to
// read the kubelet's checkpoints only for a decision that needs them, after
// a clamp.
func TestRestartVerdictOnlyWhereConsidered(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var prev State
	cases, considered := 10000, 0
	if testing.Short() {
		cases = 1000
	}
	for i := 0; i < cases; i++ {
		if rng.Intn(10) == 0 {
			prev = madeUpState(rng)
		}
		in := randomInput(rng, prev)
		blocked, allowed := in, in
		blocked.Kubelet.RestartAllowed, blocked.Kubelet.RestartBlocked = false, "its checkpoint cannot be made safe"
		allowed.Kubelet.RestartAllowed, allowed.Kubelet.RestartBlocked = true, ""
		b, a := Decide(blocked), Decide(allowed)
		if a.RestartConsidered != b.RestartConsidered {
			t.Fatalf("case %d: RestartConsidered %v when allowed, %v when blocked\ninput %+v", i, a.RestartConsidered, b.RestartConsidered, in)
		}
		if a.RestartConsidered {
			considered++
		} else if !reflect.DeepEqual(a, b) {
			t.Fatalf("case %d: the verdict was not considered, yet changed the decision:\nallowed %+v\nblocked %+v\ninput %+v", i, a, b, in)
		}
		prev = a.Next
		if rng.Intn(50) == 0 {
			prev = State{}
		}
	}
	if considered == 0 {
		t.Fatal("no case considered the verdict: the inputs do not reach the kubelet step")
	}
	t.Logf("%d of %d cases considered the verdict", considered, cases)
}

// FuzzDecide checks the same properties on fuzzed inputs.
func FuzzDecide(f *testing.F) {
	f.Add(int64(4), int64(16*Gi), true, "cpu", "8", "memory", "16Gi", int64(1), false)
	f.Add(int64(8), int64(8*Gi), false, "memory", "0", "x", "y", int64(7), true)
	f.Fuzz(func(t *testing.T, cpus, mem int64, present bool, k1, v1, k2, v2 string, seed int64, swap bool) {
		rng := rand.New(rand.NewSource(seed))
		in := randomInput(rng, madeUpState(rng))
		in.Physical.Capacity[resources.CPU], in.Physical.Capacity[resources.Memory], in.Physical.SwapActive = satMul(cpus, 1000), mem, swap
		in.Configured = types.Configured{Present: present, Raw: map[string]string{k1: v1, k2: v2}}
		d := Decide(in)
		checkInvariants(t, in, d)
		in.Previous = d.Next
		if again := Decide(in); len(again.Actions) != 0 {
			t.Fatalf("not idempotent: %v then %v", kinds(d.Actions), kinds(again.Actions))
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	in := Input{
		Physical:     machine(64, 256*Gi),
		Configured:   spec("cpu", "48", "memory", "192Gi", "hugepages-2Mi", "0"),
		Reservations: testReservations(),
		Now:          t0,
	}
	in.Previous = Decide(in).Next
	b.ReportAllocs()
	for b.Loop() {
		Decide(in)
	}
}
