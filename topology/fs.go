package topology

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// FS reads the machine model from a sysfs and a procfs mount point, and
// optionally measures the filesystem that holds the kubelet's root
// directory. Make one with [NewFS]; the zero FS reads nothing.
//
// An FS is an immutable value: it is safe for concurrent use, and each
// method call reads the files afresh. On Linux it keeps the files a
// rebuild reads open between rebuilds, to read them again with one
// syscall each (see attrCache); the files close once no copy of the FS
// is reachable. Over a tree that is neither sysfs nor procfs it watches
// their directories with the process's one inotify instance (see watcher).
type FS struct {
	sys  string // sysfs root, e.g. /sys
	proc string // procfs root, e.g. /proc

	// kubeletRoot is the directory whose filesystem is the node's
	// ephemeral-storage capacity; "" means not measured.
	kubeletRoot string

	// Directories derived from sys, and the meminfo path (also with a
	// trailing NUL for the allocation-free MemTotal).
	cpuDir, nodeDir, memDir, hugeDir string
	meminfo, meminfoZ                string
	pidMaxPath, threadsMaxPath       string

	// books reads each CPU's book_id and drawer_id, and counts no CPU
	// that lacks them: what cAdvisor does for the kubelet when it is
	// built for s390x, the one architecture whose kernel has these levels
	// (drivers/base/topology.c writes them where the architecture defines
	// topology_book_id and topology_drawer_id). NewFS sets it on s390x.
	books bool

	// cache keeps the files a rebuild reads open between rebuilds;
	// shared by the copies of the FS (see attrCache).
	cache *attrCache
}

// NewFS returns an FS rooted at sysRoot (normally /sys) and procRoot
// (normally /proc). It checks that the roots look like sysfs and procfs:
// sysRoot/devices/system/cpu must be a directory and procRoot/meminfo must
// be readable. Otherwise it returns one error that names the root, e.g.
// "sysfs root /x: stat /x/devices/system/cpu: no such file or directory".
func NewFS(sysRoot, procRoot string) (FS, error) {
	if sysRoot == "" || procRoot == "" {
		return FS{}, errors.New("topology: empty sysfs or procfs root")
	}
	sysRoot, procRoot = filepath.Clean(sysRoot), filepath.Clean(procRoot)
	f := FS{
		sys:     sysRoot,
		proc:    procRoot,
		cpuDir:  filepath.Join(sysRoot, "devices/system/cpu"),
		nodeDir: filepath.Join(sysRoot, "devices/system/node"),
		memDir:  filepath.Join(sysRoot, "devices/system/memory"),
		hugeDir: filepath.Join(sysRoot, "kernel/mm/hugepages"),
		meminfo: filepath.Join(procRoot, "meminfo"),

		pidMaxPath:     filepath.Join(procRoot, "sys/kernel/pid_max"),
		threadsMaxPath: filepath.Join(procRoot, "sys/kernel/threads-max"),

		books: runtime.GOARCH == "s390x",
	}
	f.meminfoZ = f.meminfo + "\x00"

	if _, err := os.Stat(sysRoot); err != nil {
		return FS{}, fmt.Errorf("sysfs root %s: %w", sysRoot, err)
	}
	if st, err := os.Stat(f.cpuDir); err != nil {
		return FS{}, fmt.Errorf("sysfs root %s: %w", sysRoot, err)
	} else if !st.IsDir() {
		return FS{}, fmt.Errorf("sysfs root %s: %s is not a directory", sysRoot, f.cpuDir)
	}
	if _, err := os.Stat(procRoot); err != nil {
		return FS{}, fmt.Errorf("procfs root %s: %w", procRoot, err)
	}
	var buf [64]byte
	if _, err := readHead(f.meminfoZ, buf[:]); err != nil {
		return FS{}, fmt.Errorf("procfs root %s: read %s: %w", procRoot, f.meminfo, err)
	}
	f.cache = newAttrCache(sysRoot, procRoot)
	return f, nil
}

// WithKubeletRootDir returns a copy of fs whose snapshots also measure the
// node's ephemeral-storage capacity: the size of the filesystem that holds
// dir (the kubelet's --root-dir, /var/lib/kubelet by default), as
// statfs(2) f_frsize × f_blocks, which is what cAdvisor reports to the
// kubelet. When dir does not exist yet, its nearest existing parent is
// measured. An empty dir turns the measurement off (capacity 0).
func (fs FS) WithKubeletRootDir(dir string) FS {
	if dir != "" {
		dir = filepath.Clean(dir)
	}
	fs.kubeletRoot = dir
	return fs
}

// ready reports an FS that NewFS did not make.
func (fs FS) ready() error {
	if fs.cpuDir == "" {
		return errors.New("topology: FS not made by NewFS")
	}
	return nil
}

// EphemeralStorage returns the size of the filesystem that holds the
// kubelet's root directory (see [FS.WithKubeletRootDir]), as a snapshot's
// EphemeralStorage: one statfs(2) and nothing else, so that it can run
// every second to follow a filesystem grown online (resize2fs,
// xfs_growfs), which no uevent reports. It returns 0 and no error when
// the FS measures no kubelet root directory.
func (fs FS) EphemeralStorage() (uint64, error) {
	if err := fs.ready(); err != nil {
		return 0, err
	}
	return fs.ephemeralStorage()
}

// ephemeralStorage measures the filesystem holding the kubelet root dir,
// walking up to the nearest existing parent.
func (fs FS) ephemeralStorage() (uint64, error) {
	if fs.kubeletRoot == "" {
		return 0, nil
	}
	dir := fs.kubeletRoot
	for {
		size, err := statfsCapacity(dir)
		if err == nil {
			return size, nil
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, iofs.ErrNotExist) || parent == dir {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		dir = parent
	}
}

// pidMax is the kubelet's pid capacity, as its pidlimit.Stats computes
// it: the smaller of procfs sys/kernel/pid_max and sys/kernel/threads-max
// (both limit the tasks on the machine); one of them alone when the other
// is absent, 0 when both are (a synthetic tree without them).
func (fs FS) pidMax(r *reader) (int64, error) {
	var limit int64
	for _, p := range [...]string{fs.pidMaxPath, fs.threadsMaxPath} {
		b, ok, err := r.readFile(cwd, r.at(p, -1, ""))
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		b = bytes.TrimSpace(b)
		v, ok := parseUint(b, 10)
		if !ok || v == 0 || v > 1<<31 {
			return 0, fmt.Errorf("parse %s: %q is not a task limit", p, b)
		}
		if limit == 0 || int64(v) < limit {
			limit = int64(v)
		}
	}
	return limit, nil
}
