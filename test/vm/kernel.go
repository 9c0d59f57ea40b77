package vm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kernel is a Debian kernel package unpacked by test/vm/fetch.
type Kernel struct {
	Version string // e.g. "6.1.0-56-amd64"
	// Image is boot/vmlinuz-<Version>, or boot/vmlinux-<Version> where
	// the package has no compressed image (powerpc64le: an ELF file,
	// which QEMU's pseries loads as it is).
	Image      string
	Config     string // boot/config-<Version>
	ModulesDir string // lib/modules/<Version>
}

// DefaultCacheDir is where test/vm/fetch unpacks the kernel:
// $NODE_RESIZED_VM_CACHE, or ~/.cache/node-resized/vm.
func DefaultCacheDir() string {
	if d := os.Getenv("NODE_RESIZED_VM_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "node-resized", "vm")
}

// ErrNoKernel is returned by FindKernel when the cache holds no unpacked
// kernel.
var ErrNoKernel = errors.New("no unpacked kernel: run test/vm/fetch")

// FindKernel returns the kernel that test/vm/fetch last unpacked into
// cacheDir ("" means DefaultCacheDir; a foreign architecture's is in its
// Arch.CacheDir).
func FindKernel(cacheDir string) (Kernel, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	pkg := ""
	if b, err := os.ReadFile(filepath.Join(cacheDir, "current")); err == nil {
		pkg = strings.TrimSpace(string(b))
	} else {
		// No pointer file: take the newest complete unpack.
		dirs, _ := filepath.Glob(filepath.Join(cacheDir, "linux-image-*", ".complete"))
		sort.Strings(dirs)
		if len(dirs) > 0 {
			pkg = filepath.Base(filepath.Dir(dirs[len(dirs)-1]))
		}
	}
	if pkg == "" {
		return Kernel{}, fmt.Errorf("find kernel in %s: %w", cacheDir, ErrNoKernel)
	}
	root := filepath.Join(cacheDir, pkg)
	ver := strings.TrimPrefix(pkg, "linux-image-")
	k := Kernel{
		Version:    ver,
		Image:      filepath.Join(root, "boot", "vmlinuz-"+ver),
		Config:     filepath.Join(root, "boot", "config-"+ver),
		ModulesDir: filepath.Join(root, "lib", "modules", ver),
	}
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		return Kernel{}, fmt.Errorf("find kernel %s: unpack incomplete: %w", root, ErrNoKernel)
	}
	_, err := os.Stat(k.Image)
	if errors.Is(err, fs.ErrNotExist) {
		k.Image = filepath.Join(root, "boot", "vmlinux-"+ver)
		_, err = os.Stat(k.Image)
	}
	if err != nil {
		return Kernel{}, fmt.Errorf("find kernel image: %w", err)
	}
	return k, nil
}

// ConfigValue returns the value of a CONFIG_ option in the kernel's config
// ("y", "m", a string, or "" when unset).
func (k Kernel) ConfigValue(option string) (string, error) {
	b, err := os.ReadFile(k.Config)
	if err != nil {
		return "", fmt.Errorf("read kernel config: %w", err)
	}
	if !strings.HasPrefix(option, "CONFIG_") {
		option = "CONFIG_" + option
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, option+"="); ok {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", nil
}
