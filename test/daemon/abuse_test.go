package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/internal/cpu1test"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/test/internal/daemontest"
)

// The local API under abuse: clients that open connections and streams
// and abandon them must neither blind the detection loop nor grow the
// daemon without bound.

// flood opens n connections to the socket, each sending one request for
// path and then reading nothing (abandoned); it returns them (closed when
// the test ends) and how many could not even be dialled.
func flood(t *testing.T, socket string, n int, path func(i int) string) (conns []net.Conn, dialFailed int) {
	t.Helper()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.DialTimeout("unix", socket, time.Second)
		if err != nil {
			dialFailed++
			continue
		}
		conns = append(conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, "GET "+path(i)+" HTTP/1.1\r\nHost: node-resized\r\n\r\n")
	}
	return conns, dialFailed
}

// stillOpen counts the connections of conns the daemon has not closed:
// a read finds no EOF or reset within a moment (an answer that waits is
// read and dropped).
func stillOpen(conns []net.Conn) int {
	open := 0
	buf := make([]byte, 64<<10)
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		for {
			_, err := c.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				open++
				break
			}
			if err != nil {
				break // EOF or reset: closed by the daemon
			}
		}
	}
	return open
}

// heldConnections is how many descriptors the daemon holds beyond
// baseline, waiting for the count to settle (refusals in flight end
// within a second).
func heldConnections(t *testing.T, d *daemon, baseline int) int {
	t.Helper()
	var n int
	for range 20 {
		fds, err := d.OpenFiles()
		if err != nil {
			t.Fatal(err)
		}
		if fds-baseline == n {
			break
		}
		n = fds - baseline
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// TestDetectionWithAPIAtItsCap fills the API with abandoned connections
// and streams, up to and far beyond its caps and the open-files limit of
// the daemon (made hard too, so that the daemon cannot raise it), and
// takes the real cpu1 offline and back: the detection loop must see both
// as it does with an idle API. At 1024, systemd's default soft limit, the
// default cap fits; at 700 the daemon must lower it.
func TestDetectionWithAPIAtItsCap(t *testing.T) {
	cpu1test.Need(t)
	for _, nofile := range []int{1024, 700} {
		t.Run(fmt.Sprintf("nofile=%d", nofile), func(t *testing.T) { detectionAtTheCap(t, nofile) })
	}
}

func detectionAtTheCap(t *testing.T, nofile int) {
	d := &daemon{Daemon: daemontest.StartNoFile(t, uint64(nofile), binDir+"/node-resized", "--standalone"), t: t}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	initial := st.Physical["cpu"] / 1000
	// The observer's stream is opened first: it holds one of the slots.
	changes := make(chan monitor.Change, 64)
	go func() {
		_ = d.Client.Follow(ctx, api.Cursor{Epoch: st.Epoch, ID: st.LastChange.ID}, func(ev api.Event) error {
			changes <- ev.Change
			return nil
		})
	}()
	time.Sleep(200 * time.Millisecond)
	baseline, err := d.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}

	// Half the abusers ask for a stream, half for the status, and none
	// reads its answer: more connections than the daemon may open files.
	abusers := nofile + 100
	conns, dialFailed := flood(t, d.Socket, abusers, func(i int) string {
		if i%2 == 0 {
			return "/v1/events?follow=1"
		}
		return "/v1/status"
	})
	held := heldConnections(t, d, baseline)
	open := stillOpen(conns)
	t.Logf("%d abandoned connections (%d could not be dialled): the daemon holds %d descriptors more than before them (%d at the start, limit %d), %d of them still open",
		abusers, dialFailed, held, baseline, nofile, open)
	if fds := baseline + held; fds > nofile-256 {
		t.Errorf("the daemon holds %d descriptors of its %d with the API at its cap: no room left for detection", fds, nofile)
	}

	await := func(what string, wantCPU int64, kind string, since time.Time) time.Duration {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case c := <-changes:
				if c.Capacity["cpu"] == wantCPU*1000 && hasKind(c, kind) {
					took := time.Since(since)
					t.Logf("cpu1 %s seen %v after the write (uevent to model %v) with the API at its cap", what, took.Round(time.Microsecond), c.Latency().Round(time.Microsecond))
					return took
				}
			case <-timeout:
				t.Fatalf("cpu1 %s not seen within 10s with the API at its cap", what)
			}
		}
	}
	start := time.Now()
	if err := daemontest.SetCPU1(false); err != nil {
		t.Fatal(err)
	}
	await("offline", initial-1, "cpu_offline", start)
	start = time.Now()
	if err := daemontest.SetCPU1(true); err != nil {
		t.Fatal(err)
	}
	await("online", initial, "cpu_online", start)

	// The API still answers once the abusers and the observer are gone
	// (a lowered cap may be the observer's one slot), and nothing in
	// detection failed meanwhile.
	for _, c := range conns {
		c.Close()
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = d.Client.Status(context.Background()); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("status once the abusers are gone: %v", err)
	}
	lowered := len(d.Stderr.Records("lowered the API's connection cap to leave the detection loop room below the open-files limit (raise LimitNOFILE)"))
	if want := 2*baseline+api.Refusers+1+api.DefaultMaxConnections > nofile; (lowered > 0) != want {
		t.Errorf("the daemon lowered its connection cap: %v, want %v (%d open of %d)", lowered > 0, want, baseline, nofile)
	}
	log := d.Stderr.String()
	for _, bad := range []string{"too many open files", "MemTotal watch", `"level":"ERROR"`} {
		if strings.Contains(log, bad) {
			t.Errorf("the daemon's log has %q with the API at its cap", bad)
		}
	}
}

