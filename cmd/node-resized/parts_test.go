package main

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/kubelet"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// passSink hands each kubelet view to the agent and, once armed, waits
// for the pass it wakes, so that the pass runs while the monitor is still
// telling the subscribers of the change; it records the CPU target of
// that pass.
type passSink struct {
	t       *testing.T
	a       *agent.Agent
	mu      sync.Mutex
	armed   bool
	targets []int64
}

func (s *passSink) OnKubelet(v types.KubeletView) {
	n := s.a.Status().Decisions
	s.a.OnKubelet(v)
	s.mu.Lock()
	armed := s.armed
	s.mu.Unlock()
	if !armed {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); s.a.Status().Decisions == n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Error("the kubelet view woke no pass within 10s")
			return
		}
	}
	s.mu.Lock()
	s.targets = append(s.targets, s.a.Status().Target[resources.CPU])
	s.mu.Unlock()
}

func cpus(n int) *topology.Snapshot {
	node := topology.Node{ID: 0, MemTotal: 16 << 30}
	var online topology.CPUSet
	for i := range n {
		node.CPUs = append(node.CPUs, topology.CPU{ID: i})
		online = append(online, i)
	}
	return &topology.Snapshot{CPUs: topology.CPUs{Online: online}, Nodes: []topology.Node{node}, MemTotal: 16 << 30}
}

// TestKubeletWatcherWakesTheAgentOnTheNewModel: the subscribers are told
// of a change in the order parts wires them, and the kubelet watcher, told
// of a loss, finds its view of the kubelet stale and wakes the agent.
// That pass must be on the machine as it now is: the agent has taken the
// change before the watcher wakes it.
func TestKubeletWatcherWakesTheAgentOnTheNewModel(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	a := agent.New(agent.Config{Logger: log}, agent.LocalRelay{})
	sink := &passSink{t: t, a: a}
	p := &parts{agent: a, watcher: kubelet.NewWatcher(kubelet.WatcherOptions{Sink: sink, Logger: log})}
	subs := p.subscribers(&options{}, log, metrics.New())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The kubelet wrote status.capacity for 8 CPUs.
	node := types.NodeView{Ready: true,
		Capacity:       resources.List{resources.CPU: 8000, resources.Memory: 16 << 30},
		CapacityOwners: map[string]string{resources.CPU: kubelet.DefaultFieldManager, resources.Memory: kubelet.DefaultFieldManager},
		StatusWrites:   map[string]time.Time{kubelet.DefaultFieldManager: time.Now().Truncate(time.Second)}}
	p.watcher.OnNode(node)
	a.OnNode(node)
	tell := func(id uint64, snap *topology.Snapshot) {
		c := monitor.Change{ID: id, Time: time.Now(), Capacity: snap.Capacity()}
		for _, s := range subs {
			s.OnChange(c, snap)
		}
	}
	tell(1, cpus(8))
	for deadline := time.Now().Add(10 * time.Second); a.Status().Target[resources.CPU] != 8000; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pass on the first model within 10s")
		}
	}
	sink.mu.Lock()
	sink.armed = true
	sink.mu.Unlock()

	tell(2, cpus(6)) // the loss: the kubelet's view of 8 CPUs is stale now
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.targets) == 0 {
		t.Fatal("the watcher did not find the kubelet stale after the loss")
	}
	for _, cpu := range sink.targets {
		if cpu != 6000 {
			t.Fatalf("a pass woken by the kubelet watcher decided on cpu %d millicores, want 6000: it ran on the machine before the loss (CPU targets %v)",
				cpu, sink.targets)
		}
	}
}
