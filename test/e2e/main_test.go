// Package e2e runs the real node-resized daemon against a real control
// plane (etcd, kube-apiserver and kube-scheduler built from Go modules)
// with a stand-in kubelet, on synthetic sysfs trees for memory and on the
// real kernel for CPU hotplug.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/node-resized/node-resized/test/cluster"
	"github.com/node-resized/node-resized/test/internal/daemontest"
)

// Node names with an identity in the shared control plane, one per test.
const (
	nodeSched   = "e2e-scheduling"
	nodeA1      = "e2e-path-a1"
	nodeA2      = "e2e-path-a2"
	nodeB       = "e2e-path-b"
	nodeOutage  = "e2e-outage"
	nodeBack    = "e2e-outage-back"
	nodeBurst   = "e2e-burst"
	nodeHotplug = "e2e-hotplug"
	nodeEvict   = "e2e-eviction"
	nodeTaint   = "e2e-taint"
	nodeResize  = "e2e-resizectl"
	nodeNRT     = "e2e-nrt"
	nodeProbes  = "e2e-probes"
	nodeUninst  = "e2e-uninstall"
	nodeSpec    = "e2e-spec"
)

var (
	daemonBin string
	cl        *cluster.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "node-resized-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	if err := daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	daemonBin = filepath.Join(dir, "node-resized")

	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := cluster.Build(ctx, binDir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot build the control plane, so nothing can be tested: %v\n", err)
		return 1
	}
	cl, err = cluster.Start(ctx, cluster.Options{
		BinDir:    binDir,
		SkipBuild: true,
		Dir:       filepath.Join(dir, "cluster"),
		KeepDir:   true,
		Nodes:     []string{nodeSched, nodeA1, nodeA2, nodeB, nodeOutage, nodeBack, nodeBurst, nodeHotplug, nodeEvict, nodeTaint, nodeResize, nodeNRT, nodeProbes, nodeUninst, nodeSpec},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start the control plane: %v\n", err)
		return 1
	}
	code := m.Run()
	cl.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "control plane logs and binaries kept in %s\n", dir)
	}
	return code
}
