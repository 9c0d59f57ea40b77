//go:build linux

package topology

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cwd resolves paths as they are, absolute or from the working directory.
var cwd = dir{fd: unix.AT_FDCWD}

// openDir opens a directory that files are then read relative to.
func openDir(path string) (dir, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return dir{fd: -1}, fmt.Errorf("open directory %s: %w", path, err)
		}
		return dir{fd: fd, path: path}, nil
	}
}

func (d dir) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
}

// openZ opens a NUL-terminated path relative to dirfd with openat(2).
// Calling the syscall directly keeps the path out of the heap, and skips
// what os.Open adds for a sysfs attribute: an fstat, and an epoll
// registration (kernfs files support poll) undone again on close. A
// rebuild opens thousands of them, and a path relative to an open
// directory saves the kernel the walk from / each time, which on sysfs
// costs more than the read.
func openZ(dirfd int, pathZ *byte, flags int) (int, error) {
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd),
			uintptr(unsafe.Pointer(pathZ)), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		default:
			return -1, errno
		}
	}
}

// readIn reads the whole file at path, relative to d (at most maxFileSize
// bytes), into the scratch buffer and returns it; the result is valid
// until the next read.
//
// A read shorter than the buffer is taken as the end of the file: sysfs
// attributes and single-record procfs files (meminfo) hand over their whole
// content in the first read, and a regular file reads short only at its
// end. That saves the extra read(2) that would only return 0.
func (r *reader) readIn(d dir, path []byte) ([]byte, error) {
	pz := append(path, 0)
	fd, err := openZ(d.fd, &pz[0], unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.join(path), err)
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(r.buf) {
			if len(r.buf) >= maxFileSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", d.join(path), maxFileSize)
			}
			nb := make([]byte, 2*len(r.buf))
			copy(nb, r.buf[:n])
			r.buf = nb
		}
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d.join(path), err)
		}
		n += m
		if m == 0 || n < len(r.buf) {
			return r.buf[:n], nil
		}
	}
}

// scanIn calls fn with the name of every entry of the directory at path,
// relative to d, in the order the filesystem returns them (without "." and
// ".."), allocating nothing per entry. The name is valid only during the
// call. fn may build paths and read files, but must not scan.
func (r *reader) scanIn(d dir, path []byte, fn func(name []byte)) error {
	pz := append(path, 0)
	fd, err := openZ(d.fd, &pz[0], unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", d.join(path), err)
	}
	defer unix.Close(fd)
	var name string // for errors: fn may reuse the path buffer
	for {
		n, err := unix.Getdents(fd, r.dent)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if name == "" {
				name = d.join(path)
			}
			return fmt.Errorf("read directory %s: %w", name, err)
		}
		if n <= 0 {
			return nil
		}
		if name == "" {
			name = d.join(path)
		}
		// struct linux_dirent64 { u64 ino; s64 off; u16 reclen; u8 type; char name[]; }
		const nameOff = 19
		for off := 0; off+nameOff <= n; {
			reclen := int(binary.NativeEndian.Uint16(r.dent[off+16:]))
			if reclen < nameOff || off+reclen > n {
				return fmt.Errorf("read directory %s: bad dirent length %d", name, reclen)
			}
			ino := binary.NativeEndian.Uint64(r.dent[off:])
			entry := r.dent[off+nameOff : off+reclen]
			for i, c := range entry {
				if c == 0 {
					entry = entry[:i]
					break
				}
			}
			off += reclen
			if ino == 0 || isDots(entry) {
				continue
			}
			fn(entry)
		}
	}
}

func isDots(name []byte) bool {
	return (len(name) == 1 && name[0] == '.') || (len(name) == 2 && name[0] == '.' && name[1] == '.')
}

// readHead reads at most len(buf) bytes from the start of the file named by
// the NUL-terminated pathZ, without allocating.
func readHead(pathZ string, buf []byte) (int, error) {
	fd, err := openZ(unix.AT_FDCWD, unsafe.StringData(pathZ), unix.O_RDONLY)
	if err != nil {
		return 0, err
	}
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		unix.Close(fd)
		return n, err
	}
}

// statfsCapacity returns the size of the filesystem that holds path, as
// cAdvisor computes it for the kubelet (f_frsize * f_blocks).
func statfsCapacity(path string) (uint64, error) {
	var st unix.Statfs_t
	for {
		err := unix.Statfs(path, &st)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return uint64(st.Frsize) * st.Blocks, nil
	}
}

// exists reports whether path, relative to d, names an entry; a symlink
// counts as itself, as it does in a directory scan.
func (r *reader) exists(d dir, path []byte) (bool, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(d.fd, string(path), &st, unix.AT_SYMLINK_NOFOLLOW)
		switch err {
		case nil:
			return true, nil
		case unix.EINTR:
			continue
		case unix.ENOENT, unix.ENOTDIR:
			return false, nil
		default:
			return false, fmt.Errorf("stat %s: %w", d.join(path), err)
		}
	}
}
