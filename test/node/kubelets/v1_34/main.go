// Command kubelet is the upstream Kubernetes kubelet
// (k8s.io/kubernetes/cmd/kubelet/app) at v1.34.4, one of the older kubelets the
// node test bed's version matrix boots (test/node's TestKubeletVersions).
// It mirrors test/cmd/kubelet, the v1.37 kubelet, in a module of its own
// that requires k8s.io/kubernetes v1.34.4 (the version of the kubelet
// parity module test/kubeletparity/v1_34), its staging modules at the same
// version: every other dependency is at the version that release's go.mod
// pins, as in the kubelet it ships. The parity module is held to these
// versions (test/kubeletparity/sync-pins), so that the kubelet packages its
// tests compile are the ones linked here. test/node/build-matrix builds it
// with -ldflags '-X k8s.io/component-base/version.gitVersion=v1.34.4'.
// It is a test tool, not part of the product.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
