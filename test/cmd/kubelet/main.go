// Command kubelet is the upstream Kubernetes kubelet
// (k8s.io/kubernetes/cmd/kubelet/app) built from the Go module proxy, so that
// the node test bed (package test/node) runs the real kubelet without
// prebuilt binaries. It mirrors the upstream main package. Build it with
// CGO_ENABLED=0 (the guest that runs it has this machine's libc, but a static
// binary does not care) and
// -ldflags '-X k8s.io/component-base/version.gitVersion=v1.37.2', or it
// reports itself as v0.0.0-master. It is a test tool, not part of the product.
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
