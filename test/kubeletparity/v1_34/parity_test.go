//go:build linux

package parity

import (
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"

	"github.com/node-resized/node-resized/test/kubeletparity/cases"
)

// v1.34 has none of the feature gates the cases set: one build.
var k = cases.Of("v1.34.4")[0]

// The kubelet's fake topology manager logs a line through klog's global
// logger for every policy built: thousands of them.
func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func TestCheckpointRewrite(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { cases.RunCPU(t, k, kubelet{}) })
	t.Run("memory", func(t *testing.T) { cases.RunMemory(t, k, kubelet{}) })
}

// A kubelet downgraded from v1.35 after node-resized rewrote the
// checkpoints v1.35 wrote starts on them.
func TestDowngrade(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { cases.RunCPUDowngrade(t, k, kubelet{}) })
	t.Run("memory", func(t *testing.T) { cases.RunMemoryDowngrade(t, k, kubelet{}) })
}
