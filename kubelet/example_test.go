package kubelet_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

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

func ExampleReadCPUManagerCheckpoint() {
	st, err := kubelet.ReadCPUManagerCheckpoint(filepath.Join("testdata", "cpu_manager_state", "v4"))
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Format, st.PolicyName, "shared:", st.DefaultCPUSet, "all:", st.AllCPUs())
	fmt.Println(st.Exclusive["0b1e6f7a-1111-4c3d-9e8f-000000000002"])
	// Output:
	// v4 static shared: 0,3-7 all: 0-12
	// 8-10
}
