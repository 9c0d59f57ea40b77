package decide_test

import (
	"fmt"
	"time"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

func ExampleAllocatable() {
	capacity := resources.List{"cpu": 4000, "memory": 16 << 30, "hugepages-2Mi": 1 << 30}
	fivePct, _, _ := decide.ParseThreshold("5%")
	r := decide.Reservations{
		SystemReserved:  resources.List{"cpu": 100, "memory": 512 << 20},
		KubeReserved:    resources.List{"memory": 256 << 20},
		MemoryAvailable: fivePct,
	}
	fmt.Println(decide.Allocatable(capacity, r))
	l := decide.KubepodsLimits(capacity, r)
	fmt.Println(l.MemoryMax, l.CPUShares, l.CPUWeight)
	// Output:
	// cpu=3900m, memory=14441827520, hugepages-2Mi=1Gi
	// 16374562816 3993 153
}

// A downscale ordered through the configured capacity (Path A2): the
// evictor looks at the pods first; where every pod fits, the lowered
// status goes out Accepted, then kubepods shrinks (where some have to go:
// status InProgress, cgroups, evictions, then Accepted).
func ExampleDecide() {
	in := decide.Input{
		Physical:     decide.Physical{Capacity: resources.List{resources.CPU: 8000, resources.Memory: 32 << 30}},
		Configured:   types.Configured{Present: true, Raw: map[string]string{"cpu": "8"}},
		Reservations: decide.Reservations{MemoryAvailable: decide.Threshold{Quantity: 100 << 20}},
		Now:          time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	d := decide.Decide(in)
	fmt.Println(d.Condition.Reason, d.Target)

	in.Previous = d.Next
	in.Configured.Raw["cpu"] = "4"
	d = decide.Decide(in)
	fmt.Println(d.Condition.Reason, d.Target)
	for _, a := range d.Actions {
		fmt.Println(" ", a.Kind())
	}

	in.Previous = d.Next
	in.Eviction = types.EvictionReport{Generation: d.Next.Generation, Done: true}
	d = decide.Decide(in)
	fmt.Println(d.Condition.Reason, d.Condition.Message)
	for _, a := range d.Actions {
		fmt.Println(" ", a.Kind())
	}
	// Output:
	// Accepted cpu=8, memory=32Gi
	// InProgress cpu=4, memory=32Gi
	//   Evict
	// Accepted configured capacity {"cpu":"4"}: capacity cpu=4, memory=32Gi applied
	//   PatchNodeStatus
	//   ClampCgroups
	//   EmitEvent
}
