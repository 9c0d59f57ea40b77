package checkpoint_test

import (
	"fmt"
	"path/filepath"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

func ExampleReadCPUManager() {
	st, err := checkpoint.ReadCPUManager(filepath.Join("testdata", "cpu_manager_state", "v4"))
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Format, st.PolicyName, "shared:", st.DefaultCPUSet, "all:", st.AllCPUs())
	fmt.Println(st.Exclusive["0b1e6f7a-1111-4c3d-9e8f-000000000002"])
	// Output:
	// v4 static shared: 0,3-7 all: 0-12
	// 8-10
}
