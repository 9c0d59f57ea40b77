package vm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// agentClient speaks the agent protocol (see test/vm/guestagent) over the
// host end of the virtio-serial port. It is safe for concurrent use; the
// guest runs requests concurrently, each reply carrying its token.
type agentClient struct {
	conn net.Conn
	done chan struct{} // closed when the read loop ends

	wmu sync.Mutex // guards writes to conn

	mu      sync.Mutex // guards waiting, err and readies
	waiting map[string]chan agentResult
	err     error
	readies int // "@@READY" banners seen
}

type agentResult struct {
	out  string
	code int
	err  error
}

// errAgentClosed is returned once the agent connection has ended.
var errAgentClosed = errors.New("agent connection closed")

func newAgentClient(conn net.Conn) *agentClient {
	a := &agentClient{conn: conn, done: make(chan struct{}), waiting: map[string]chan agentResult{}}
	go a.readLoop(conn)
	return a
}

func (a *agentClient) readLoop(r io.Reader) {
	br := bufio.NewReader(r)
	var body strings.Builder
	var err error
	for {
		var line string
		line, err = br.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "@@READY":
			body.Reset()
			a.mu.Lock()
			a.readies++
			a.mu.Unlock()
		case strings.HasPrefix(line, "@@END "):
			a.finish(line, body.String())
			body.Reset()
		default:
			body.WriteString(line)
		}
	}
	a.mu.Lock()
	a.err = fmt.Errorf("%w: %v", errAgentClosed, err)
	for tok, ch := range a.waiting {
		close(ch)
		delete(a.waiting, tok)
	}
	a.mu.Unlock()
	close(a.done)
}

// finish hands the result of "@@END TOKEN CODE" to whoever waits for
// TOKEN. Results nobody waits for (a request whose caller gave up) are
// dropped.
func (a *agentClient) finish(line, body string) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return
	}
	a.mu.Lock()
	ch := a.waiting[f[1]]
	delete(a.waiting, f[1])
	a.mu.Unlock()
	if ch == nil {
		return
	}
	var r agentResult
	out, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		r.err = fmt.Errorf("decode agent output: %w", err)
	}
	r.out = string(out)
	if r.code, err = strconv.Atoi(f[2]); err != nil && r.err == nil {
		r.err = fmt.Errorf("agent exit code %q: %w", f[2], err)
	}
	ch <- r // buffered
}

// exec sends one command and waits for its result.
func (a *agentClient) exec(ctx context.Context, cmd string) (string, int, error) {
	var b [8]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	ch := make(chan agentResult, 1)
	a.mu.Lock()
	if a.err != nil {
		err := a.err
		a.mu.Unlock()
		return "", -1, err
	}
	a.waiting[tok] = ch
	a.mu.Unlock()
	forget := func() {
		a.mu.Lock()
		delete(a.waiting, tok)
		a.mu.Unlock()
	}

	req := tok + " " + base64.StdEncoding.EncodeToString([]byte(cmd)) + "\n"
	a.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		a.conn.SetWriteDeadline(dl)
	}
	_, err := io.WriteString(a.conn, req)
	a.conn.SetWriteDeadline(time.Time{})
	a.wmu.Unlock()
	if err != nil {
		forget()
		return "", -1, fmt.Errorf("send to agent: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			a.mu.Lock()
			err := a.err
			a.mu.Unlock()
			return "", -1, err
		}
		return r.out, r.code, r.err
	case <-ctx.Done():
		forget()
		return "", -1, ctx.Err()
	}
}

func (a *agentClient) close() {
	a.conn.Close()
	<-a.done
}
