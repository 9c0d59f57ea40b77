package vm

import (
	"context"
	"fmt"
	"strings"
)

// Disk is a raw image file the guest boots with as a virtio-blk disk
// (Config.Disks): /dev/vda for the first, /dev/vdb for the second (the
// root is a 9p share, so the disks are the guest's only block devices).
// The host grows it while the guest runs with VM.BlockResize; the guest's
// kernel then sends the disk's change uevent with RESIZE=1.
type Disk struct {
	// ID is the QEMU device id and the block node's name; required,
	// unique, without commas.
	ID string
	// File is the image's path on this machine, a raw image (for example
	// one mkfs made). QEMU opens it read-write.
	File string
}

// checkDisks checks the disks' ids and files.
func (c *Config) checkDisks() error {
	ids := map[string]bool{}
	for _, d := range c.Disks {
		if d.ID == "" || strings.ContainsAny(d.ID, ",= ") || ids[d.ID] {
			return fmt.Errorf("config: disk id %q: required, unique, without commas", d.ID)
		}
		ids[d.ID] = true
		if d.File == "" || strings.Contains(d.File, ",") {
			return fmt.Errorf("config: disk %s: file %q: required, without commas", d.ID, d.File)
		}
	}
	return nil
}

// diskArgs are QEMU's arguments for the disks: a file node, a raw format
// node named ID on it, and a virtio-blk-pci device on that.
func diskArgs(disks []Disk) []string {
	var args []string
	for _, d := range disks {
		args = append(args,
			"-blockdev", fmt.Sprintf("driver=file,filename=%s,node-name=%s-file", d.File, d.ID),
			"-blockdev", fmt.Sprintf("driver=raw,file=%s-file,node-name=%s", d.ID, d.ID),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,id=%s", d.ID, d.ID))
	}
	return args
}

// BlockResize grows (or shrinks) a disk of Config.Disks to size bytes
// (QMP block_resize on its block node): the image file is resized and the
// guest's virtio-blk driver sees the new capacity at once.
func (v *VM) BlockResize(ctx context.Context, id string, size uint64) error {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	if err := v.qmp.Execute(ctx, "block_resize", map[string]any{"node-name": id, "size": size}, nil); err != nil {
		return fmt.Errorf("resize disk %s to %d bytes: %w", id, size, err)
	}
	return nil
}

// DiskModules are the modules a guest with Disks needs beyond
// DefaultModules: the virtio-blk driver and the file systems the tests
// put on the disks (those the kernel has built in are skipped), after
// crc32c_generic: both checksum their metadata with crc32c, which
// libcrc32c asks the crypto API for (a soft dependency, which
// modules.dep does not list; without it xfs does not load and ext4 does
// not mount what mkfs.ext4 makes by default, metadata_csum on).
var DiskModules = []string{"virtio_blk", "crc32c_generic", "ext4", "xfs"}
