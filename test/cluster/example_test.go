package cluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/test/cluster"
)

// A control plane with one node identity and a stand-in kubelet that
// registers that Node with 2 CPUs and 4Gi of memory, as a kubelet would
// at boot.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	c, err := cluster.Start(ctx, cluster.Options{Nodes: []string{"node-1"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()

	kubeconfig, err := c.NodeKubeconfig("node-1") // system:node:node-1
	if err != nil {
		log.Fatal(err)
	}
	k, err := cluster.StartStandInKubelet(ctx, cluster.KubeletOptions{
		NodeName:   "node-1",
		Kubeconfig: kubeconfig,
		Machine: cluster.MachineView{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("2"),
				corev1.ResourceMemory:           resource.MustParse("4Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
			},
			Reserved: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Stop()

	// The code under test talks to c.APIServerURL() with kubeconfig; a
	// hot-plugged CPU would then be adopted by restarting the "kubelet":
	if err := k.Restart(ctx, cluster.MachineView{Capacity: corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("3"),
		corev1.ResourceMemory:           resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("admin kubeconfig:", c.AdminKubeconfig())
}
