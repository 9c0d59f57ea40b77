package evict_test

import (
	"fmt"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/kube/evict"
)

// Memory fell to 5Gi allocatable: the pods hold 9Gi (each counted at the
// larger of its request and its working set). The pod over its request goes
// first, then the lower priority; the static pod is never chosen.
func ExampleRank() {
	const gi = 1 << 30
	pods := []evict.PodUsage{
		{Namespace: "web", Name: "cache", QOS: "burstable", Priority: 1000, MemoryRequest: 1 * gi, WorkingSet: 3 * gi, WorkingSetKnown: true},
		{Namespace: "batch", Name: "job", QOS: "burstable", Priority: 0, MemoryRequest: 2 * gi, WorkingSet: 1 * gi, WorkingSetKnown: true},
		{Namespace: "web", Name: "api", QOS: "burstable", Priority: 1000, MemoryRequest: 2 * gi, WorkingSet: 2 * gi, WorkingSetKnown: true},
		{Namespace: "kube-system", Name: "etcd", QOS: "burstable", MemoryRequest: 2 * gi, WorkingSet: 2 * gi, WorkingSetKnown: true, Protected: "static pod"},
	}
	victims, fits := evict.Rank(pods, resources.List{resources.Memory: 5 * gi}, nil, nil, false)
	for _, v := range victims {
		fmt.Println(v.Namespace + "/" + v.Name)
	}
	fmt.Println("fits:", fits)
	// Output:
	// web/cache
	// batch/job
	// fits: true
}
