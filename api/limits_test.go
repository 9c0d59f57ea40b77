package api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
)

// What API clients can hold of the daemon is bounded: each test plays one
// abusive client against a real server on a unix socket.

func limits(mod func(*api.Limits)) *api.Limits {
	l := api.DefaultLimits()
	mod(&l)
	return &l
}

// dial opens a raw connection to the socket.
func (e *apiEnv) dial() net.Conn {
	e.t.Helper()
	c, err := net.Dial("unix", e.socket)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// request writes a GET of path on c and reads the answer.
func request(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: node-resized\r\n\r\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer to GET %s: %v", path, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("read body of GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

// closedWithin reports how long the server took to close c (reading
// and dropping whatever it sends), or fails the test when it has not
// within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open %v later", d)
	}
	return time.Since(start)
}

// A keep-alive connection that sent one request and went idle is closed
// after the idle timeout.
func TestIdleKeepAliveClosed(t *testing.T) {
	e := startAPIWith(t, apiOptions{limits: limits(func(l *api.Limits) { l.IdleTimeout = 300 * time.Millisecond })})
	c := e.dial()
	br := bufio.NewReader(c)
	if resp := request(t, c, br, "/v1/status"); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /v1/status: %s, close %v; want 200 keep-alive", resp.Status, resp.Close)
	}
	took := closedWithin(t, c, 5*time.Second)
	t.Logf("idle keep-alive connection closed after %v", took.Round(time.Millisecond))
}

// A request whose headers arrive but whose body never does, and one whose
// headers never end, are closed after the read timeout.
func TestSlowRequestClosed(t *testing.T) {
	e := startAPIWith(t, apiOptions{limits: limits(func(l *api.Limits) { l.ReadTimeout = 300 * time.Millisecond })})
	for name, req := range map[string]string{
		"headers without body": "POST /v1/resync HTTP/1.1\r\nHost: node-resized\r\nContent-Length: 1000\r\n\r\n{",
		"unfinished headers":   "GET /v1/status HTTP/1.1\r\nHost: node-resized\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := e.dial()
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			took := closedWithin(t, c, 5*time.Second)
			t.Logf("closed after %v", took.Round(time.Millisecond))
		})
	}
}

// Connections over the cap are answered 503 at once and closed; a freed
// slot serves again.
func TestConnectionCap(t *testing.T) {
	const max = 3
	e := startAPIWith(t, apiOptions{limits: limits(func(l *api.Limits) { l.MaxConnections = max })})
	var held []net.Conn
	for range max {
		c := e.dial()
		if resp := request(t, c, bufio.NewReader(c), "/v1/status"); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d under the cap: %s", len(held)+1, resp.Status)
		}
		held = append(held, c)
	}
	for i := range 5 {
		c := e.dial()
		start := time.Now()
		resp := request(t, c, bufio.NewReader(c), "/v1/status")
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("connection %d over the cap of %d: %s, want 503", max+i+1, max, resp.Status)
		}
		closedWithin(t, c, 2*time.Second)
		if took := time.Since(start); took > time.Second {
			t.Errorf("the refusal took %v", took)
		}
	}
	// The client's own error says why.
	if _, err := e.client.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "too many connections") {
		t.Errorf("Status over the cap = %v, want an error that says too many connections", err)
	}

	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := e.client.Status(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no connection served 5s after one of the %d closed: %v", max, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Event streams over their cap are answered 503; the connections stay
// usable and a freed slot serves a stream again.
func TestFollowStreamCap(t *testing.T) {
	const max = 2
	e := startAPIWith(t, apiOptions{limits: limits(func(l *api.Limits) { l.MaxStreams = max })})
	var cancels []context.CancelFunc
	for range max {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		got, _ := e.follow(ctx, api.Cursor{})
		receive(t, got) // the stream is open
		cancels = append(cancels, cancel)
	}
	for range 3 {
		_, done := e.follow(context.Background(), api.Cursor{})
		err := within(t, done, "Follow over the cap")
		if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "too many event streams") {
			t.Fatalf("Follow over the cap of %d = %v, want a 503 that says too many event streams", max, err)
		}
	}
	// Everything else still answers.
	if _, err := e.client.Status(context.Background()); err != nil {
		t.Fatalf("Status with the streams at their cap: %v", err)
	}
	if _, err := e.client.Events(context.Background()); err != nil {
		t.Fatalf("Events with the streams at their cap: %v", err)
	}

	cancels[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		got, done := e.follow(ctx, api.Cursor{})
		select {
		case <-got:
			cancel()
			return
		case err := <-done:
			cancel()
			if time.Now().After(deadline) {
				t.Fatalf("no stream served 5s after one of the %d ended: %v", max, err)
			}
			time.Sleep(20 * time.Millisecond)
		case <-time.After(5 * time.Second):
			cancel()
			t.Fatal("Follow neither delivered nor failed within 5s")
		}
	}
}
