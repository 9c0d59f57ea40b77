package cgroup_test

import (
	"fmt"

	"github.com/node-resized/node-resized/cgroup"
)

func ExampleResolvePaths() {
	for _, driver := range []string{cgroup.DriverCgroupfs, cgroup.DriverSystemd} {
		p, err := cgroup.ResolvePaths("", driver, "/")
		if err != nil {
			panic(err)
		}
		pod, _ := p.Pod("0b1e6f7a-1111-4c3d-9e8f-000000000001", "Burstable")
		fmt.Println(p.Kubepods.Dir)
		fmt.Println(p.BestEffort.Dir)
		fmt.Println(pod.Dir)
	}
	// Output:
	// /sys/fs/cgroup/kubepods
	// /sys/fs/cgroup/kubepods/besteffort
	// /sys/fs/cgroup/kubepods/burstable/pod0b1e6f7a-1111-4c3d-9e8f-000000000001
	// /sys/fs/cgroup/kubepods.slice
	// /sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice
	// /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1e6f7a_1111_4c3d_9e8f_000000000001.slice
}
