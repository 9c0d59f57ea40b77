package kubelet

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/node-resized/node-resized/topology"
)

// lister is an in-process pod-resources server, as the kubelet serves it.
type lister struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.AllocatableResourcesResponse
	pods []*podresourcesv1.PodResources
}

func (l *lister) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: l.pods}, nil
}

func (l *lister) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	return l.resp, nil
}

// serve serves srv on a unix socket in a temporary directory and returns
// the socket's path.
func serve(t *testing.T, srv podresourcesv1.PodResourcesListerServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s, srv)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return sock
}

func numa(ids ...int64) *podresourcesv1.TopologyInfo {
	ti := &podresourcesv1.TopologyInfo{}
	for _, id := range ids {
		ti.Nodes = append(ti.Nodes, &podresourcesv1.NUMANode{ID: id})
	}
	return ti
}

func TestAllocatableResources(t *testing.T) {
	sock := serve(t, &lister{resp: &podresourcesv1.AllocatableResourcesResponse{
		CpuIds: []int64{3, 1, 2, 5, 4, 7, 6},
		Memory: []*podresourcesv1.ContainerMemory{
			{MemoryType: "memory", Size: 3 << 30, Topology: numa(0)},
			{MemoryType: "memory", Size: 4 << 30, Topology: numa(1)},
			{MemoryType: "hugepages-2Mi", Size: 512 << 20, Topology: numa(1)},
			{MemoryType: "hugepages-1Gi", Size: 1 << 30, Topology: numa(1, 0)},
			{MemoryType: "hugepages-1Gi", Size: 2 << 30, Topology: numa(0)},
		},
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"a"}}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := AllocatableResources(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	want := Allocatable{
		CPUs: topology.CPUSet{1, 2, 3, 4, 5, 6, 7},
		Memory: map[int]map[string]uint64{
			0: {"memory": 3 << 30, "hugepages-1Gi": 3 << 30},
			1: {"memory": 4 << 30, "hugepages-2Mi": 512 << 20},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// A kubelet with the none CPU policy and no memory manager answers with
// nothing.
func TestAllocatableResourcesEmpty(t *testing.T) {
	sock := serve(t, &lister{resp: &podresourcesv1.AllocatableResourcesResponse{}})
	got, err := AllocatableResources(context.Background(), sock)
	if err != nil || len(got.CPUs) != 0 || got.Memory != nil {
		t.Fatalf("got %+v, %v; want an empty view", got, err)
	}
}

func TestAllocatableResourcesUnsupported(t *testing.T) {
	sock := serve(t, &podresourcesv1.UnimplementedPodResourcesListerServer{})
	_, err := AllocatableResources(context.Background(), sock)
	if !errors.Is(err, ErrPodResourcesUnsupported) {
		t.Fatalf("err %v, want ErrPodResourcesUnsupported", err)
	}
}

func TestAllocatableResourcesNoSocket(t *testing.T) {
	_, err := AllocatableResources(context.Background(), filepath.Join(t.TempDir(), "kubelet.sock"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want fs.ErrNotExist", err)
	}
}

// A socket nobody listens on (a kubelet that has stopped): an error once
// the context ends, not a hang.
func TestAllocatableResourcesDeadSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := AllocatableResources(ctx, sock); err == nil {
		t.Fatal("no error from a dead socket")
	}
}

func TestListPods(t *testing.T) {
	sock := serve(t, &lister{pods: []*podresourcesv1.PodResources{
		{Namespace: "kube-system", Name: "coredns-0", Containers: []*podresourcesv1.ContainerResources{{Name: "coredns", CpuIds: []int64{2}}}},
		{Namespace: "default", Name: "web-0"},
	}})
	got, err := ListPods(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if want := []PodName{{"kube-system", "coredns-0"}, {"default", "web-0"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ListPods(context.Background(), filepath.Join(t.TempDir(), "kubelet.sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no socket: err %v, want fs.ErrNotExist", err)
	}
}
