package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeletDiskSize is the kubelet disk's size at boot (Config.KubeletDisk)
// in the nodes that grow it: XFS's smallest.
const kubeletDiskSize = 512 << 20

// kubeletDiskGrowth is how much kubeletDiskGrow grows the disk by.
const kubeletDiskGrowth = 256 << 20

// kubeletFSSize is the size of the kubelet's root filesystem as the
// kubelet's cAdvisor computes it (f_frsize * f_blocks), read in the guest.
func kubeletFSSize(t *testing.T, n *Node) int64 {
	t.Helper()
	f := strings.Fields(guestSh(t, n, "stat -f -c '%S %b' /var/lib/kubelet"))
	if len(f) != 2 {
		t.Fatalf("stat -f /var/lib/kubelet: %q", f)
	}
	bs, err1 := strconv.ParseInt(f[0], 10, 64)
	blocks, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("stat -f /var/lib/kubelet: %q", f)
	}
	return bs * blocks
}

// kubeletDiskGrow is KEP-3953's Story 7 on the real node: the volume that
// holds the kubelet's root directory grown while the node runs. The host
// grows the disk (QMP block_resize: the guest's kernel sends the disk's
// change uevent with RESIZE=1), then the guest grows the file system
// online (resize2fs for ext4, xfs_growfs for xfs), as an operator does
// after a cloud resizes the volume. What must follow (relayUpscale): the
// Node's ephemeral-storage capacity patched once, the kubelet restarted
// by node-resized, Ready with the new size published by itself (a
// stock kubelet reads the size once, when its container manager starts),
// Accepted, and no patch after. It reports the times from block_resize
// and from the grow to the model, the patch and the kubelet's Ready.
func (s *installed) kubeletDiskGrow(t *testing.T, fsType string) {
	n, cs := s.n, s.admin
	ctx := context.Background()
	nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := kubeletFSSize(t, n)
	diskBefore, err := strconv.ParseInt(guestSh(t, n, "blockdev --getsize64 "+KubeletDiskDevice), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if got := nd.Status.Capacity.StorageEphemeral().Value(); got != before {
		t.Fatalf("the Node's ephemeral-storage %d before the grow, the kubelet's filesystem %d", got, before)
	}
	t.Logf("%s: /var/lib/kubelet on %s (%s), %d bytes; the Node: capacity %s, allocatable %s", fsType, KubeletDiskDevice,
		guestSh(t, n, "findmnt -n -o FSTYPE /var/lib/kubelet"), before, nd.Status.Capacity.StorageEphemeral(), nd.Status.Allocatable.StorageEphemeral())
	blockUevents0 := daemonMetric(t, n, `node_resized_uevents_total{action="change",subsystem="block"}`)

	var want int64
	var resized, seen, growing, grown time.Time // the guest's clock
	growCmd := map[string]string{"ext4": "resize2fs " + KubeletDiskDevice, "xfs": "xfs_growfs /var/lib/kubelet"}[fsType]
	r := s.relayUpscale(t, fsType+" grown online", func(ctx context.Context) error {
		resized = guestNow(t, n)
		if err := n.BlockResize(ctx, KubeletDiskID, uint64(diskBefore)+kubeletDiskGrowth); err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if sz := guestSh(t, n, "blockdev --getsize64 "+KubeletDiskDevice); sz == strconv.FormatInt(diskBefore+kubeletDiskGrowth, 10) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the guest does not see %s grow to %d", KubeletDiskDevice, diskBefore+kubeletDiskGrowth)
			}
		}
		seen = guestNow(t, n)
		// The disk alone changes nothing the kubelet reads.
		if got := kubeletFSSize(t, n); got != before {
			return fmt.Errorf("the filesystem is %d before its grow, was %d", got, before)
		}
		growing = guestNow(t, n)
		out := guestSh(t, n, growCmd+" 2>&1")
		grown = guestNow(t, n)
		t.Logf("%s:\n%s", growCmd, out)
		want = kubeletFSSize(t, n)
		if want <= before {
			return fmt.Errorf("%s left the filesystem at %d bytes (was %d)", growCmd, want, before)
		}
		return nil
	}, func(v nodeVersion) bool { return v.storage == want }, "ephemeral-storage=", 10*time.Second)

	// The disk's change uevent reached the daemon (the fast watch it
	// starts is what sees the grow within a second).
	if got := daemonMetric(t, n, `node_resized_uevents_total{action="change",subsystem="block"}`); got <= blockUevents0 {
		t.Errorf("no block change uevent counted after block_resize (%v -> %v)", blockUevents0, got)
	}
	nd, err = cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity, alloc := nd.Status.Capacity.StorageEphemeral().Value(), nd.Status.Allocatable.StorageEphemeral().Value()
	// The kubelet's formula with this node's configuration: no
	// ephemeral-storage reservations, nodefs.available 1%
	// (DefaultKubeletConfig), a float32 percentage as the kubelet keeps it.
	if wantAlloc := capacity - int64(float64(capacity)*float64(float32(0.01))); alloc != wantAlloc {
		t.Errorf("allocatable ephemeral-storage %d, want capacity %d less 1%% (nodefs.available), %d", alloc, capacity, wantAlloc)
	}
	// What the daemon saw, in order: the patch's latency is counted from
	// what opened its batch (the filesystem watch's poll).
	trigger := r.uevent
	s.timing("%s: %d -> %d bytes; block_resize -> guest sees the disk %v; grow (%s, %v as the guest agent saw it) begun -> filesystem watch saw it %v, -> Node patched %v, -> kubelet restarted %v, -> Ready with the new size %v (block_resize -> Ready %v); Node capacity %s, allocatable %s",
		fsType, before, want, seen.Sub(resized).Round(time.Millisecond), growCmd, grown.Sub(growing).Round(time.Millisecond),
		trigger.Sub(growing).Round(time.Millisecond), trigger.Add(r.patch).Sub(growing).Round(time.Millisecond),
		trigger.Add(r.restart).Sub(growing).Round(time.Millisecond), trigger.Add(r.ready).Sub(growing).Round(time.Millisecond),
		trigger.Add(r.ready).Sub(resized).Round(time.Millisecond), nd.Status.Capacity.StorageEphemeral(), nd.Status.Allocatable.StorageEphemeral())
	if trigger.Before(growing) {
		t.Errorf("the change was seen at %s, before the grow began at %s", trigger.Format("15:04:05.000"), growing.Format("15:04:05.000"))
	}
	if c := capacityCondition(nd); c == nil || c.Reason != "Accepted" || !nodeReady(nd) {
		t.Errorf("the Node after the grow: %s", describeNode(nd))
	}
}
