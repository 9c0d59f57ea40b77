package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// A container's status carries an absolute log path, so that the
// kubelet's log cleanup (a glob of the path followed by "*") removes that
// container's logs and nothing else.
func TestContainerStatusHasItsLogPath(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	srv, err := serve(fake.NewFakeRemoteRuntime(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	ctx := context.Background()
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u1"},
		LogDirectory: "/var/log/pods/default_p_u1",
	}
	sb, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, logPath, want string }{
		{"c", "c/0.log", "/var/log/pods/default_p_u1/c/0.log"},
		{"nolog", "", "/var/log/fakecri/"},
	} {
		c, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sandbox, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: tc.name},
			Image:    &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"},
			LogPath:  tc.logPath,
		}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetStatus().GetLogPath(); !strings.HasPrefix(got, tc.want) || !filepath.IsAbs(got) {
			t.Errorf("container %s: log path %q, want %s...", tc.name, got, tc.want)
		}
	}
}
