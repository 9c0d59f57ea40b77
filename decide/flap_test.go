package decide

import (
	"fmt"
	"github.com/node-resized/node-resized/types"
	"math/rand"
	"testing"
	"time"

	"github.com/node-resized/node-resized/resources"
)

// TestFlapping drives hardware and spec up and down at random (seeded) and
// checks that every step is idempotent, that the node settles, that the
// settled state is the right one, and that a fresh spec value always brings
// the node back to Accepted: no deadlock, no duplicate work.
func TestFlapping(t *testing.T) {
	cpus := []int64{2, 4, 6, 8}
	mems := []int64{4 * Gi, 8 * Gi, 12 * Gi, 16 * Gi}
	specs := []types.Configured{
		{},
		spec(),
		spec("cpu", "2"),
		spec("cpu", "4"),
		spec("cpu", "8"),
		spec("memory", "8Gi"),
		spec("memory", "16Gi"),
		spec("cpu", "4", "memory", "8Gi"),
		spec("cpu", "8", "memory", "16Gi"),
		spec("cpu", "0"),
		spec("memory", "lots"),
		spec("memory", "100Mi"),
	}
	seenReasons := map[types.Reason]int{}
	seenKinds := map[ActionKind]int{}
	defer func() {
		for _, r := range []types.Reason{types.ReasonAccepted, types.ReasonInProgress, types.ReasonInfeasible, types.ReasonEmergencyReduced} {
			if seenReasons[r] == 0 {
				t.Errorf("the random walk never reached %s", r)
			}
		}
		for _, k := range []ActionKind{KindClampCgroups, KindGrowCgroups, KindPatchNodeStatus, KindEmitEvent, KindEvict, KindRestartKubelet} {
			if seenKinds[k] == 0 {
				t.Errorf("the random walk never produced %s", k)
			}
		}
		t.Logf("conditions %v, actions %v", seenReasons, seenKinds)
	}()
	seeds := int64(40)
	if testing.Short() {
		seeds = 8
	}
	for seed := int64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			n := newNode(t, machine(8, 16*Gi), types.Configured{})
			if seed%2 == 0 {
				n.in.Kubelet = Kubelet{Known: true, Ready: true, RestartAllowed: true, Capacity: resources.List{"cpu": 8000, "memory": 16 * Gi}}
			}
			n.step(nil)
			for i := 0; i < 300; i++ {
				d := n.step(func(in *Input) {
					in.Now = in.Now.Add(time.Duration(rng.Intn(90)) * time.Second)
					switch rng.Intn(7) {
					case 0:
						in.Physical = in.Physical.with(resources.CPU, (cpus[rng.Intn(len(cpus))])*1000)
					case 1:
						in.Physical = in.Physical.with(resources.Memory, mems[rng.Intn(len(mems))]+int64(rng.Intn(64))*Mi-32*Mi)
					case 2, 3:
						in.Configured = specs[rng.Intn(len(specs))]
					case 4:
						in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Done: true}
					case 5:
						in.Eviction = types.EvictionReport{Generation: in.Previous.Generation, Blocked: "PodDisruptionBudget"}
					case 6:
						// A kubelet that restarted reads the machine.
						if in.Kubelet.Known {
							in.Kubelet.Capacity = resources.List{"cpu": in.Physical.Capacity[resources.CPU], "memory": in.Physical.Capacity[resources.Memory]}
						}
					}
				})
				seenReasons[d.Condition.Reason]++
				for _, a := range d.Actions {
					seenKinds[a.Kind()]++
				}
			}

			// Final hardware; let everything settle.
			n.step(func(in *Input) {
				in.Physical = machine(8, 16*Gi)
				in.Now = in.Now.Add(time.Hour)
			})
			d := n.settle()
			checkSettled(t, n, d)

			// A fresh spec value within the hardware is always Accepted.
			n.step(func(in *Input) { in.Configured = spec("cpu", "6", "memory", "12Gi") })
			d = n.settle()
			if d.Condition.Reason != types.ReasonAccepted && d.Condition.Reason != types.ReasonInProgress {
				t.Fatalf("fresh spec: %s (%s)", d.Condition.Reason, d.Condition.Message)
			}
			if d.Target[resources.CPU] != 6000 || d.Target[resources.Memory] != 12*Gi {
				t.Fatalf("fresh spec: target %v", d.Target)
			}
			// And with no spec the node follows its hardware.
			n.step(func(in *Input) { in.Configured = types.Configured{} })
			d = n.settle()
			// (memory within the jitter tolerance of the last reading)
			if d.Target[resources.CPU] != 8000 || d.Target[resources.Memory] != d.Physical[resources.Memory] ||
				absDiff(d.Physical[resources.Memory], 16*Gi) >= DefaultJitterMemory {
				t.Fatalf("no spec: target %v, physical %v", d.Target, d.Physical)
			}
		})
	}
}

// checkSettled checks the settled condition against the rules, given the
// current hardware and spec.
func checkSettled(t *testing.T, n *node, d Decision) {
	t.Helper()
	prev := n.in.Previous
	if prev.Evicting {
		t.Fatalf("not settled: %+v", prev)
	}
	ev := evaluate(n.in.Configured, d.Physical, n.in.Physical.SwapActive, n.in.Reservations, n.in.ReservedCPUs)
	switch {
	case prev.EmergencySpec != "":
		if d.Condition.Reason != types.ReasonEmergencyReduced || prev.EmergencySpec != n.in.Configured.Key() {
			t.Fatalf("emergency state %q with condition %s and spec %q", prev.EmergencySpec, d.Condition.Reason, n.in.Configured.Key())
		}
	case ev.rejected() || len(ev.over) > 0:
		if d.Condition.Reason != types.ReasonInfeasible {
			t.Fatalf("spec %s should be Infeasible, is %s (%s)", ev.key, d.Condition.Reason, d.Condition.Message)
		}
	default:
		if d.Condition.Reason != types.ReasonAccepted && d.Condition.Reason != types.ReasonInProgress {
			t.Fatalf("spec %s should be Accepted, is %s (%s)", ev.key, d.Condition.Reason, d.Condition.Message)
		}
		if d.Condition.Reason == types.ReasonInProgress && !n.in.Kubelet.Known {
			t.Fatalf("InProgress without a kubelet to wait for: %s", d.Condition.Message)
		}
		want := specTarget(ev, d.Physical)
		if !zeroFilledEqual(want, d.Target) {
			t.Fatalf("target %v, want %v", d.Target, want)
		}
	}
}
