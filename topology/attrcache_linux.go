//go:build linux

package topology

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxCachedFiles bounds the attribute files an FS keeps open. On sysfs an
// open attribute holds about 4.5 KiB of kernel memory (its seq_file page
// and the open file), charged to the daemon's cgroup: 2 CPUs and 192
// memory blocks keep about 400 files open, 1.8 MiB; the bound about 46
// MiB (1024 CPUs and 4096 blocks fit). Files beyond it are read with
// open, read and close.
const maxCachedFiles = 10240

// attrCache keeps the files a rebuild reads open between rebuilds: the
// memory blocks' state and valid_zones, the CPUs' core_id and
// physical_package_id (by id), and by path every other file it reads (the
// CPU lists, each node's meminfo, distance and hugepage counts, the
// node-wide pools, block_size_bytes, /proc/meminfo, pid_max and
// threads-max). A rebuild re-reads each with one pread(2) at offset 0
// instead of openat, read and close: on sysfs and procfs a read from
// offset 0 runs the attribute's show function again, so the content is as
// fresh as a new open's. Three syscalls become one, and the open is the
// costly one on sysfs (it allocates the seq_file); that is most of a full
// rebuild.
//
// A file that went away is noticed and reopened by path: on sysfs a read
// of a removed attribute fails with ENODEV, and the procfs files read here
// are never removed. Elsewhere (the synthetic trees of tests, which
// replace files by renaming over them) the cache learns from inotify (see
// watcher) which directories changed and reopens their files, or, without
// a watch, checks each read with an fstat: no links left says the same.
// Files a full rebuild did not read (a block gone, a CPU offline) are
// closed at its end.
//
// The cache belongs to the FS it was made for and its copies; one rebuild
// at a time uses it (a concurrent one reads uncached), and the files are
// closed once no copy of the FS is reachable. The rebuild that holds it may
// lend it to its workers (see reader.parallel): while they run, they only
// look files up and read them, and no one changes the maps.
type attrCache struct {
	mu sync.Mutex // held by the one rebuild that uses t
	t  *attrFiles
}

// attrFiles is the cache's state, apart from attrCache so that a cleanup
// can close the files once the attrCache is unreachable.
type attrFiles struct {
	// sysfs and procfs are the roots of the FS when they are the kernel's
	// own filesystems (with a trailing /), "" otherwise: files under them
	// need no fstat to tell that they went away.
	sysfs, procfs string

	attrs map[attrKey]*attrFile // by block or CPU id
	named map[string]*attrFile  // by path
	gen   uint32                // the current rebuild's generation

	// watched are the open files by the watch on their directory.
	watched map[int32][]fileRef

	// Guarded by watcher.mu: the watches whose directories changed since
	// the last rebuild, and whether events were lost.
	changed []int32
	lost    bool
}

// fileRef names an open file: by attr, or by path when name is set.
type fileRef struct {
	attr attrKey
	name string
}

// attrKey is a block or CPU id and an attribute (attrState, ...); a
// uint64 for the map's fast path.
type attrKey uint64

func keyOf(id int, attr uint8) attrKey { return attrKey(uint64(uint32(id))<<8 | uint64(attr)) }

type attrFile struct {
	fd    int32
	gen   uint32 // the last rebuild that read it
	wd    int32  // the watch on its directory; 0: none
	check bool   // neither on sysfs or procfs nor watched: fstat before each read
}

