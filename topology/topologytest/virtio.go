package topologytest

import (
	"fmt"
	"path/filepath"
)

// Where the kernel puts the virtio bus, relative to the sysfs root, and
// the name of virtio-mem's driver (drivers/virtio/virtio_mem.c).
const (
	virtioBusPath   = "bus/virtio"
	virtioMemDriver = "virtio_mem"
)

// virtioPCIDir is the directory of virtio device index on the PCI bus,
// under the virtio-mem-pci function QEMU puts it on.
func virtioPCIDir(index int) string {
	return fmt.Sprintf("devices/pci0000:00/0000:00:%02x.0/virtio%d", 0x10+index, index)
}

// writeVirtioMem writes the virtio-mem devices bound to their driver, as
// the driver core links them: the device directory under its PCI
// function, its link in bus/virtio/devices, its driver link, and its link
// in bus/virtio/drivers/virtio_mem. The driver's directory is there only
// with a device (its module is loaded for one).
func (m *Machine) writeVirtioMem(w *writer, sys string) {
	w.tb.Helper()
	if len(m.VirtioMem) == 0 {
		return
	}
	drv := filepath.Join(sys, virtioBusPath, "drivers", virtioMemDriver)
	w.mkdir(drv)
	w.mkdir(filepath.Join(sys, virtioBusPath, "devices"))
	w.extra(drv+"/uevent", "")
	w.extra(drv+"/bind", "")
	w.extra(drv+"/unbind", "")
	for _, v := range m.VirtioMem {
		name := fmt.Sprintf("virtio%d", v.Index)
		dev := virtioPCIDir(v.Index)
		dir := filepath.Join(sys, dev)
		w.file(dir+"/device", "0x0018\n") // VIRTIO_ID_MEM
		w.extra(dir+"/vendor", "0x1af4\n")
		w.extra(dir+"/modalias", "virtio:d00000018v00001AF4\n")
		w.extra(dir+"/uevent", "DRIVER=virtio_mem\nMODALIAS=virtio:d00000018v00001AF4\n")
		w.link("../../../../bus/virtio/drivers/"+virtioMemDriver, dir+"/driver")
		w.link("../../../"+dev, filepath.Join(sys, virtioBusPath, "devices", name))
		w.link("../../../../"+dev, filepath.Join(drv, name))
	}
}
