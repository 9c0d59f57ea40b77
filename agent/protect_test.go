package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/types"
)

// TestLossClampedBeforeCheckpointsRead: a loss under a kubelet that is
// now stale goes from the model to the kubepods limits before either of
// the kubelet's checkpoints is read (Restarter.Check reads both). The
// check is still made, after the clamp, and its verdict shows in the
// status as it did.
func TestLossClampedBeforeCheckpointsRead(t *testing.T) {
	ol := &orderLog{}
	rg := newRig(t, 8, func(c *Config) { c.Enforcer = orderEnforcer{ol} })
	rg.r.log = ol
	rg.r.check = errors.New("reserved CPUs 0 are not all online")
	ol.mu.Lock()
	ol.calls = nil
	ol.mu.Unlock()

	rg.hardware(6) // a loss; the kubelet's view (8 CPUs) is stale
	rg.at(0)

	ol.mu.Lock()
	calls := slices.Clone(ol.calls)
	ol.mu.Unlock()
	clamp := slices.Index(calls, string(cgroup.KindClamp))
	if clamp < 0 {
		t.Fatalf("calls %v: no clamp", calls)
	}
	if check := slices.Index(calls, "Check"); check >= 0 && check < clamp {
		t.Fatalf("calls %v: a checkpoint was read before the clamp was written", calls)
	}
	if st := rg.a.Status().Kubelet; st == nil || !strings.Contains(st.RestartBlocked, "checkpoint cannot be made safe") {
		t.Fatalf("kubelet status %+v: the checkpoints' verdict is missing", st)
	}
}

// TestRestartWaitsForTheCheckpoints: a decision that may restart the
// kubelet is taken with its checkpoints read, also when the kubelet's view
// has not been judged against the new machine yet (the watcher is told of
// a change after the agent): the kubelet is never restarted into
// checkpoints that cannot be made safe.
func TestRestartWaitsForTheCheckpoints(t *testing.T) {
	ol := &orderLog{}
	rg := newRig(t, 4, nil)
	rg.r.log = ol
	rg.r.check = errors.New("reserved CPUs 0 are not all online")
	rg.hardware(8)
	rg.kubelet.Stale = false // its view of 4 CPUs, not judged against 8 yet
	rg.a.OnKubelet(rg.kubelet)
	for _, d := range []time.Duration{0, 10 * time.Second, time.Hour} {
		rg.at(d)
		rg.expect(types.ReasonAccepted, "checkpoint cannot be made safe: reserved CPUs 0 are not all online")
	}
	rg.restarts(0)
	ol.mu.Lock()
	defer ol.mu.Unlock()
	if !slices.Contains(ol.calls, "Check") {
		t.Fatalf("calls %v: the checkpoints were never read", ol.calls)
	}
}
