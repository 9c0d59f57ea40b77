package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// QMP is a small client of the QEMU Machine Protocol: it reads the
// greeting, negotiates capabilities, matches replies to commands by id and
// delivers asynchronous events to waiters. It is safe for concurrent use.
type QMP struct {
	conn net.Conn
	done chan struct{} // closed when the read loop ends

	wmu sync.Mutex // guards writes to conn

	mu      sync.Mutex // guards the fields below
	nextID  uint64
	pending map[string]chan qmpReply
	waiters map[*EventWaiter]struct{}
	err     error // why the read loop ended

	// Version is QEMU's version from the greeting, e.g. "7.2.18".
	Version string
}

// Event is an asynchronous QMP event.
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
	Time time.Time       `json:"-"`
}

// QMPError is an error reply to a QMP command.
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// ErrQMPClosed is returned once the QMP connection has ended.
var ErrQMPClosed = errors.New("qmp connection closed")

type qmpReply struct {
	ret json.RawMessage
	err *QMPError
}

// qmpMessage is any message QEMU sends.
type qmpMessage struct {
	QMP *struct {
		Version struct {
			QEMU struct{ Major, Minor, Micro int } `json:"qemu"`
		} `json:"version"`
	} `json:"QMP"`
	Return    json.RawMessage `json:"return"`
	Error     *struct{ Class, Desc string }
	ID        json.RawMessage `json:"id"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct{ Seconds, Microseconds int64 }
}

// DialQMP connects to a QMP unix socket, retrying until it exists or ctx
// ends, and negotiates capabilities.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return NewQMP(ctx, conn)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial qmp %s: %w (last error: %v)", path, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// NewQMP runs the QMP handshake on conn and starts reading from it. The
// QMP owns conn from then on.
func NewQMP(ctx context.Context, conn net.Conn) (*QMP, error) {
	q := &QMP{
		conn:    conn,
		done:    make(chan struct{}),
		pending: map[string]chan qmpReply{},
		waiters: map[*EventWaiter]struct{}{},
	}
	dec := json.NewDecoder(bufio.NewReader(conn))
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	}
	var greet qmpMessage
	if err := dec.Decode(&greet); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if greet.QMP == nil {
		conn.Close()
		return nil, errors.New("qmp greeting: not a QMP server")
	}
	v := greet.QMP.Version.QEMU
	q.Version = fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
	conn.SetReadDeadline(time.Time{})
	go q.readLoop(dec)
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *QMP) readLoop(dec *json.Decoder) {
	var err error
	for {
		var m qmpMessage
		if err = dec.Decode(&m); err != nil {
			break
		}
		switch {
		case m.Event != "":
			ev := Event{Name: m.Event, Data: m.Data}
			if m.Timestamp != nil {
				ev.Time = time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000)
			}
			q.deliver(ev)
		case m.ID != nil:
			var id string
			if json.Unmarshal(m.ID, &id) != nil {
				continue
			}
			q.mu.Lock()
			ch := q.pending[id]
			delete(q.pending, id)
			q.mu.Unlock()
			if ch == nil {
				continue
			}
			r := qmpReply{ret: m.Return}
			if m.Error != nil {
				r.err = &QMPError{Class: m.Error.Class, Desc: m.Error.Desc}
			}
			ch <- r // buffered
		}
	}
	q.mu.Lock()
	q.err = fmt.Errorf("%w: %v", ErrQMPClosed, err)
	for id, ch := range q.pending {
		close(ch)
		delete(q.pending, id)
	}
	for w := range q.waiters {
		close(w.ch)
		delete(q.waiters, w)
	}
	q.mu.Unlock()
	close(q.done)
}

func (q *QMP) deliver(ev Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := range q.waiters {
		if w.match(ev) {
			w.ch <- ev // buffered, and the waiter is removed: never blocks
			close(w.ch)
			delete(q.waiters, w)
		}
	}
}

// Execute runs a QMP command with args (nil, or anything that marshals to
// a JSON object) and unmarshals its return value into result unless result
// is nil. An error reply is a *QMPError.
func (q *QMP) Execute(ctx context.Context, command string, args, result any) error {
	ch := make(chan qmpReply, 1)
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	q.nextID++
	id := "nr" + strconv.FormatUint(q.nextID, 10)
	q.pending[id] = ch
	q.mu.Unlock()
	forget := func() {
		q.mu.Lock()
		delete(q.pending, id)
		q.mu.Unlock()
	}

	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		forget()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	q.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		q.conn.SetWriteDeadline(dl)
	}
	_, err = q.conn.Write(append(b, '\n'))
	q.conn.SetWriteDeadline(time.Time{})
	q.wmu.Unlock()
	if err != nil {
		forget()
		return fmt.Errorf("qmp %s: write: %w", command, err)
	}

	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("qmp %s: %w", command, q.closedErr())
		}
		if r.err != nil {
			r.err.Command = command
			return r.err
		}
		if result != nil && len(r.ret) > 0 {
			if err := json.Unmarshal(r.ret, result); err != nil {
				return fmt.Errorf("qmp %s: decode reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		forget()
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (q *QMP) closedErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	return ErrQMPClosed
}

// EventWaiter waits for one event; see QMP.Expect.
type EventWaiter struct {
	q     *QMP
	match func(Event) bool
	ch    chan Event
}

// Expect registers interest in the first event for which match returns
// true. Register before running the command that causes the event, so that
// it cannot be missed; then call Wait, or Cancel.
func (q *QMP) Expect(match func(Event) bool) *EventWaiter {
	w := &EventWaiter{q: q, match: match, ch: make(chan Event, 1)}
	q.mu.Lock()
	if q.err != nil {
		close(w.ch)
	} else {
		q.waiters[w] = struct{}{}
	}
	q.mu.Unlock()
	return w
}

// Wait returns the matching event, or an error when ctx ends or the
// connection closes first.
func (w *EventWaiter) Wait(ctx context.Context) (Event, error) {
	select {
	case ev, ok := <-w.ch:
		if !ok {
			return Event{}, w.q.closedErr()
		}
		return ev, nil
	case <-ctx.Done():
		w.Cancel()
		return Event{}, ctx.Err()
	}
}

// Cancel stops waiting; it is safe to call more than once.
func (w *EventWaiter) Cancel() {
	w.q.mu.Lock()
	delete(w.q.waiters, w)
	w.q.mu.Unlock()
}

// Close closes the connection and waits for the reader to end. It is safe
// to call more than once.
func (q *QMP) Close() error {
	err := q.conn.Close()
	<-q.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
