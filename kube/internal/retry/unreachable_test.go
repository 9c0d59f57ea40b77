package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// dialError is what client-go returns for a request whose connection
// failed with errno: the url.Error around the net.OpError of the dial.
func dialError(errno syscall.Errno) error {
	return &url.Error{Op: "Patch", URL: "https://10.0.0.1:6443/api/v1/nodes/n1/status",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", dialError(syscall.ECONNREFUSED), true},
		{"connection reset", dialError(syscall.ECONNRESET), true},
		{"no route to host", dialError(syscall.EHOSTUNREACH), true},
		{"network unreachable", dialError(syscall.ENETUNREACH), true},
		{"stream ended", fmt.Errorf("watch: %w", io.ErrUnexpectedEOF), true},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}, true},
		{"no answer in time (the server may be overloaded)", &url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, false},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}, false},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("changed")), false},
		{"a plain error", errors.New("connection refused, as a string"), false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s (%v): Unreachable %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestAfterCapsUnreachable: a backoff grown to its limit waits its full
// delay after an answer, and at most a jittered ReconnectCap after a try
// that reached no API server; the two stay jittered.
func TestAfterCapsUnreachable(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		b := Backoff(time.Second, 30*time.Second)
		for range 10 {
			b.Step()
		}
		if d := After(&b, apierrors.NewServiceUnavailable("x")); d < 30*time.Second || d >= 45*time.Second {
			t.Fatalf("after a 503 at the limit: %v, want in [30s, 45s)", d)
		}
		d := After(&b, dialError(syscall.ECONNREFUSED))
		if d < ReconnectCap || d >= ReconnectCap*3/2 {
			t.Fatalf("after a refused connection at the limit: %v, want in [%v, %v)", d, ReconnectCap, ReconnectCap*3/2)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d distinct delays after a refused connection in 50 backoffs: not jittered", len(seen))
	}
	// Below the cap, the backoff's own delay stands.
	b := Backoff(100*time.Millisecond, 30*time.Second)
	if d := After(&b, dialError(syscall.ECONNREFUSED)); d < 100*time.Millisecond || d >= 150*time.Millisecond {
		t.Errorf("first delay after a refused connection %v, want the backoff's first, in [100ms, 150ms)", d)
	}
}
