package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"syscall"

	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/topology"
)

// Client talks to the daemon over its unix socket. It is safe for
// concurrent use.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	return &Client{socket: path, hc: &http.Client{Transport: tr}}
}

// Socket returns the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// NotRunningError says the daemon could not be reached at the socket.
type NotRunningError struct {
	Socket string
	Err    error
}

func (e *NotRunningError) Error() string {
	hint := "is node-resized running? Start it with `systemctl start node-resized` (or `node-resized --standalone`), or point --socket at the socket it serves"
	switch {
	case errors.Is(e.Err, os.ErrPermission):
		hint = "permission denied: run as root or as a member of the socket's group"
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		hint = "nothing is listening there (a stale socket?); " + hint
	}
	return fmt.Sprintf("cannot reach node-resized at %s: %v (%s)", e.Socket, errors.Unwrap(e.Err), hint)
}

func (e *NotRunningError) Unwrap() error { return e.Err }

func (c *Client) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://node-resized"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, &NotRunningError{Socket: c.socket, Err: op}
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e Error
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = string(body)
		}
		if resp.StatusCode == http.StatusGone && e.Missed != nil {
			return nil, &MissedError{Missed: *e.Missed, Message: e.Error}
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	return resp, nil
}

func (c *Client) get(ctx context.Context, method, path string, v any) error {
	resp, err := c.do(ctx, method, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Status returns GET /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	return &st, c.get(ctx, http.MethodGet, "/v1/status", &st)
}

// Topology returns GET /v1/topology.
func (c *Client) Topology(ctx context.Context) (*topology.Snapshot, error) {
	var s topology.Snapshot
	return &s, c.get(ctx, http.MethodGet, "/v1/topology", &s)
}

// Events returns the recorded changes, oldest first.
func (c *Client) Events(ctx context.Context) ([]Event, error) {
	return c.EventsSince(ctx, Cursor{})
}

// EventsSince returns the recorded changes after since, oldest first; a
// *MissedError when some of them cannot be given (the daemon restarted
// since, or its history dropped them).
func (c *Client) EventsSince(ctx context.Context, since Cursor) ([]Event, error) {
	var out []Event
	return out, c.get(ctx, http.MethodGet, "/v1/events"+since.query(false), &out)
}

// Cursor names the change a client last saw: its epoch and its id. The
// zero Cursor is before every change.
type Cursor struct {
	Epoch string
	ID    uint64
}

// Cursor returns the cursor that resumes after e.
func (e Event) Cursor() Cursor { return Cursor{Epoch: e.Epoch, ID: e.Change.ID} }

func (c Cursor) query(follow bool) string {
	q := url.Values{}
	if follow {
		q.Set("follow", "1")
	}
	if c.Epoch != "" {
		q.Set("epoch", c.Epoch)
	}
	if c.ID > 0 {
		q.Set("since", strconv.FormatUint(c.ID, 10))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// MissedError says that the changes after a cursor cannot all be given:
// the daemon restarted since (a cursor of another epoch), or its history
// dropped them. Read the status afresh and resume from Missed.Epoch.
type MissedError struct {
	Missed  Missed
	Message string
}

func (e *MissedError) Error() string { return "missed changes (" + e.Missed.Reason + "): " + e.Message }

// Resync forces a rebuild of the model and returns what changed.
func (c *Client) Resync(ctx context.Context) (*monitor.ResyncResult, error) {
	var r monitor.ResyncResult
	return &r, c.get(ctx, http.MethodPost, "/v1/resync", &r)
}

// Follow streams changes recorded after since (the zero Cursor: all that
// are recorded) and then each new one, calling fn for each, until ctx is
// done (it then returns nil), fn returns an error, or the stream ends. It
// returns a *MissedError, and calls fn for none, when the changes after
// since cannot all be given.
func (c *Client) Follow(ctx context.Context, since Cursor, fn func(Event) error) error {
	resp, err := c.do(ctx, http.MethodGet, "/v1/events"+since.query(true))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var l streamLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("event stream: decode line: %w", err)
		}
		if l.Error != "" {
			return fmt.Errorf("event stream: %s", l.Error)
		}
		if err := fn(l.Event); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	return errors.New("event stream: the daemon closed the stream (did it stop?)")
}
