package decide

import (
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// A configured ephemeral-storage below the kubelet's filesystem is a
// configured capacity like any other (Path A2): the pods are looked at,
// the lowered capacity and allocatable (less the nodefs.available
// threshold) are published, Accepted. No cgroup limits storage, so the
// shrink's kubepods limits are the hardware's (the clamp writes what is
// there already): what keeps the pods within it is the scheduler, which
// admits against the lowered allocatable, and the kubelet's own eviction
// manager (nodefs.available, each pod's ephemeral-storage limits).
func TestConfiguredEphemeralStorageBelowTheFilesystem(t *testing.T) {
	const fs = 100_000_000_000
	hw := machine(4, 16*Gi).with(resources.EphemeralStorage, fs)
	n := newNode(t, hw, types.Configured{})
	n.expect(n.step(nil), types.ReasonAccepted, KindPatchNodeStatus, KindEmitEvent)

	d := n.step(func(in *Input) { in.Configured = spec("ephemeral-storage", "60G") })
	n.expect(d, types.ReasonInProgress, KindEvict)
	d = n.settle()
	n.expect(d, types.ReasonAccepted, KindPatchNodeStatus, KindClampCgroups, KindEmitEvent)
	patch := d.Actions[0].(PatchNodeStatus)
	if got, hwLimits := d.Actions[1].(ClampCgroups).Limits, KubepodsLimits(withPID(hw.Capacity, hw.Capacity[resources.PID]), n.in.Reservations); !reflect.DeepEqual(got, hwLimits) {
		t.Fatalf("kubepods limits %+v for a storage shrink, want the hardware's %+v", got, hwLimits)
	}
	if got := patch.Capacity[resources.EphemeralStorage]; got != 60_000_000_000 {
		t.Fatalf("capacity ephemeral-storage %d, want the configured 60G", got)
	}
	if got := patch.Allocatable[resources.EphemeralStorage]; got >= 60_000_000_000 || got <= 0 {
		t.Fatalf("allocatable ephemeral-storage %d, want the configured 60G less the reservations and nodefs.available", got)
	}
	if patch.Capacity[resources.CPU] != 4000 || patch.Capacity[resources.Memory] != 16*Gi {
		t.Fatalf("capacity %v: cpu and memory moved", patch.Capacity)
	}
	if d.Target[resources.EphemeralStorage] != 60_000_000_000 {
		t.Fatalf("target %v", d.Target)
	}

	// The filesystem grows under it: nothing changes, the request holds.
	d = n.step(func(in *Input) { in.Physical = in.Physical.with(resources.EphemeralStorage, 2*fs) })
	n.expect(d, types.ReasonAccepted)
}
