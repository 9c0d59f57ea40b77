//go:build linux

package topology

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// maxCachedFiles bounds the attribute files an FS keeps open. On sysfs an
// open attribute holds about 4.5 KiB of kernel memory (its seq_file page
// and the open file), charged to the daemon's cgroup: 2 CPUs and 192
// memory blocks keep 388 files open, about 1.7 MiB; the bound about 46
// MiB (1024 CPUs and 4096 blocks fit). Files beyond it are read with
// open, read and close.
const maxCachedFiles = 10240

// attrCache keeps the memory blocks' state and valid_zones files, and the
// CPUs' core_id and physical_package_id, open between rebuilds, so that a rebuild re-reads each with one pread(2) at
// offset 0 instead of openat, read and close: on sysfs a read from offset
// 0 runs the attribute's show function again, so the content is as fresh
// as a new open's. Three syscalls become one; that is most of a full
// rebuild on a machine with many blocks.
//
// A file that went away is noticed and reopened by path: on sysfs a read
// of a removed attribute fails with ENODEV; elsewhere (the synthetic trees
// of tests, which replace files by renaming over them) an fstat showing no
// links left says the same. Files a full rebuild did not read (a block
// gone, a CPU offline) are closed at its end.
//
// The cache belongs to the FS it was made for and its copies; one rebuild
// at a time uses it (a concurrent one reads uncached), and the files are
// closed once no copy of the FS is reachable.
type attrCache struct {
	mu sync.Mutex // held by the one rebuild that uses t
	t  *attrFiles
}

// attrFiles is the cache's state, apart from attrCache so that a cleanup
// can close the files once the attrCache is unreachable.
type attrFiles struct {
	sysfs bool // the tree is a real sysfs: ENODEV says a file went away
	files map[attrKey]attrFile
	gen   uint32 // the current rebuild's generation
}

type attrKey struct {
	id   int32 // block or CPU
	attr uint8 // attrState, ...
}

type attrFile struct {
	fd  int32
	gen uint32 // the last rebuild that read it
}

// newAttrCache makes the cache for the memory block directory memDir.
func newAttrCache(memDir string) *attrCache {
	t := &attrFiles{files: map[attrKey]attrFile{}}
	var st unix.Statfs_t
	if unix.Statfs(memDir, &st) == nil && st.Type == unix.SYSFS_MAGIC {
		t.sysfs = true
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

// newScan starts a rebuild.
func (t *attrFiles) newScan() {
	if t != nil {
		t.gen++
	}
}

// endScan closes the files the full rebuild that just ended did not read.
func (t *attrFiles) endScan() {
	if t == nil {
		return
	}
	for k, f := range t.files {
		if f.gen != t.gen {
			unix.Close(int(f.fd))
			delete(t.files, k)
		}
	}
}

func (t *attrFiles) closeAll() {
	for k, f := range t.files {
		unix.Close(int(f.fd))
		delete(t.files, k)
	}
}

// readAttr reads attribute attr of block or CPU id (d is the directory
// attrPaths names it from) through r's open files, or plainly without
// them. ok is false when the file does not exist. The result is valid
// until the next read.
func (r *reader) readAttr(d dir, id int, attr uint8) (b []byte, ok bool, err error) {
	t := r.files
	if t == nil {
		return r.readOptional(d, r.at(attrPaths[attr][0], id, attrPaths[attr][1]))
	}
	k := attrKey{int32(id), attr}
	if f, cached := t.files[k]; cached {
		f.gen = t.gen
		t.files[k] = f
		if b, fresh := t.pread(r, int(f.fd)); fresh {
			return b, true, nil
		}
		unix.Close(int(f.fd))
		delete(t.files, k)
	}
	// Not open yet, or gone stale: open by path, and keep it open.
	p := r.at(attrPaths[attr][0], id, attrPaths[attr][1])
	pz := append(p, 0)
	fd, err := openZ(d.fd, &pz[0], unix.O_RDONLY)
	if err != nil {
		if err == unix.ENOENT {
			return nil, false, nil
		}
		return r.readOptional(d, p) // for its error
	}
	if len(t.files) >= maxCachedFiles {
		unix.Close(fd)
		return r.readOptional(d, p)
	}
	if b, fresh := t.pread(r, fd); fresh {
		t.files[k] = attrFile{fd: int32(fd), gen: t.gen}
		return b, true, nil
	}
	unix.Close(fd)
	return r.readOptional(d, p)
}

// pread reads the whole file open as fd from offset 0 into the scratch
// buffer. fresh is false when the file went away, the read failed or the
// content filled the buffer: the caller then reads by path, which reports
// errors and grows the buffer up to the cap.
func (t *attrFiles) pread(r *reader, fd int) (b []byte, fresh bool) {
	if !t.sysfs {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Nlink == 0 {
			return nil, false
		}
	}
	for {
		n, err := unix.Pread(fd, r.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n >= len(r.buf) {
			return nil, false
		}
		return r.buf[:n], true
	}
}
