// Command kube-scheduler is the upstream Kubernetes scheduler
// (k8s.io/kubernetes/cmd/kube-scheduler/app) built from the Go module proxy,
// so that the cluster test harness needs no prebuilt binaries. It mirrors the
// upstream main package. It is a test tool, not part of the product.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
