package cgroup

import (
	"context"

	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/topology"
)

// Restore writes lim on kubepods and returns what it did: lim is meant to
// be what the kubelet writes for the machine as it is now
// (decide.KubepodsLimits of its capacity and the kubelet's reservations),
// so that node-resized leaves no limit of its own behind when it is
// uninstalled. A configured capacity below the hardware (Path A2) was
// clamped below that and is lifted; a clamp for lost hardware (Path B) is
// already that and stays. The writes are Apply's, through the same driver
// (systemd over D-Bus with the systemd driver, so that systemd keeps the
// values), idempotent and read back, with the online CPUs for a cpuset
// that carries a list of its own. Nothing is remembered for Reapply or
// Run: Restore is the last write of a process that is going away.
//
// Like Apply, it returns an error only when a read or a write failed; a
// host where nothing can be enforced (cgroup v1) or a kubepods that does
// not exist is a Change with ResultSkipped and its Reason.
func (e *Enforcer) Restore(ctx context.Context, lim decide.CgroupLimits, online topology.CPUSet) (Change, error) {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	err := e.apply(ctx, Request{Kind: KindRestore, Limits: lim}, online, false)
	e.mu.Lock()
	defer e.mu.Unlock()
	var ch Change
	if e.status != nil {
		ch = e.status.clone()
	}
	return ch, err
}
