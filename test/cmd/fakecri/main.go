// Command fakecri is a container runtime for the node test bed (package
// test/node): the CRI fake of k8s.io/cri-client/pkg/fake, backed by
// k8s.io/cri-api's in-memory testing services, served on a unix socket. Pods
// "run" without images or processes: sandboxes and containers are records
// that go from created to running when the kubelet asks, and images are
// "pulled" by name, each with the same size. The kubelet still creates, sizes and removes each pod's
// cgroup itself, which is what the test bed is for.
//
// It answers RuntimeConfig with the systemd cgroup driver (the kubelet takes
// its cgroup driver from the runtime), reports an image filesystem at
// -image-fs so the kubelet's stats and eviction manager have a real mount to
// measure, and tells systemd it is ready (Type=notify) once it listens. It
// is a test tool, not part of the product.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

func main() {
	listen := flag.String("listen", "/run/fakecri/fakecri.sock", "unix socket to serve the CRI on")
	imageFS := flag.String("image-fs", "/var/lib/fakecri", "directory reported as the image and container filesystem (created if missing)")
	imageSize := flag.Uint64("image-size", 1<<20, "size in bytes reported for every image (the kubelet rejects 0)")
	flag.Parse()
	log.SetFlags(0)

	if err := os.MkdirAll(*imageFS, 0o755); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	rt := fake.NewFakeRemoteRuntime()
	rt.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD,
	}
	usage := []*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: *imageFS},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 0},
		InodesUsed: &runtimeapi.UInt64Value{Value: 0},
	}}
	// The fake "pulls" an image by recording it with FakeImageSize, which
	// is 0 unless set; the kubelet refuses an image without a size ("Id
	// or size of image ... is not set") and the container never starts.
	rt.ImageService.SetFakeImageSize(*imageSize)
	rt.ImageService.SetFakeFilesystemUsage(usage)
	rt.ImageService.SetFakeContainerFilesystemUsage(usage)
	srv, err := serve(rt, *listen)
	if err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	log.Printf("fakecri: serving the CRI on %s (cgroup driver systemd, image fs %s)", *listen, *imageFS)
	notifyReady()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	srv.Stop()
}

// serve serves rt on the unix socket path, as rt.Start would, but with
// withLogPaths in front of it.
func serve(rt *fake.RemoteRuntime, path string) (*grpc.Server, error) {
	l, err := util.CreateListener("unix://" + path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer()
	w := withLogPaths{rt}
	runtimeapi.RegisterRuntimeServiceServer(srv, w)
	runtimeapi.RegisterImageServiceServer(srv, w)
	rt.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	go srv.Serve(l)
	return srv, nil
}

// withLogPaths is the fake runtime with a log path in each container's
// status, the sandbox's log directory joined with the container's, as a
// real runtime reports it. The fake leaves it empty, and when the kubelet
// removes a container its log manager removes every file matching the
// log path followed by "*": for an empty path, every entry of its working
// directory, /, that os.Remove takes (the symlinks /bin, /lib and /sbin,
// empty folders), after which nothing in the guest could run /bin/sh.
type withLogPaths struct{ *fake.RemoteRuntime }

func (w withLogPaths) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	resp, err := w.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath())
	if !filepath.IsAbs(logPath) || req.GetConfig().GetLogPath() == "" {
		logPath = filepath.Join("/var/log/fakecri", resp.ContainerId+".log")
	}
	rs := w.RuntimeService
	rs.Lock()
	if c := rs.Containers[resp.ContainerId]; c != nil {
		c.LogPath = logPath
	}
	rs.Unlock()
	return resp, nil
}

// notifyReady sends READY=1 to systemd when it runs us as Type=notify.
func notifyReady() {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		log.Printf("fakecri: sd_notify: %v", err)
		return
	}
	defer c.Close()
	if _, err := c.Write([]byte("READY=1")); err != nil {
		log.Printf("fakecri: sd_notify: %v", err)
	}
}
