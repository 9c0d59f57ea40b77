package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/topology/topologytest"
	"github.com/node-resized/node-resized/types"
)

// syncRelay is a relay whose Node watch has listed the Node or not.
type syncRelay struct{ synced atomic.Bool }

func (r *syncRelay) Stats() types.RelayStats { return types.RelayStats{NodeSynced: r.synced.Load()} }

// serveTCP serves srv's TCP endpoints on a loopback port until the test
// ends and returns the base URL.
func serveTCP(t *testing.T, srv *api.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeTCP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := within(t, done, "ServeTCP"); err != nil {
			t.Errorf("ServeTCP: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// get does one request and returns the status code and body; an API error
// body is returned as its message.
func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var apiErr api.Error
	if resp.StatusCode/100 != 2 && json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
		return resp.StatusCode, apiErr.Error
	}
	return resp.StatusCode, string(body)
}

// The TCP listener serves the probes and the metrics and nothing else;
// /readyz waits for the relay's Node watch to list the Node.
func TestServeTCPProbes(t *testing.T) {
	e := startAPI(t)
	relay := &syncRelay{}
	srv := api.NewServer(e.mon, e.metrics, api.Info{Mode: "kubernetes", NodeName: "node-a", Relay: relay}, nil)
	base := serveTCP(t, srv)

	if code, body := get(t, http.MethodGet, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("GET /healthz: %d %s, want 200 ok", code, body)
	}
	code, body := get(t, http.MethodGet, base+"/readyz")
	if code != http.StatusServiceUnavailable || body != "the Node node-a has not been listed from the API server yet" {
		t.Errorf("GET /readyz before the Node is listed: %d %q, want 503 saying so", code, body)
	}
	relay.synced.Store(true)
	if code, body := get(t, http.MethodGet, base+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz once the Node is listed: %d %s, want 200", code, body)
	}
	if code, body := get(t, http.MethodGet, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "node_resized_physical_capacity") {
		t.Errorf("GET /metrics: %d, want 200 with the capacity gauges:\n%s", code, body)
	}
	before := e.mon.Stats().Rebuilds
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/v1/status"}, {http.MethodGet, "/v1/topology"}, {http.MethodPost, "/v1/resync"},
	} {
		if code, body := get(t, r.method, base+r.path); code != http.StatusNotFound || !strings.Contains(body, "unix socket") {
			t.Errorf("%s %s on TCP: %d %q, want a 404 that points at the socket", r.method, r.path, code, body)
		}
	}
	if after := e.mon.Stats().Rebuilds; after != before {
		t.Errorf("%d rebuilds after POST /v1/resync on TCP, want none", after-before)
	}
	if code, _ := get(t, http.MethodPost, base+"/healthz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz on TCP: %d, want 405", code)
	}
}

// A stopped detection loop fails both probes, on the socket and on TCP,
// with the reason; a running one passes them (standalone: no relay).
func TestProbesFailWhenLoopStops(t *testing.T) {
	e := startAPI(t)
	base := serveTCP(t, api.NewServer(e.mon, e.metrics, api.Info{Mode: "standalone"}, nil))
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, body := e.raw(http.MethodGet, p); code != http.StatusOK {
			t.Errorf("socket GET %s of a running loop: %d %s", p, code, body)
		}
		if code, body := get(t, http.MethodGet, base+p); code != http.StatusOK {
			t.Errorf("TCP GET %s of a running loop: %d %s", p, code, body)
		}
	}
	e.stopMon()
	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := get(t, http.MethodGet, base+p)
		if code != http.StatusServiceUnavailable || body != "the detection loop has stopped" {
			t.Errorf("TCP GET %s of a stopped loop: %d %q, want 503 \"the detection loop has stopped\"", p, code, body)
		}
		code, _, raw := e.raw(http.MethodGet, p)
		var apiErr api.Error
		if err := json.Unmarshal(raw, &apiErr); err != nil || code != http.StatusServiceUnavailable || apiErr.Error != "the detection loop has stopped" {
			t.Errorf("socket GET %s of a stopped loop: %d %s", p, code, raw)
		}
	}
}

// A loop that no longer turns (here stuck in a subscriber) fails the
// probes once AliveTimeout passes, as it starves the watchdog.
func TestProbesFailWhenLoopIsStuck(t *testing.T) {
	tree := apiMachine().WriteTree(t, topologytest.Dir(t))
	fsys, err := topology.NewFS(tree.Sys, tree.Proc)
	if err != nil {
		t.Fatal(err)
	}
	var block atomic.Bool
	release := make(chan struct{})
	stuck := monitor.SubscriberFunc(func(monitor.Change, *topology.Snapshot) {
		if block.Load() {
			<-release
		}
	})
	m := metrics.New()
	mon := monitor.New(fsys, nil, monitor.Config{MemPoll: -1, Resync: -1, Metrics: m, Subscribers: []monitor.Subscriber{stuck}})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- mon.Run(ctx) }()
	t.Cleanup(func() {
		close(release)
		stop()
		if err := within(t, ran, "Run"); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-mon.Ready()
	srv := api.NewServer(mon, m, api.Info{Mode: "standalone"}, nil)
	srv.AliveTimeout = 300 * time.Millisecond
	base := serveTCP(t, srv)
	if code, body := get(t, http.MethodGet, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz of a running loop: %d %s", code, body)
	}

	block.Store(true)
	tree.SetCPUOnline(3, false)
	go func() { _, _ = mon.Resync(ctx) }() // the loop tells the subscriber, which never returns
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, http.MethodGet, base+"/healthz")
		if code == http.StatusServiceUnavailable {
			if body != "the detection loop did not answer within 300ms" {
				t.Errorf("GET /healthz of a stuck loop: %q, want the reason", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz still %d %s 10s after the loop got stuck", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get(t, http.MethodGet, base+"/readyz"); code != http.StatusServiceUnavailable || body != "the detection loop did not answer within 300ms" {
		t.Errorf("GET /readyz of a stuck loop: %d %q", code, body)
	}
}
