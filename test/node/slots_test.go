package node

import (
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The real-node tests are CPU-bound on the host: each guest is emulated
// (TCG), its boot alone costs about 50 s of CPU, and an idle node (the
// kubelet, node-resized) about a fifth of a core. go test's -parallel runs
// parallel tests in no particular order, and a subtest that calls
// t.Parallel only after its parent has returned, which left the longest
// test (the planned release) to start last and run alone at the end.
// So the guests take slots from a queue of their own instead: at most
// $NODE_RESIZED_NODE_PARALLEL guests at once (default: -parallel), the
// longest test first (its weight in testWeights), so that the run ends
// with the short ones. make e2e-node passes a -parallel above the number
// of tests, so that every test reaches the queue at once.

// EnvNodeParallel is how many guests run at once (make e2e-node:
// NODE_PARALLEL).
const EnvNodeParallel = "NODE_RESIZED_NODE_PARALLEL"

// testWeights is each guest test's usual duration in seconds (a make
// e2e-node run on a 2-core host, two guests at a time), which orders the
// queue; a test not listed weighs defaultWeight.
var testWeights = map[string]int{
	"TestKubeletRestart":                           850,
	"TestInstalledPackage":                         800,
	"TestPlannedRelease/release":                   650,
	"TestFaults":                                   600,
	"TestKubeletRestartStaticCPU":                  440,
	"TestDaemonSetOnRealNode":                      360,
	"TestPlannedRelease/b-dimm-control-no-release": 335,
	"TestRealRuntimeExclusiveCPU":                  325,
	"TestRealRuntimeCPUWeight":                     290,
}

const defaultWeight = 220 // a run of TestKubeletVersions

// gatherWindow is how long the queue waits after the first test reaches
// it before it hands out a slot, so that the tests go test releases
// together are all in it and the longest goes first.
const gatherWindow = 3 * time.Second

type slotQueue struct {
	once    sync.Once
	mu      sync.Mutex
	free    int
	open    bool // the gather window has passed
	seq     int
	waiting []*slotWaiter
}

type slotWaiter struct {
	weight, seq int
	ready       chan struct{}
}

var guestSlots slotQueue

// parallelGuest is t.Parallel for a test that boots a guest: it then
// waits for a guest slot, held until the test and its cleanups (the
// guest's shutdown, the control plane's) are done.
func parallelGuest(t *testing.T) {
	t.Helper()
	t.Parallel()
	w, ok := testWeights[t.Name()]
	if !ok {
		w = defaultWeight
	}
	t0 := time.Now()
	guestSlots.acquire(w)
	t.Cleanup(guestSlots.release)
	if d := time.Since(t0); d > gatherWindow+time.Second {
		t.Logf("waited %v for a guest slot", d.Round(time.Second))
	}
}

func (q *slotQueue) init() {
	q.free = slotsFromEnv()
	time.AfterFunc(gatherWindow, func() {
		q.mu.Lock()
		q.open = true
		q.handOut()
		q.mu.Unlock()
	})
}

// slotsFromEnv is $NODE_RESIZED_NODE_PARALLEL, else -parallel, else 2.
func slotsFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv(EnvNodeParallel)); err == nil && n > 0 {
		return n
	}
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			return n
		}
	}
	return 2
}

func (q *slotQueue) acquire(weight int) {
	q.once.Do(q.init)
	q.mu.Lock()
	q.seq++
	w := &slotWaiter{weight: weight, seq: q.seq, ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	q.handOut()
	q.mu.Unlock()
	<-w.ready
}

func (q *slotQueue) release() {
	q.mu.Lock()
	q.free++
	q.handOut()
	q.mu.Unlock()
}

// handOut gives the free slots to the heaviest waiters, the earliest
// first among equals. q.mu is held.
func (q *slotQueue) handOut() {
	for q.open && q.free > 0 && len(q.waiting) > 0 {
		best := 0
		for i, w := range q.waiting {
			if b := q.waiting[best]; w.weight > b.weight || w.weight == b.weight && w.seq < b.seq {
				best = i
			}
		}
		w := q.waiting[best]
		q.waiting = append(q.waiting[:best], q.waiting[best+1:]...)
		q.free--
		close(w.ready)
	}
}
