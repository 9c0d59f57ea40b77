package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Node names with an identity in the shared cluster, one per test so tests
// do not see each other's Nodes.
const (
	nodePatch     = "node-patch"
	nodeRevert    = "node-revert"
	nodeRestart   = "node-kubelet-restart"
	nodeScheduler = "node-scheduler"
)

// binDir holds the binaries TestMain built.
var binDir string

// shared is the control plane the tests share (started on first use;
// stopped by TestMain).
var shared struct {
	once sync.Once
	c    *Cluster
	dir  string
	err  error
}

// TestMain builds the control-plane binaries once. If they cannot be built
// the tests fail: they do not skip.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if binDir, err = DefaultBinDir(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	// The first build takes minutes; -timeout does not count this part.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	t0 := time.Now()
	err = Build(ctx, binDir)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot build the control plane, so nothing can be tested: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control-plane binaries in %s ready after %v\n", binDir, time.Since(t0).Round(time.Millisecond))

	code := m.Run()

	if shared.c != nil {
		shared.c.Stop()
	}
	if shared.dir != "" {
		if code == 0 {
			os.RemoveAll(shared.dir)
		} else {
			fmt.Fprintf(os.Stderr, "shared control plane's files and logs kept in %s\n", shared.dir)
		}
	}
	return code
}

// sharedCluster returns the shared control plane, starting it on first use.
func sharedCluster(t *testing.T) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "node-resized-cluster-test-")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		t0 := time.Now()
		shared.c, shared.err = Start(ctx, Options{
			BinDir:    binDir,
			SkipBuild: true,
			Dir:       shared.dir,
			Nodes:     []string{nodePatch, nodeRevert, nodeRestart, nodeScheduler},
			Logf:      verboseLogf,
		})
		if shared.err == nil {
			fmt.Fprintf(os.Stderr, "shared control plane started in %v\n", time.Since(t0).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		t.Fatalf("starting the control plane: %v", shared.err)
	}
	if err := shared.c.Exited(); err != nil {
		t.Fatalf("shared control plane: %v", err)
	}
	logTailsOnFailure(t, shared.c)
	return shared.c
}

// logTailsOnFailure logs the end of each component's log if t fails.
func logTailsOnFailure(t *testing.T, c *Cluster) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, comp := range Binaries {
			b, err := os.ReadFile(c.LogPath(comp))
			if err != nil {
				continue
			}
			t.Logf("--- last lines of %s ---\n%s", c.LogPath(comp), tail(string(b), 30))
		}
		t.Logf("all logs: %s", filepath.Join(c.Dir(), "logs"))
	})
}

func verboseLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}
