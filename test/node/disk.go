package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// KubeletDiskID is the QEMU block node (and device id) of Config.KubeletDisk:
// the name to give the VM's BlockResize.
const KubeletDiskID = "kubelet"

// KubeletDiskDevice is the kubelet disk in the guest: its only block
// device (the root is a 9p share).
const KubeletDiskDevice = "/dev/vda"

// KubeletDisk is a disk of its own for the kubelet's root directory (see
// Config.KubeletDisk).
type KubeletDisk struct {
	// FS is the file system mkfs makes on it: "ext4" or "xfs" (whose
	// mkfs, from xfsprogs, must be installed on this machine).
	FS string
	// Size is the image's size in bytes; XFS needs 300 MiB or more.
	Size uint64
}

// make writes the disk's image in dir and makes its file system.
func (d KubeletDisk) make(ctx context.Context, dir string) (string, error) {
	var mkfs []string
	switch d.FS {
	case "ext4":
		// The inode tables and the journal initialised here, not by the
		// emulated guest's ext4lazyinit in the background.
		mkfs = []string{"mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"}
	case "xfs":
		mkfs = []string{"mkfs.xfs", "-q", "-f"}
	default:
		return "", fmt.Errorf("node: kubelet disk: file system %q: want ext4 or xfs", d.FS)
	}
	if d.Size < 300<<20 || d.Size%(1<<20) != 0 {
		return "", fmt.Errorf("node: kubelet disk: size %d: want 300 MiB or more, a multiple of 1 MiB", d.Size)
	}
	img := filepath.Join(dir, "kubelet-disk.img")
	f, err := os.Create(img)
	if err != nil {
		return "", fmt.Errorf("node: kubelet disk: %w", err)
	}
	err = f.Truncate(int64(d.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("node: kubelet disk: %w", err)
	}
	if _, err := exec.LookPath(mkfs[0]); err != nil {
		return "", fmt.Errorf("node: kubelet disk: %s is not installed (Debian: apt-get install %s)", mkfs[0], map[string]string{"ext4": "e2fsprogs", "xfs": "xfsprogs"}[d.FS])
	}
	if out, err := exec.CommandContext(ctx, mkfs[0], append(mkfs[1:], img)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("node: kubelet disk: %s: %w: %s", mkfs[0], err, out)
	}
	return img, nil
}

// kubeletDiskUnit mounts the kubelet disk on /var/lib/kubelet before the
// kubelet starts, with what the boot put there (its configuration)
// copied onto it first. A service rather than a mount unit: the node runs
// no udevd, so systemd never sees the disk's device unit appear.
const kubeletDiskUnit = `[Unit]
Description=The kubelet's root directory on its own disk
DefaultDependencies=no
After=local-fs.target
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'mkdir -p /run/kubelet-disk; mount ` + KubeletDiskDevice + ` /run/kubelet-disk; cp -a /var/lib/kubelet/. /run/kubelet-disk/; umount /run/kubelet-disk; mount ` + KubeletDiskDevice + ` /var/lib/kubelet'

[Install]
RequiredBy=kubelet.service
`

// addKubeletDisk adds kubeletDiskUnit to the guest's tree, required by
// the kubelet.
func (t guestTree) addKubeletDisk() {
	t.file("/etc/systemd/system/kubelet-disk.service", 0o644, kubeletDiskUnit)
	t.symlink("/etc/systemd/system/kubelet.service.requires/kubelet-disk.service", "/etc/systemd/system/kubelet-disk.service")
}
