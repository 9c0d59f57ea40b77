// Command kubelet is the upstream Kubernetes kubelet
// (k8s.io/kubernetes/cmd/kubelet/app) at v1.35.4, one of the older kubelets the
// node test bed's version matrix boots (test/node's TestKubeletVersions).
// It mirrors test/cmd/kubelet, the v1.37 kubelet, in a module of its own
// that pins k8s.io/kubernetes v1.35.4 and its staging modules at the same
// versions as the kubelet parity module test/kubeletparity/v1_35, so that the
// two share build results. test/node/build-matrix builds it with
// CGO_ENABLED=0 and -ldflags '-X k8s.io/component-base/version.gitVersion=v1.35.4'.
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