// newAttrCache makes the cache for an FS rooted at sys and proc.
func newAttrCache(sys, proc string) *attrCache {
	t := &attrFiles{attrs: map[attrKey]*attrFile{}, named: map[string]*attrFile{}, watched: map[int32][]fileRef{}}
	var st unix.Statfs_t
	if unix.Statfs(sys, &st) == nil && st.Type == unix.SYSFS_MAGIC {
		t.sysfs = strings.TrimSuffix(sys, "/") + "/"
	}
	if unix.Statfs(proc, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC {
		t.procfs = strings.TrimSuffix(proc, "/") + "/"
	}
	c := &attrCache{t: t}
	runtime.AddCleanup(c, func(t *attrFiles) { t.closeAll() }, t)
	return c
}

// acquire returns the files for one rebuild, nil when another rebuild
// holds them (or there is no cache); release gives them back.
func (c *attrCache) acquire() *attrFiles {
	if c == nil || !c.mu.TryLock() {
		return nil
	}
	return c.t
}

func (c *attrCache) release(t *attrFiles) {
	if t != nil {
		c.mu.Unlock()
	}
}

// newScan starts a rebuild: the files in directories that changed since
// the last one are closed, to be opened again by path.
func (t *attrFiles) newScan() {
	if t == nil {
		return
	}
	t.gen++
	if len(t.watched) == 0 {
		return
	}
	wds, all := t.changes()
	if all {
		t.closeAll()
		return
	}
	for _, wd := range wds {
		for _, ref := range t.watched[wd] {
			if ref.name != "" {
				if f, ok := t.named[ref.name]; ok && f.wd == wd {
					unix.Close(int(f.fd))
					delete(t.named, ref.name)
				}
			} else if f, ok := t.attrs[ref.attr]; ok && f.wd == wd {
				unix.Close(int(f.fd))
				delete(t.attrs, ref.attr)
			}
		}
		if _, ok := t.watched[wd]; ok {
			delete(t.watched, wd)
			t.unwatch(wd)
		}
	}
}

// endScan closes the files the full rebuild that just ended did not read.
func (t *attrFiles) endScan() {
	if t == nil {
		return
	}
	for k, f := range t.attrs {
		if f.gen != t.gen {
			t.drop(*f, fileRef{attr: k})
			delete(t.attrs, k)
		}
	}
	for k, f := range t.named {
		if f.gen != t.gen {
			t.drop(*f, fileRef{name: k})
			delete(t.named, k)
		}
	}
}

// drop closes f (ref in the maps, which the caller deletes it from) and
// forgets its watch.
func (t *attrFiles) drop(f attrFile, ref fileRef) {
	if f.fd >= 0 {
		unix.Close(int(f.fd))
	}
	if f.wd == 0 {
		return
	}
	refs := t.watched[f.wd]
	for i, r := range refs {
		if r == ref {
			refs = append(refs[:i], refs[i+1:]...)
			break
		}
	}
	if len(refs) > 0 {
		t.watched[f.wd] = refs
		return
	}
	delete(t.watched, f.wd)
	t.unwatch(f.wd)
}

func (t *attrFiles) closeAll() {
	for k, f := range t.attrs {
		unix.Close(int(f.fd))
		delete(t.attrs, k)
	}
	for k, f := range t.named {
		unix.Close(int(f.fd))
		delete(t.named, k)
	}
	for wd := range t.watched {
		delete(t.watched, wd)
		t.unwatch(wd)
	}
}

// len is the number of files open.
func (t *attrFiles) len() int { return len(t.attrs) + len(t.named) }

// checked reports whether a file at the absolute path p needs an fstat
// before each read: it is on neither sysfs nor procfs.
func (t *attrFiles) checked(p []byte) bool {
	for _, root := range [...]string{t.sysfs, t.procfs} {
		if root != "" && len(p) > len(root) && string(p[:len(root)]) == root {
			return false
		}
	}
	return true
}

// readAttr reads attribute attr of block or CPU id (d is the directory
// attrPaths names it from) through r's open files, or plainly without
// them. ok is false when the file does not exist. The result is valid
// until the next read.
//
// A worker of a parallel rebuild (r.shared) only reads files that are
// open already, and leaves the cache's maps as they are; for any other it
// returns errRedo, and the rebuild's owner reads that object again after
// the workers are done.
func (r *reader) readAttr(d dir, id int, attr uint8) (b []byte, ok bool, err error) {
	t := r.files
	if t == nil {
		return r.readOptional(d, r.at(attrPaths[attr][0], id, attrPaths[attr][1]))
	}
	k := keyOf(id, attr)
	if f, cached := t.attrs[k]; cached {
		// Atomic: workers of a parallel rebuild may share a file (a
		// CPU that two node directories link).
		if atomic.LoadUint32(&f.gen) != t.gen {
			atomic.StoreUint32(&f.gen, t.gen)
		}
		if b, fresh := r.pread(f); fresh {
			return b, true, nil
		}
		if r.shared {
			return nil, false, errRedo
		}
		t.drop(*f, fileRef{attr: k})
		delete(t.attrs, k)
	} else if r.shared {
		return nil, false, errRedo
	}
	// Not open yet, or gone stale: open by path, and keep it open.
	p := r.at(attrPaths[attr][0], id, attrPaths[attr][1])
	var watch []byte
	if t.sysfs == "" {
		watch = r.keyOf(d, p)
	}
	f, b, ok, err := r.openAttr(d, p, watch, fileRef{attr: k})
	if ok && f.fd >= 0 {
		t.attrs[k] = &f
	}
	return b, ok, err
}

// keyOf returns path (relative to d) from the working directory, in the
// key scratch buffer.
func (r *reader) keyOf(d dir, path []byte) []byte {
	if d.path == "" {
		return path
	}
	key := append(append(append(r.key[:0], d.path...), '/'), path...)
	r.key = key
	return key
}

// readFile reads the file at path, relative to d, as readOptional does,
// through r's open files; a worker (r.shared) as readAttr says.
func (r *reader) readFile(d dir, path []byte) (b []byte, ok bool, err error) {
	t := r.files
	if t == nil {
		return r.readOptional(d, path)
	}
	key := r.keyOf(d, path)
	if f, cached := t.named[string(key)]; cached {
		if atomic.LoadUint32(&f.gen) != t.gen { // as in readAttr
			atomic.StoreUint32(&f.gen, t.gen)
		}
		if b, fresh := r.pread(f); fresh {
			return b, true, nil
		}
		if r.shared {
			return nil, false, errRedo
		}
		t.drop(*f, fileRef{name: string(key)})
		delete(t.named, string(key))
	} else if r.shared {
		return nil, false, errRedo
	}
	var watch []byte
	if t.checked(key) {
		watch = key
	}
	name := string(key)
	f, b, ok, err := r.openAttr(d, path, watch, fileRef{name: name})
	if ok && f.fd >= 0 {
		t.named[name] = &f
	}
	return b, ok, err
}

// openAttr opens path (relative to d) and reads it, for the cache entry
// ref. f.fd is -1 when the file is not to be kept open (the cache is full,
// or it could not be read in one pread): it was then read by path.
//
// watch is nil on sysfs and procfs; elsewhere it is the file's path from
// the working directory, and its directory is watched before the file is
// opened, so that no change after the open goes unnoticed; without a watch
// each read of the file is checked with an fstat.
func (r *reader) openAttr(d dir, path, watch []byte, ref fileRef) (f attrFile, b []byte, ok bool, err error) {
	t := r.files
	f = attrFile{fd: -1, gen: t.gen}
	full := t.len() >= maxCachedFiles
	if watch != nil && !full {
		i := len(watch) - 1
		for i > 0 && watch[i] != '/' {
			i--
		}
		dirPath := watch[:max(i, 1)]
		if watch[0] != '/' && i == 0 {
			dirPath = []byte(".")
		}
		if wd, watched := t.watch(dirPath); watched {
			f.wd = wd
			t.watched[wd] = append(t.watched[wd], ref)
		} else {
			f.check = true
		}
	}
	pz := append(path, 0)
	fd, err := openZ(d.fd, &pz[0], unix.O_RDONLY)
	if err == nil && !full {
		f.fd = int32(fd)
		if b, fresh := r.pread(&f); fresh {
			return f, b, true, nil
		}
	}
	if err == nil {
		unix.Close(fd)
	}
	f.fd = -1
	t.drop(f, ref) // forget the watch; the file is closed already
	if err == unix.ENOENT {
		return f, nil, false, nil
	}
	b, ok, err = r.readOptional(d, path) // for its error, or a larger buffer
	return f, b, ok, err
}

// pread reads the whole file open as f from offset 0 into the scratch
// buffer. fresh is false when the file went away, the read failed or the
// content filled the buffer: the caller then reads by path, which reports
// errors and grows the buffer up to the cap. It reads only f's fd and
// check, which no one changes while workers read (gen may change).
func (r *reader) pread(f *attrFile) (b []byte, fresh bool) {
	if f.check {
		var st unix.Stat_t
		if unix.Fstat(int(f.fd), &st) != nil || st.Nlink == 0 {
			return nil, false
		}
	}
	for {
		n, err := unix.Pread(int(f.fd), r.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n >= len(r.buf) {
			return nil, false
		}
		return r.buf[:n], true
	}
}
