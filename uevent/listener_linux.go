//go:build linux

package uevent

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// kernelGroup is the multicast group the kernel broadcasts uevents to.
// (systemd-udevd re-broadcasts processed events to group 2 in its own
// "libudev" format; this package does not listen there.)
const kernelGroup = 1

// unknownSender stands for a sender whose address was not a netlink one; it
// is not 0, so such a datagram is never taken for the kernel's.
const unknownSender = math.MaxUint32

// A sysConn is a NETLINK_KOBJECT_UEVENT socket.
//
// Uevents are not framed by a netlink message header, so netlink.Conn's
// Receive cannot read them. sysConn reads raw datagrams through the socket's
// syscall.RawConn instead: the read waits in the runtime's network poller,
// so it honours read deadlines and Close unblocks it.
type sysConn struct {
	c  *netlink.Conn
	rc syscall.RawConn
}

var _ conn = (*sysConn)(nil)

// dial opens the socket, joins the kernel's group and sets the receive
// buffer to bufSize bytes.
func dial(bufSize int, log *slog.Logger) (*sysConn, error) {
	c, err := netlink.Dial(unix.NETLINK_KOBJECT_UEVENT, &netlink.Config{Groups: kernelGroup})
	if err != nil {
		return nil, fmt.Errorf("uevent: open NETLINK_KOBJECT_UEVENT socket (group %d): %w", kernelGroup, err)
	}
	// SetReadBuffer tries SO_RCVBUFFORCE, which needs CAP_NET_ADMIN and
	// ignores net.core.rmem_max, and falls back to SO_RCVBUF.
	if err := c.SetReadBuffer(bufSize); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("uevent: set socket receive buffer to %d bytes: %w", bufSize, err)
	}
	// The kernel doubles the value it is given, for its bookkeeping.
	if got, err := c.ReadBuffer(); err == nil && got/2 < bufSize {
		log.Warn("uevent receive buffer is smaller than asked for; raise net.core.rmem_max or grant CAP_NET_ADMIN",
			"asked_bytes", bufSize, "got_bytes", got/2)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("uevent: get raw socket: %w", err)
	}
	return &sysConn{c: c, rc: rc}, nil
}

// recv implements conn.
func (s *sysConn) recv(b []byte) (int, uint32, error) {
	var (
		n    int
		from unix.Sockaddr
		rerr error
	)
	// MSG_TRUNC makes recvfrom return the datagram's full length even when
	// it did not fit in b.
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			n, from, rerr = unix.Recvfrom(int(fd), b, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			if rerr != unix.EINTR {
				break
			}
		}
		// EAGAIN: nothing yet; wait in the poller for the socket to
		// become readable.
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, 0, err
	}
	if rerr == unix.ENOBUFS {
		return 0, 0, fmt.Errorf("%w: %w", errOverflow, os.NewSyscallError("recvfrom", rerr))
	}
	if rerr != nil {
		return 0, 0, os.NewSyscallError("recvfrom", rerr)
	}
	sa, ok := from.(*unix.SockaddrNetlink)
	if !ok {
		return n, unknownSender, nil
	}
	return n, sa.Pid, nil
}

// close implements conn.
func (s *sysConn) close() error { return s.c.Close() }
