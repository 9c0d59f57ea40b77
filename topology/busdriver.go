package topology

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// VirtioMemDriver is the name of virtio-mem's driver on the virtio bus
// (drivers/virtio/virtio_mem.c).
const VirtioMemDriver = "virtio_mem"

// VirtioMemDevices returns the names of the virtio devices bound to the
// virtio_mem driver ("virtio0"), in number order: the links the driver
// core makes in /sys/bus/virtio/drivers/virtio_mem. Readable without any
// capability. No driver directory (the module is not loaded) is no
// device.
func (fs FS) VirtioMemDevices() ([]string, error) {
	return fs.boundDevices("virtio", VirtioMemDriver, isVirtioName)
}

// KmemDevices returns the names of the dax devices bound to the kmem
// driver ("dax0.0"), sorted: persistent or CXL memory added as
// driver-managed system RAM, like virtio-mem's (drivers/dax/kmem.c).
func (fs FS) KmemDevices() ([]string, error) {
	return fs.boundDevices("dax", "kmem", isDaxName)
}

// boundDevices lists /sys/bus/<bus>/drivers/<driver> and returns the
// entries that name a device (the driver core's links; the directory
// also holds bind, unbind, uevent, module, ...), sorted by number.
func (fs FS) boundDevices(bus, driver string, isDevice func(string) bool) ([]string, error) {
	if err := fs.ready(); err != nil {
		return nil, err
	}
	dir := filepath.Join(fs.sys, "bus", bus, "drivers", driver)
	r := getReader()
	defer putReader(r)
	var names []string
	err := r.scan(r.at(dir, -1, ""), func(name []byte) {
		if s := string(name); isDevice(s) {
			names = append(names, s)
		}
	})
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the devices of driver %s: %w", driver, err)
	}
	slices.SortFunc(names, compareNumbered)
	return names, nil
}

// isVirtioName reports a virtio device's name: "virtio" and a number.
func isVirtioName(s string) bool {
	_, ok := numberedName([]byte(s), "virtio")
	return ok
}

// isDaxName reports a dax device's name: "dax", a region number, a dot
// and a device number ("dax0.0").
func isDaxName(s string) bool {
	rest, ok := strings.CutPrefix(s, "dax")
	if !ok {
		return false
	}
	region, dev, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	_, ok1 := numberedName([]byte(region), "")
	_, ok2 := numberedName([]byte(dev), "")
	return ok1 && ok2
}

// compareNumbered orders names by their numbers, then as strings:
// virtio2 before virtio10, dax0.2 before dax0.10.
func compareNumbered(a, b string) int {
	na, nb := numbers(a), numbers(b)
	if c := slices.Compare(na, nb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// numbers returns the runs of digits of s as numbers.
func numbers(s string) []int {
	var out []int
	n, in := 0, false
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if n < 1<<30 {
				n = n*10 + int(s[i]-'0')
			}
			in = true
			continue
		}
		if in {
			out = append(out, n)
		}
		n, in = 0, false
	}
	return out
}