// TestAbandonedFollowStreams opens 5,000 event streams and abandons them
// (open, never read): the daemon's memory and descriptors stay bounded.
func TestAbandonedFollowStreams(t *testing.T) {
	d := startDaemon(t, "--uevents=false")
	n := 5000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if room := int(rl.Cur) - 200; room < n {
		t.Fatalf("this test opens %d connections and may open %d files: raise the open-files limit", n, rl.Cur)
	}
	time.Sleep(500 * time.Millisecond) // the start-up's allocations done
	rss0, err := d.RSS()
	if err != nil {
		t.Fatal(err)
	}
	fds0, err := d.OpenFiles()
	if err != nil {
		t.Fatal(err)
	}
	conns, dialFailed := flood(t, d.Socket, n, func(int) string { return "/v1/events?follow=1" })
	held := heldConnections(t, d, fds0)
	rss, err := d.RSS()
	if err != nil {
		t.Fatal(err)
	}
	open := stillOpen(conns)
	t.Logf("%d abandoned follow streams (%d could not be dialled): RSS %s → %s, %d descriptors held beyond the %d at the start, %d connections still open",
		n, dialFailed, api.FormatBytes(rss0), api.FormatBytes(rss), held, fds0, open)
	if grew := int64(rss) - int64(rss0); grew > 32<<20 {
		t.Errorf("RSS grew by %s with abandoned streams", api.FormatBytes(uint64(grew)))
	}
	if limit := api.DefaultMaxConnections + api.Refusers + 8; held > limit {
		t.Errorf("the daemon holds %d connections, want at most %d (the cap, the refusers and a few in between)", held, limit)
	}
	if _, err := d.Client.Status(context.Background()); err != nil && !strings.Contains(err.Error(), "503") {
		t.Errorf("status with the API at its cap = %v, want an answer or a 503", err)
	}
	for _, c := range conns {
		c.Close()
	}
	if err := d.stop(t); err != nil {
		t.Errorf("exit after SIGTERM with abandoned streams: %v", err)
	}
}

// TestSIGHUPResyncs sends SIGHUP: the daemon logs it, rebuilds its model
// and keeps serving; SIGTERM then stops it cleanly, the socket removed.
func TestSIGHUPResyncs(t *testing.T) {
	d := startDaemon(t, "--uevents=false")
	ctx := context.Background()
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := d.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(d.Stderr.Records("SIGHUP: resync done")) <= i {
			time.Sleep(20 * time.Millisecond)
			if err := d.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("the daemon is gone after SIGHUP %d: %v\n%s", i+1, err, d.Stderr.String())
			}
			if time.Now().After(deadline) {
				t.Fatalf("no resync logged within 10s of SIGHUP %d", i+1)
			}
		}
	}
	after, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatalf("status after SIGHUP: %v", err)
	}
	if after.Epoch != st.Epoch || after.Stats.Rebuilds < st.Stats.Rebuilds+2 {
		t.Errorf("after two SIGHUPs: epoch %s (was %s), %d rebuilds (was %d); want the same run, two rebuilds more",
			after.Epoch, st.Epoch, after.Stats.Rebuilds, st.Stats.Rebuilds)
	}
	if err := d.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
	if _, err := os.Lstat(d.socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after exit: %v", err)
	}
}
