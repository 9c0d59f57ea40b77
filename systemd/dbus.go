package systemd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// ErrBusGone is wrapped by the errors returned when the connection to the
// bus was lost; the next call dials again.
var ErrBusGone = errors.New("D-Bus connection lost")

// Client is a client of systemd's D-Bus API (go-systemd on godbus),
// narrowed to what node-resized asks of the units it follows: their state,
// and restart, stop and start jobs. It connects on first use and dials
// again after the bus connection is lost. It is safe for concurrent use.
type Client struct {
	dial func() (*godbus.Conn, error)
	// poll is how often a wait for a job's result checks the connection.
	poll time.Duration

	mu   sync.Mutex // guards conn
	conn *sddbus.Conn
}

// NewClient returns a client of the system bus (DBUS_SYSTEM_BUS_ADDRESS,
// by default /var/run/dbus/system_bus_socket). Nothing is dialled yet.
func NewClient() *Client {
	return &Client{dial: authHello(func() (*godbus.Conn, error) { return godbus.SystemBusPrivate() }), poll: time.Second}
}

// NewClientAt returns a client of the bus at address, a D-Bus address
// such as "unix:path=/run/dbus/system_bus_socket".
func NewClientAt(address string) *Client {
	return &Client{dial: authHello(func() (*godbus.Conn, error) { return godbus.Dial(address) }), poll: time.Second}
}

// authHello authenticates as this process's uid (EXTERNAL, no user name
// lookup) and says Hello to the bus daemon, as go-systemd does.
func authHello(open func() (*godbus.Conn, error)) func() (*godbus.Conn, error) {
	return func() (*godbus.Conn, error) {
		c, err := open()
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
		return c, nil
	}
}

// connect returns the open connection, dialling when there is none or the
// last one was lost.
func (c *Client) connect() (*sddbus.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && c.conn.Connected() {
		return c.conn, nil
	}
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	conn, err := sddbus.NewConnection(c.dial)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	c.conn = conn
	return conn, nil
}

// Close closes the connection, if any. The client dials again if used
// afterwards. Close is safe to call twice.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	return nil
}

// ErrNotAuthorized is wrapped by the error of a call systemd refused the
// caller: it lets a caller whose uid is its own (0) manage units, and asks
// polkit about any other, which refuses a caller that cannot answer (the
// bus carries no capabilities, so none helps).
var ErrNotAuthorized = errors.New("systemd refused the call: it lets only root (uid 0) manage units without polkit's consent; run node-resized as root")

// The D-Bus errors of a refused authorization: systemd's own check, and
// polkit's when it would have to ask someone.
const (
	errAccessDenied             = "org.freedesktop.DBus.Error.AccessDenied"
	errInteractiveAuthorization = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
)

// callError wraps a failed call, with ErrBusGone when the connection has
// been lost meanwhile and ErrNotAuthorized when systemd refused it.
func (c *Client) callError(conn *sddbus.Conn, what string, err error) error {
	if !conn.Connected() {
		return fmt.Errorf("%s: %w: %w", what, ErrBusGone, err)
	}
	if notAuthorized(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrNotAuthorized, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// notAuthorized reports whether err is systemd's (or polkit's) refusal.
func notAuthorized(err error) bool {
	var v godbus.Error
	var p *godbus.Error
	switch {
	case errors.As(err, &v):
		return v.Name == errAccessDenied || v.Name == errInteractiveAuthorization
	case errors.As(err, &p) && p != nil:
		return p.Name == errAccessDenied || p.Name == errInteractiveAuthorization
	}
	return false
}
