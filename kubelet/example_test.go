package kubelet_test

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/node-resized/node-resized/resources"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/kubelet"
)

func ExampleLoad() {
	c, err := kubelet.Load("testdata/reserved.yaml", kubelet.WithDropInDir("testdata/dropin"))
	if errors.Is(err, fs.ErrNotExist) {
		c = kubelet.Default()
	} else if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.CgroupDriver, c.Reservations.SystemReserved, c.Reservations.MemoryAvailable)
	capacity := resources.List{"cpu": 4000, "memory": 16 << 30}
	fmt.Println(decide.Allocatable(capacity, c.Reservations))
	// Output:
	// cgroupfs cpu=500m, memory=2Gi, ephemeral-storage=1Gi 5%
	// cpu=3500m, memory=13636521152
}
