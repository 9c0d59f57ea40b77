//go:build linux

package topology

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// watcher is the process's one inotify instance. It watches the
// directories in which the caches of FSes over trees that are neither
// sysfs nor procfs (the synthetic trees of tests) keep files open, so that
// a file renamed over, removed or moved away is noticed without an fstat
// before every read: those trees change by renaming files into place, and
// a file descriptor kept open would go on reading the old file. One
// instance for the process keeps the per-user inotify limits out of reach
// however many FSes a program makes; when inotify is unavailable or its
// share of watches is used up, a cache checks each read with an fstat.
//
// It is safe for concurrent use; mu guards every field.
var watcher struct {
	mu   sync.Mutex
	fd   int // the inotify instance; 0: not made yet; -1: unavailable
	max  int // the watches it may hold
	dirs map[int32]map[*attrFiles]struct{}
}

// watchEvents are what makes an open file stale: a file renamed into,
// created in or removed from the directory, or the directory itself
// removed or moved. A file written in place needs no event: the next
// pread reads its new content.
const watchEvents = unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchInit makes the instance on first use; it reports false when there
// is none. Called with watcher.mu held.
func watchInit() bool {
	if watcher.fd == 0 {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			watcher.fd = -1
			return false
		}
		watcher.fd = fd
		watcher.dirs = map[int32]map[*attrFiles]struct{}{}
		// A quarter of the user's watches, as other programs of the
		// same user need theirs.
		watcher.max = 2048
		if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				watcher.max = min(n/4, 1<<16)
			}
		}
	}
	return watcher.fd > 0
}

// watch makes sure the directory dir is watched for t and returns its
// watch descriptor; ok is false when it cannot be (t must then check its
// files with fstat).
func (t *attrFiles) watch(dir []byte) (wd int32, ok bool) {
	watcher.mu.Lock()
	defer watcher.mu.Unlock()
	if !watchInit() || len(watcher.dirs) >= watcher.max {
		return 0, false
	}
	w, err := unix.InotifyAddWatch(watcher.fd, string(dir), watchEvents)
	if err != nil {
		return 0, false
	}
	wd = int32(w)
	users := watcher.dirs[wd]
	if users == nil {
		users = map[*attrFiles]struct{}{}
		watcher.dirs[wd] = users
	}
	users[t] = struct{}{}
	return wd, true
}

// unwatch says that t keeps no file open in the directory of wd any more;
// the watch goes once no cache needs it.
func (t *attrFiles) unwatch(wd int32) {
	watcher.mu.Lock()
	defer watcher.mu.Unlock()
	users, ok := watcher.dirs[wd]
	if !ok {
		return // the kernel dropped the watch (the directory is gone)
	}
	delete(users, t)
	if len(users) == 0 {
		delete(watcher.dirs, wd)
		unix.InotifyRmWatch(watcher.fd, uint32(wd))
	}
}

// changes reads the events that arrived since the last call (of any
// cache) and returns the watches of t's directories that had one; all is
// true when events were lost (the queue overflowed), so that any open
// file may be stale.
func (t *attrFiles) changes() (wds []int32, all bool) {
	watcher.mu.Lock()
	defer watcher.mu.Unlock()
	if watcher.fd <= 0 {
		return nil, false
	}
	var buf [16 << 10]byte
	for {
		n, err := unix.Read(watcher.fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break // EAGAIN: no more events
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event { s32 wd; u32 mask; u32 cookie; u32 len; char name[len]; }
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
			if mask&unix.IN_Q_OVERFLOW != 0 {
				for _, users := range watcher.dirs {
					for u := range users {
						u.lost = true
					}
				}
				continue
			}
			for u := range watcher.dirs[wd] {
				u.changed = append(u.changed, wd)
			}
			if mask&unix.IN_IGNORED != 0 {
				delete(watcher.dirs, wd) // the directory is gone
			}
		}
	}
	wds, all = t.changed, t.lost
	t.changed, t.lost = nil, false
	return wds, all
}
