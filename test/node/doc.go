// Package node boots a QEMU guest that is a real Kubernetes node: the real
// systemd (this machine's Debian systemd) as PID 1 on cgroup v2, journald
// and D-Bus, and the real kubelet as kubelet.service, registered with a
// control plane on this machine (test/cluster) and Ready. Pods "run" on a
// fake CRI runtime (test/cmd/fakecri), so they need no images, while the
// kubelet creates and limits their cgroups through systemd as on any node.
//
// The guest's root is this machine's own root, exported read-only over
// virtio-9p, with a tmpfs overlay for every write; the initramfs (built by
// test/vm) mounts it, writes the node's files (units, kubelet
// configuration, the caller's Files) into the overlay and switch_roots to
// /lib/systemd/systemd. The guest reaches the API server on this machine's
// loopback through QEMU's user network. [Boot] returns when the Node is
// Ready; the [Node] embeds the test/vm VM (Exec, QMP hotplug) and adds
// Systemctl, Journal and a client with the node's identity. See README.md.
package node
