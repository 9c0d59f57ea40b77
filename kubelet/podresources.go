package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/node-resized/node-resized/topology"
)

// DefaultPodResourcesSocket is where the kubelet serves its pod-resources
// API (<root-dir>/pod-resources/kubelet.sock).
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxPodResourcesMessage caps a reply, as the kubelet's own client does
// (podresources.DefaultMaxMsgSize).
const maxPodResourcesMessage = 16 << 20

// ErrPodResourcesUnsupported is wrapped by the error AllocatableResources
// returns when the kubelet serves the pod-resources API without
// GetAllocatableResources (the KubeletPodResourcesGetAllocatable feature
// gate off, or a kubelet older than 1.23).
var ErrPodResourcesUnsupported = errors.New("the kubelet does not serve GetAllocatableResources")

// Allocatable is the machine as the running kubelet sees it, from the
// pod-resources API's GetAllocatableResources. It is a plain value.
type Allocatable struct {
	// CPUs are the CPUs the CPU manager may hand out: with the static
	// policy the CPUs it found at start minus reservedSystemCPUs; empty
	// with the none policy.
	CPUs topology.CPUSet `json:"cpus"`
	// Memory maps NUMA node id → memory type ("memory",
	// "hugepages-2Mi", …) → allocatable bytes, as the memory manager found
	// them at start; empty unless its policy is Static. An entry that names
	// several NUMA nodes is counted under the lowest, one that names none
	// under -1.
	Memory map[int]map[string]uint64 `json:"memory,omitempty"`
}

// AllocatableResources asks the kubelet listening on socket ("" means
// DefaultPodResourcesSocket) what it can allocate. A socket that does not
// exist gives an error wrapping fs.ErrNotExist (no kubelet, or one that
// serves no pod-resources API).
func AllocatableResources(ctx context.Context, socket string) (Allocatable, error) {
	socket, err := podResourcesSocket(socket)
	if err != nil {
		return Allocatable{}, err
	}
	conn, err := dialPodResources(socket)
	if err != nil {
		return Allocatable{}, err
	}
	defer conn.Close()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).
		GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if status.Code(err) == codes.Unimplemented {
		return Allocatable{}, fmt.Errorf("pod-resources API at %s: %w: %w", socket, ErrPodResourcesUnsupported, err)
	}
	if err != nil {
		return Allocatable{}, fmt.Errorf("pod-resources API at %s: GetAllocatableResources: %w", socket, err)
	}
	return allocatableFrom(resp), nil
}

// allocatableFrom converts the API's reply into an Allocatable.
func allocatableFrom(resp *podresourcesv1.AllocatableResourcesResponse) Allocatable {
	var a Allocatable
	for _, id := range resp.GetCpuIds() {
		a.CPUs = append(a.CPUs, int(id))
	}
	slices.Sort(a.CPUs)
	a.CPUs = slices.Compact(a.CPUs)
	for _, m := range resp.GetMemory() {
		node := -1
		for _, n := range m.GetTopology().GetNodes() {
			if id := int(n.GetID()); node < 0 || id < node {
				node = id
			}
		}
		if a.Memory == nil {
			a.Memory = map[int]map[string]uint64{}
		}
		if a.Memory[node] == nil {
			a.Memory[node] = map[string]uint64{}
		}
		a.Memory[node][m.GetMemoryType()] += m.GetSize()
	}
	return a
}

// PodName names a pod the kubelet has admitted, as its pod-resources
// List does.
type PodName struct {
	Namespace, Name string
}

// ListPods asks the kubelet listening on socket ("" means
// DefaultPodResourcesSocket) for the pods it runs: the pod-resources
// API's List, the source node-feature-discovery computes the pod
// fingerprint from. A socket that does not exist gives an error wrapping
// fs.ErrNotExist.
func ListPods(ctx context.Context, socket string) ([]PodName, error) {
	socket, err := podResourcesSocket(socket)
	if err != nil {
		return nil, err
	}
	conn, err := dialPodResources(socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources API at %s: List: %w", socket, err)
	}
	pods := make([]PodName, 0, len(resp.GetPodResources()))
	for _, p := range resp.GetPodResources() {
		pods = append(pods, PodName{Namespace: p.GetNamespace(), Name: p.GetName()})
	}
	return pods, nil
}

// podResourcesSocket returns socket, or the default for "", once it
// exists.
func podResourcesSocket(socket string) (string, error) {
	if socket == "" {
		socket = DefaultPodResourcesSocket
	}
	if _, err := os.Stat(socket); err != nil {
		return "", fmt.Errorf("pod-resources API: %w", err)
	}
	return socket, nil
}

// dialPodResources makes the client connection to the kubelet's socket.
func dialPodResources(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodResourcesMessage)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources API at %s: %w", socket, err)
	}
	return conn, nil
}
