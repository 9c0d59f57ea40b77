//go:build !linux

package uevent

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
)

// An othersConn stands in for the netlink socket on systems that have none.
type othersConn struct{}

var _ conn = (*othersConn)(nil)

// dial reports that kernel uevents exist only on Linux.
func dial(int, *slog.Logger) (*othersConn, error) {
	return nil, fmt.Errorf("uevent: listening for kernel uevents is not implemented on %s: %w",
		runtime.GOOS, errors.ErrUnsupported)
}

// recv implements conn.
func (*othersConn) recv([]byte) (int, uint32, error) { return 0, 0, errors.ErrUnsupported }

// close implements conn.
func (*othersConn) close() error { return errors.ErrUnsupported }
