package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModTree makes a fake lib/modules/<version> tree with a modules.dep.
func writeModTree(t *testing.T, dep, builtin string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(builtin), 0o644)
	return dir
}

func TestResolveModulesOrder(t *testing.T) {
	dir := writeModTree(t, `kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio_pci-modern_dev.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci-modern_dev.ko:
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
`, "kernel/drivers/virtio/virtio_balloon.ko\n",
		"kernel/drivers/virtio/virtio_ring.ko",
		"kernel/drivers/virtio/virtio.ko",
		"kernel/drivers/virtio/virtio_pci.ko",
		"kernel/drivers/virtio/virtio_pci-modern_dev.ko",
		"kernel/drivers/char/virtio_console.ko",
	)
	ix, err := loadModuleIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	load, builtin, err := ix.resolve([]string{"virtio-pci", "virtio_console", "virtio_balloon"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range load {
		names = append(names, m.Name)
	}
	got := strings.Join(names, " ")
	if want := "virtio_ring virtio_pci_modern_dev virtio virtio_pci virtio_console"; got != want {
		t.Errorf("load order %q, want %q", got, want)
	}
	if strings.Join(builtin, " ") != "virtio_balloon" {
		t.Errorf("builtin %v, want [virtio_balloon]", builtin)
	}
	if _, _, err := ix.resolve([]string{"nonexistent"}); err == nil {
		t.Error("no error for a missing module")
	}
}

func TestResolveModulesCycle(t *testing.T) {
	dir := writeModTree(t, "kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n", "", "kernel/a.ko", "kernel/b.ko")
	ix, err := loadModuleIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ix.resolve([]string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("err = %v, want a cycle error", err)
	}
}

func TestParseModinfo(t *testing.T) {
	info := parseModinfo([]byte("license=GPL\x00depends=virtio,virtio_ring\x00\x00alias=virtio:d00000003v*\x00name=virtio_console\x00"))
	if info["depends"] != "virtio,virtio_ring" || info["name"] != "virtio_console" || info["license"] != "GPL" {
		t.Errorf("parseModinfo = %v", info)
	}
}

// TestDebianKernelModules reads the real kernel unpacked by ./fetch, which
// ships no modules.dep: dependencies come from each module's .modinfo.
func TestDebianKernelModules(t *testing.T) {
	k, err := FindKernel("")
	if err != nil {
		t.Skip(err)
	}
	ix, err := loadModuleIndex(k.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	load, _, err := ix.resolve(DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range load {
		pos[m.Name] = i
	}
	for _, pair := range [][2]string{{"virtio_ring", "virtio"}, {"virtio", "virtio_pci"}, {"virtio", "virtio_console"}} {
		a, aok := pos[pair[0]]
		b, bok := pos[pair[1]]
		if !aok || !bok || a > b {
			t.Errorf("%s must load before %s; order %v", pair[0], pair[1], load)
		}
	}
	// The disks' modules: crc32c's provider before libcrc32c, whose init
	// asks the crypto API for it (a soft dependency .modinfo does not
	// give), and libcrc32c before xfs.
	disk, _, err := ix.resolve(append(append([]string{}, DefaultModules...), DiskModules...))
	if err != nil {
		t.Fatal(err)
	}
	dpos := map[string]int{}
	for i, m := range disk {
		dpos[m.Name] = i
	}
	for _, pair := range [][2]string{{"crc32c_generic", "libcrc32c"}, {"libcrc32c", "xfs"}, {"virtio", "virtio_blk"}} {
		a, aok := dpos[pair[0]]
		b, bok := dpos[pair[1]]
		if !aok || !bok || a > b {
			t.Errorf("%s must load before %s; order %v", pair[0], pair[1], disk)
		}
	}
	if v, err := k.ConfigValue("MEMORY_HOTREMOVE"); err != nil || v != "y" {
		t.Errorf("CONFIG_MEMORY_HOTREMOVE = %q, %v", v, err)
	}
}

func TestBuildInitramfs(t *testing.T) {
	k, err := FindKernel("")
	if err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox")
	}
	dir := t.TempDir()
	out, err := BuildInitramfs(InitramfsConfig{
		Kernel: k,
		Output: filepath.Join(dir, "i.cpio"),
		Files:  []File{{Path: "/etc/hello", Data: []byte("hi")}, {Path: "/bin/sh", Data: []byte("override"), Mode: 0o755}},
		Setup:  "#!/bin/sh\ntrue\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := readCPIO(f)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]cpioEntry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	for _, name := range []string{"init", "etc/inittab", "etc/vm/agent", "etc/vm/setup", "bin/busybox", "lib/modules/vm/virtio_console.ko", "lib/modules/vm/load-order", "etc/hello"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("initramfs lacks %s", name)
		}
	}
	if e := byName["bin/sh"]; string(e.Data) != "override" {
		t.Errorf("caller's /bin/sh did not win over the busybox link: %q", e.Data)
	}
	if e := byName["bin/mount"]; e.Mode&0o170000 != cpioTypeSymlink {
		t.Errorf("bin/mount is not a busybox link (mode %o)", e.Mode)
	}
	if e := byName["etc/hello"]; e.Mode != 0o100644 {
		t.Errorf("etc/hello mode %o, want 100644", e.Mode)
	}

	// A dynamically linked binary is refused.
	_, err = BuildInitramfs(InitramfsConfig{Kernel: k, Output: filepath.Join(dir, "j.cpio"),
		Files: []File{{Path: "/bin/ls", Source: "/bin/ls"}}})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic /bin/ls: err = %v", err)
	}
}
