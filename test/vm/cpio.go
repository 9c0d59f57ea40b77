package vm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format that the Linux
// kernel unpacks as an initramfs. Directories needed by an entry are
// created implicitly, parents first, with mode 0755.
type cpioWriter struct {
	w    *bufio.Writer
	n    int64 // bytes written, for padding
	ino  uint32
	dirs map[string]bool // directories already written
	err  error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriter(w), dirs: map[string]bool{"": true, ".": true}}
}

const (
	cpioTypeDir     = 0o040000
	cpioTypeFile    = 0o100000
	cpioTypeSymlink = 0o120000
)

// Dir writes a directory entry (and its missing parents).
func (c *cpioWriter) Dir(name string, perm fs.FileMode) error {
	name = cleanArchivePath(name)
	if c.dirs[name] {
		return c.err
	}
	c.parents(name)
	c.dirs[name] = true
	return c.entry(name, cpioTypeDir|uint32(perm.Perm()), nil)
}

// File writes a regular file with the given contents.
func (c *cpioWriter) File(name string, perm fs.FileMode, data []byte) error {
	name = cleanArchivePath(name)
	c.parents(name)
	return c.entry(name, cpioTypeFile|uint32(perm&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)), data)
}

// Symlink writes a symbolic link name -> target.
func (c *cpioWriter) Symlink(name, target string) error {
	name = cleanArchivePath(name)
	c.parents(name)
	return c.entry(name, cpioTypeSymlink|0o777, []byte(target))
}

// Close writes the trailer and flushes.
func (c *cpioWriter) Close() error {
	if err := c.entry("TRAILER!!!", 0, nil); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *cpioWriter) parents(name string) {
	var missing []string
	for d := parentDir(name); !c.dirs[d]; d = parentDir(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		c.dirs[missing[i]] = true
		_ = c.entry(missing[i], cpioTypeDir|0o755, nil)
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) error {
	if c.err != nil {
		return c.err
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioTypeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
	c.write(data)
	c.pad()
	return c.err
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// cleanArchivePath turns "/bin/sh" or "./bin/sh" into "bin/sh".
func cleanArchivePath(p string) string {
	p = strings.TrimLeft(p, "/")
	p = strings.TrimPrefix(p, "./")
	return strings.TrimRight(p, "/")
}

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// cpioEntry is one entry read back by readCPIO (used by tests and by
// BuildInitramfs's own sanity check).
type cpioEntry struct {
	Name string
	Mode uint32
	Data []byte
}

// readCPIO parses a newc archive; it is the inverse of cpioWriter.
func readCPIO(r io.Reader) ([]cpioEntry, error) {
	br := bufio.NewReader(r)
	var off int64
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		off += int64(n)
		return b, nil
	}
	skipPad := func() error {
		if r := off % 4; r != 0 {
			_, err := read(int(4 - r))
			return err
		}
		return nil
	}
	var out []cpioEntry
	for {
		hdr, err := read(110)
		if err != nil {
			return nil, fmt.Errorf("cpio header at %d: %w", off, err)
		}
		if string(hdr[:6]) != "070701" {
			return nil, fmt.Errorf("cpio header at %d: bad magic %q", off-110, hdr[:6])
		}
		field := func(i int) (uint32, error) {
			var v uint32
			_, err := fmt.Sscanf(string(hdr[6+8*i:6+8*i+8]), "%08X", &v)
			return v, err
		}
		mode, err1 := field(1)
		size, err2 := field(6)
		nameSize, err3 := field(11)
		if err1 != nil || err2 != nil || err3 != nil || nameSize == 0 {
			return nil, fmt.Errorf("cpio header at %d: bad fields", off-110)
		}
		name, err := read(int(nameSize))
		if err != nil {
			return nil, err
		}
		if err := skipPad(); err != nil {
			return nil, err
		}
		data, err := read(int(size))
		if err != nil {
			return nil, err
		}
		if err := skipPad(); err != nil {
			return nil, err
		}
		e := cpioEntry{Name: strings.TrimRight(string(name), "\x00"), Mode: mode, Data: data}
		if e.Name == "TRAILER!!!" {
			return out, nil
		}
		out = append(out, e)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
