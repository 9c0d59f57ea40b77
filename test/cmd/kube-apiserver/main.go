// Command kube-apiserver is the upstream Kubernetes API server
// (k8s.io/kubernetes/cmd/kube-apiserver/app) built from the Go module proxy,
// so that the cluster test harness needs no prebuilt binaries. It mirrors the
// upstream main package. It is a test tool, not part of the product.
package main

import (
	"os"
	_ "time/tzdata" // time zones for CronJob, as upstream does

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
