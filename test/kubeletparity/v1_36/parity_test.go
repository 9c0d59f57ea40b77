//go:build linux

package parity

import (
	"flag"
	"io"
	"os"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"k8s.io/kubernetes/pkg/features"

	"k8s.io/klog/v2"

	"github.com/node-resized/node-resized/test/kubeletparity/cases"
)

var update = flag.Bool("update", false, "write the starting checkpoints to the cases' testdata")

// each runs f for each build of v1.36.3, with its feature gates set.
func each(t *testing.T, f func(t *testing.T, k cases.Kubelet)) {
	for _, k := range cases.Of("v1.36.3") {
		t.Run(k.String(), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResourceManagers, k.PodLevel)
			f(t, k)
		})
	}
}

// The kubelet's fake topology manager logs a line through klog's global
// logger for every policy built: thousands of them.
func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func TestCheckpointRewrite(t *testing.T) {
	each(t, func(t *testing.T, k cases.Kubelet) {
		t.Run("cpu", func(t *testing.T) { cases.RunCPU(t, k, kubelet{}) })
		t.Run("memory", func(t *testing.T) { cases.RunMemory(t, k, kubelet{}) })
	})
}

// A kubelet downgraded from v1.37 after node-resized rewrote the
// checkpoints v1.37 wrote starts on them.
func TestDowngrade(t *testing.T) {
	each(t, func(t *testing.T, k cases.Kubelet) {
		t.Run("cpu", func(t *testing.T) { cases.RunCPUDowngrade(t, k, kubelet{}) })
		t.Run("memory", func(t *testing.T) { cases.RunMemoryDowngrade(t, k, kubelet{}) })
	})
}

// The starting checkpoints v1.36.3 writes, which v1.35's downgrade test
// rewrites, are those committed in the cases' testdata.
func TestStartingCheckpoints(t *testing.T) {
	each(t, func(t *testing.T, k cases.Kubelet) { cases.CheckStarting(t, k, kubelet{}, kubelet{}, *update) })
}
