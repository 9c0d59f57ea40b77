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
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
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
	if err := rt.Start("unix://" + *listen); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	log.Printf("fakecri: serving the CRI on %s (cgroup driver systemd, image fs %s)", *listen, *imageFS)
	notifyReady()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	rt.Stop()
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
