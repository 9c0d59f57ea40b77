package api

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what clients of the API can hold of the daemon: without
// them, idle or slow clients could take every descriptor the process may
// open, and the detection loop, which opens sysfs files and keeps the
// uevent socket, would fail.
type Limits struct {
	// IdleTimeout closes a keep-alive connection that has been idle this
	// long between two requests.
	IdleTimeout time.Duration
	// ReadTimeout bounds reading one request, its headers and its body:
	// a client that sends headers and then no body is closed after it.
	ReadTimeout time.Duration
	// MaxConnections caps the connections open at once on one listener.
	// One more is answered 503 and closed at once.
	MaxConnections int
	// MaxStreams caps the event streams (GET /v1/events?follow=1) open at
	// once. One more is answered 503.
	MaxStreams int
}

// Default limits: node-resizectl, a few followers and a Prometheus
// scraper fit well within them.
const (
	DefaultIdleTimeout    = 30 * time.Second
	DefaultReadTimeout    = 10 * time.Second
	DefaultMaxConnections = 64
	DefaultMaxStreams     = 16
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{IdleTimeout: DefaultIdleTimeout, ReadTimeout: DefaultReadTimeout,
		MaxConnections: DefaultMaxConnections, MaxStreams: DefaultMaxStreams}
}

// streamWriteTimeout bounds each write to an event stream: a follower that
// stops reading while its connection stays open is dropped rather than
// holding its goroutine and its buffers.
const streamWriteTimeout = 10 * time.Second

// refusedBody is the answer to a connection over the cap.
const refusedBody = `{"error":"too many connections to node-resized (--api-max-connections): retry later"}` + "\n"

var refusedAnswer = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Length: " + strconv.Itoa(len(refusedBody)) + "\r\n\r\n" + refusedBody)

// Refusers is how many connections over the cap a listener answers 503
// at once; one more is closed without an answer. Each holds its
// descriptor for at most refuseTimeout.
const Refusers = 4

// refuseTimeout bounds reading the request of a connection over the cap
// and writing its 503.
const refuseTimeout = time.Second

// limitListener accepts at most cap connections open at once, as
// golang.org/x/net/netutil.LimitListener does, but refuses one more at
// once (it reads the request and answers 503, or closes it when Refusers
// are busy) instead of leaving it in the kernel's backlog until a slot
// frees: a client over the cap learns why, and the backlog never holds
// clients that wait forever.
type limitListener struct {
	net.Listener
	sem      chan struct{}
	refusers chan struct{}
	log      *slog.Logger
	wg       sync.WaitGroup // the refusers running

	refused    atomic.Int64 // since the last warning
	lastWarned atomic.Int64 // unix nanoseconds of the last warning
}

func newLimitListener(ln net.Listener, n int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max(n, 1)), refusers: make(chan struct{}, Refusers), log: log}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			l.refuse(c)
		}
	}
}

// refuse answers c 503 and closes it, in the background: a client reads
// the answer only once it has sent its request (Go's client takes an
// answer before that for a broken connection), so the request's headers
// are read first, within refuseTimeout.
func (l *limitListener) refuse(c net.Conn) {
	select {
	case l.refusers <- struct{}{}:
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.refusers }()
			_ = c.SetDeadline(time.Now().Add(refuseTimeout))
			if _, err := http.ReadRequest(bufio.NewReaderSize(c, 4096)); err == nil {
				_, _ = c.Write(refusedAnswer)
			}
			_ = c.Close()
		}()
	default:
		_ = c.Close()
	}
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastWarned.Load(); now-last >= int64(10*time.Second) && l.lastWarned.CompareAndSwap(last, now) {
		l.refused.Add(-n)
		l.log.Warn("refused API connections over the cap", "refused", n, "cap", cap(l.sem), "addr", l.Addr().String())
	}
}

// wait waits for the refusers: each ends within refuseTimeout.
func (l *limitListener) wait() { l.wg.Wait() }

// limitConn gives its slot back once, when it is closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
