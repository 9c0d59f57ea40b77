package topology

import (
	"errors"
	iofs "io/fs"
	"math"
	"strconv"
	"sync"
)

// maxFileSize caps every read. A sysfs attribute is at most one page; the
// largest file read here, a meminfo, is a few KiB.
const maxFileSize = 1 << 20

// reader reads small sysfs and procfs files and scans directories with
// scratch buffers that are reused from one read to the next, so a rebuild
// that reads thousands of attributes allocates only for what it keeps.
// A reader is not safe for concurrent use; readers are pooled.
type reader struct {
	path []byte // scratch path; a NUL is appended while a syscall needs it
	buf  []byte // contents of the last file read
	dent []byte // directory entry scratch
	key  []byte // scratch for the path that names an open file

	// files are the files kept open between rebuilds, while
	// this reader's rebuild holds them; nil: read every file by path.
	files *attrFiles
	// shared marks a worker of a parallel rebuild: it reads files only
	// when they are open already (see readAttr and parallel).
	shared bool
}

// The attributes read through attrFiles, and their paths (prefix+id+suffix)
// from devices/system/memory and devices/system/cpu.
const (
	attrState   = iota // memoryN/state
	attrZones          // memoryN/valid_zones
	attrCore           // cpuN/topology/core_id
	attrPackage        // cpuN/topology/physical_package_id
	attrBook           // cpuN/topology/book_id (s390x)
	attrDrawer         // cpuN/topology/drawer_id (s390x)
)

var attrPaths = [...][2]string{
	attrState:   {"memory", "/state"},
	attrZones:   {"memory", "/valid_zones"},
	attrCore:    {"cpu", "/topology/core_id"},
	attrPackage: {"cpu", "/topology/physical_package_id"},
	attrBook:    {"cpu", "/topology/book_id"},
	attrDrawer:  {"cpu", "/topology/drawer_id"},
}

var readerPool = sync.Pool{
	New: func() any {
		return &reader{
			path: make([]byte, 0, 256),
			key:  make([]byte, 0, 256),
			buf:  make([]byte, 16<<10),
			dent: make([]byte, 32<<10),
		}
	},
}

// dir is a directory that paths are resolved from: an open directory on
// Linux, or just its path elsewhere.
type dir struct {
	fd   int
	path string // "" for the working directory (cwd)
}

// join names path under d, for error messages.
func (d dir) join(path []byte) string {
	if d.path == "" {
		return string(path)
	}
	return d.path + "/" + string(path)
}

// read reads the file at path (absolute, or relative to the working
// directory); see readIn.
func (r *reader) read(path []byte) ([]byte, error) { return r.readIn(cwd, path) }

// scan lists the directory at path; see scanIn.
func (r *reader) scan(path []byte, fn func(name []byte)) error { return r.scanIn(cwd, path, fn) }

func getReader() *reader { return readerPool.Get().(*reader) }

func putReader(r *reader) {
	r.files = nil
	r.shared = false
	readerPool.Put(r)
}

// useFiles lends the FS's open files to r for one rebuild, if
// no other rebuild holds them; the returned func gives them back.
func (r *reader) useFiles(c *attrCache) (release func()) {
	t := c.acquire()
	if t == nil {
		return func() {}
	}
	r.files = t
	t.newScan()
	return func() {
		r.files = nil
		c.release(t)
	}
}

// at builds the path a+id+b in the scratch path buffer (id < 0 is left
// out) and returns it. The result is valid until the next call.
func (r *reader) at(a string, id int, b string) []byte {
	p := append(r.path[:0], a...)
	if id >= 0 {
		p = strconv.AppendInt(p, int64(id), 10)
	}
	p = append(p, b...)
	r.path = p
	return p
}

// at2 builds a+id1+b+id2+c.
func (r *reader) at2(a string, id1 int, b string, id2 int, c string) []byte {
	p := r.at(a, id1, b)
	p = strconv.AppendInt(p, int64(id2), 10)
	p = append(p, c...)
	r.path = p
	return p
}

// readOptional is readIn with a missing file reported as ok == false
// instead of an error.
func (r *reader) readOptional(d dir, path []byte) (b []byte, ok bool, err error) {
	b, err = r.readIn(d, path)
	if err != nil {
		if isNotExist(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return b, true, nil
}

// numberedName parses names of the form prefix+decimal ("cpu12",
// "memory4095", "node3") without allocating.
func numberedName(name []byte, prefix string) (int, bool) {
	if len(name) <= len(prefix) || string(name[:len(prefix)]) != prefix {
		return 0, false
	}
	id := 0
	for _, c := range name[len(prefix):] {
		if c < '0' || c > '9' {
			return 0, false
		}
		id = id*10 + int(c-'0')
		if id > 1<<30 {
			return 0, false
		}
	}
	return id, true
}

// parseUint parses a decimal (base 10) or hex (base 16, with or without
// 0x) attribute with surrounding white space, without allocating.
func parseUint(b []byte, base int) (uint64, bool) {
	b = trimSpace(b)
	if base == 16 && len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if v > (math.MaxUint64-d)/uint64(base) {
			return 0, false // overflow
		}
		v = v*uint64(base) + d
	}
	return v, true
}

// parseInt parses a decimal int attribute (core_id can be -1 on some
// platforms).
func parseInt(b []byte) (int, bool) {
	b = trimSpace(b)
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	v, ok := parseUint(b, 10)
	if !ok || v > 1<<31 {
		return 0, false
	}
	if neg {
		return -int(v), true
	}
	return int(v), true
}

// isNotExist reports a missing file or directory.
func isNotExist(err error) bool { return errors.Is(err, iofs.ErrNotExist) }
