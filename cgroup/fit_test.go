package cgroup_test

import (
	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/kube/evict"
	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// The Enforcer is the agent's cgroup enforcer, and its working sets and
// the checkpoint's exclusive CPUs are what the evictor asks for.
var (
	_ agent.Enforcer       = (*cgroup.Enforcer)(nil)
	_ evict.WorkingSetFunc = (*cgroup.Enforcer)(nil).PodWorkingSet
	_                      = evict.Options{ExclusiveCPUs: checkpoint.ExclusiveCPUsFunc("")}
)
