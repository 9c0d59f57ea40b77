package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeQMP is the server end of a QMP connection. handle gets each command
// and returns the messages to send back, in order.
type fakeQMP struct {
	conn   net.Conn
	handle func(execute string, id json.RawMessage, args json.RawMessage) []string
	mu     sync.Mutex // guards writes
}

func startFakeQMP(t *testing.T, handle func(string, json.RawMessage, json.RawMessage) []string) (*QMP, *fakeQMP) {
	t.Helper()
	client, server := net.Pipe()
	f := &fakeQMP{conn: server, handle: handle}
	go func() {
		f.send(`{"QMP": {"version": {"qemu": {"micro": 18, "minor": 2, "major": 7}, "package": ""}, "capabilities": ["oob"]}}`)
		dec := json.NewDecoder(bufio.NewReader(server))
		for {
			var req struct {
				Execute   string          `json:"execute"`
				ID        json.RawMessage `json:"id"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if err := dec.Decode(&req); err != nil {
				return
			}
			if req.Execute == "qmp_capabilities" {
				f.send(fmt.Sprintf(`{"return": {}, "id": %s}`, req.ID))
				continue
			}
			for _, m := range f.handle(req.Execute, req.ID, req.Arguments) {
				f.send(m)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := NewQMP(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(); server.Close() })
	return q, f
}

func (f *fakeQMP) send(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conn.Write([]byte(msg + "\r\n"))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestQMPExecute(t *testing.T) {
	q, _ := startFakeQMP(t, func(cmd string, id, args json.RawMessage) []string {
		switch cmd {
		case "query-status":
			return []string{
				`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "SOMETHING", "data": {}}`,
				fmt.Sprintf(`{"return": {"status": "running", "running": true}, "id": %s}`, id),
			}
		default:
			return []string{fmt.Sprintf(`{"error": {"class": "CommandNotFound", "desc": "The command %s has not been found"}, "id": %s}`, cmd, id)}
		}
	})
	if q.Version != "7.2.18" {
		t.Errorf("Version = %q", q.Version)
	}
	var st struct{ Status string }
	if err := q.Execute(testCtx(t), "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Errorf("query-status = %+v, %v", st, err)
	}
	err := q.Execute(testCtx(t), "nope", map[string]any{"x": 1}, nil)
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "nope" {
		t.Errorf("err = %v, want a CommandNotFound QMPError", err)
	}
}

// TestQMPOutOfOrder answers two commands in reverse order; each caller
// must get its own reply.
func TestQMPOutOfOrder(t *testing.T) {
	var mu sync.Mutex
	var held []json.RawMessage
	q, _ := startFakeQMP(t, func(cmd string, id, args json.RawMessage) []string {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, id)
		if len(held) < 2 {
			return nil
		}
		return []string{
			fmt.Sprintf(`{"return": %s, "id": %s}`, held[1], held[1]),
			fmt.Sprintf(`{"return": %s, "id": %s}`, held[0], held[0]),
		}
	})
	var wg sync.WaitGroup
	got := make(chan string, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var id string // the fake returns each command's own id
			if err := q.Execute(testCtx(t), "echo-id", nil, &id); err != nil {
				t.Error(err)
			}
			got <- id
		}()
	}
	wg.Wait()
	if a, b := <-got, <-got; a == b || a == "" || b == "" {
		t.Errorf("replies %q and %q: each caller must get its own", a, b)
	}
}

func TestQMPEvents(t *testing.T) {
	q, f := startFakeQMP(t, func(cmd string, id, args json.RawMessage) []string {
		return []string{
			fmt.Sprintf(`{"return": {}, "id": %s}`, id),
			`{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "DEVICE_DELETED", "data": {"path": "/machine/peripheral/d1/lapic"}}`,
			`{"timestamp": {"seconds": 1700000001, "microseconds": 5}, "event": "DEVICE_DELETED", "data": {"device": "d1", "path": "/machine/peripheral/d1"}}`,
		}
	})
	w := q.Expect(func(ev Event) bool { return deviceGone(ev, "d1") })
	other := q.Expect(func(ev Event) bool { return ev.Name == "NEVER" })
	if err := q.Execute(testCtx(t), "device_del", map[string]any{"id": "d1"}, nil); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Wait(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Time.Unix() != 1700000001 {
		t.Errorf("event time %v", ev.Time)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := other.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unmatched waiter: err = %v", err)
	}
	// An event sent after the connection ends never comes: Wait fails.
	late := q.Expect(func(Event) bool { return true })
	f.conn.Close()
	if _, err := late.Wait(testCtx(t)); !errors.Is(err, ErrQMPClosed) {
		t.Errorf("Wait after close: err = %v, want ErrQMPClosed", err)
	}
	if err := q.Execute(testCtx(t), "x", nil, nil); !errors.Is(err, ErrQMPClosed) {
		t.Errorf("Execute after close: err = %v, want ErrQMPClosed", err)
	}
}

func TestQMPTimeout(t *testing.T) {
	q, _ := startFakeQMP(t, func(string, json.RawMessage, json.RawMessage) []string { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Execute(ctx, "hang", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestQMPBadGreeting(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go server.Write([]byte(`{"return": {}}` + "\n"))
	if _, err := NewQMP(testCtx(t), client); err == nil {
		t.Error("no error for a server that is not QMP")
	}
}

func TestEjectEvents(t *testing.T) {
	ost := func(dev string, source, status int) Event {
		return Event{Name: "ACPI_DEVICE_OST", Data: json.RawMessage(fmt.Sprintf(
			`{"info": {"device": %q, "source": %d, "status": %d, "slot": "2", "slot-type": "CPU"}}`, dev, source, status))}
	}
	for _, tc := range []struct {
		ev      Event
		refused bool
	}{
		{ost("c1", 3, 0x84), false}, // eject in progress
		{ost("c1", 3, 0), false},
		{ost("c1", 1, 0), false},    // insertion
		{ost("c2", 3, 0x82), false}, // another device
		{ost("c1", 3, 0x82), true},  // device busy
		{ost("c1", 3, 1), true},
		// pseries: no ACPI; QEMU says the guest took the device back.
		{Event{Name: "DEVICE_UNPLUG_GUEST_ERROR", Data: json.RawMessage(`{"device": "c1", "path": "/machine/peripheral/c1"}`)}, true},
		{Event{Name: "DEVICE_UNPLUG_GUEST_ERROR", Data: json.RawMessage(`{"device": "c2", "path": "/machine/peripheral/c2"}`)}, false},
	} {
		if got := ejectRefused(tc.ev, "c1") != nil; got != tc.refused {
			t.Errorf("ejectRefused(%s) = %v, want %v", tc.ev.Data, got, tc.refused)
		}
	}
	if deviceGone(Event{Name: "DEVICE_DELETED", Data: json.RawMessage(`{"path": "/machine/peripheral/c1/lapic"}`)}, "c1") {
		t.Error("a child's DEVICE_DELETED counted as the device's")
	}
}
