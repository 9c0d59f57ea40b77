package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// SocketMode is the permission of the socket: the owner and its group may
// connect.
const SocketMode os.FileMode = 0o660

// Serving reports whether a process accepts connections on the unix
// socket at path (a daemon is running there); a stale socket file left by
// a crash, or none, is not serving.
func Serving(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Listen creates the unix socket at path: it creates the parent directory,
// replaces a stale socket left by a crash, refuses to replace a file that is
// not a socket or a socket another daemon still serves, and gives the socket
// mode 0660 (and the group, if not empty) before anyone can connect. The
// socket file is removed when the listener is closed.
func Listen(path, group string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory %s: %w", dir, err)
	}
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("socket group %q: %w", group, err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, fmt.Errorf("socket group %q: gid %q: %w", group, g.Gid, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another --socket", path)
		}
		if Serving(path) {
			return nil, fmt.Errorf("socket %s is in use: another node-resized is running", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stat socket %s: %w", path, err)
	}

	// Bind under a temporary name, set mode and owner, then rename into
	// place, so the socket is never reachable with looser permissions.
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, SocketMode); err != nil {
		return fail(fmt.Errorf("chmod socket %s: %w", tmp, err))
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("chown socket %s to group %s: %w", tmp, group, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("move socket into place at %s: %w", path, err))
	}
	return &unixListener{Listener: ln, path: path}, nil
}

// unixListener removes its socket file on Close, once.
type unixListener struct {
	net.Listener
	path string
	once sync.Once
	err  error
}

func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.Listener.Close()
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) && l.err == nil {
			l.err = fmt.Errorf("remove socket %s: %w", l.path, err)
		}
	})
	return l.err
}
