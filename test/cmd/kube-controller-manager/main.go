// Command kube-controller-manager is the upstream Kubernetes controller
// manager (k8s.io/kubernetes/cmd/kube-controller-manager/app) built from the
// Go module proxy, so that the cluster test harness needs no prebuilt
// binaries. It mirrors the upstream main package. The harness runs only the
// controllers a test names (a DaemonSet's pods, the kube-root-ca.crt
// ConfigMap that every pod's service account token volume mounts). It is a
// test tool, not part of the product.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
