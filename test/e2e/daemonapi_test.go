package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The daemon's local API as its clients see it: the JSON documented in
// docs/operating.md, read over its unix socket. The tests read the wire format rather
// than the daemon's Go types, so that they check what the daemon shows and
// do not depend on how its packages are laid out.

// daemonStatus is GET /v1/status, the fields the tests use.
type daemonStatus struct {
	Physical   corev1.ResourceList `json:"physical"`
	LastChange *daemonChange       `json:"lastChange"`
	Stats      daemonStats         `json:"stats"`
	Kubernetes *daemonKubernetes   `json:"kubernetes"`
}

// daemonChange is one recorded change (GET /v1/events, lastChange).
type daemonChange struct {
	ID             uint64              `json:"id"`
	Triggers       []string            `json:"triggers"`
	Events         int                 `json:"events"`
	Seqnums        string              `json:"seqnums"`
	LatencySeconds float64             `json:"latencySeconds"`
	Changes        []modelChange       `json:"changes"`
	Capacity       corev1.ResourceList `json:"capacity"`
}

type modelChange struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// daemonStats are the detection loop's counters.
type daemonStats struct {
	Rebuilds   uint64 `json:"rebuilds"`
	Changes    uint64 `json:"changes"`
	Uevents    uint64 `json:"uevents"`
	LostEvents uint64 `json:"lostEvents"`
}

// daemonKubernetes is what the daemon decided and published for its Node.
type daemonKubernetes struct {
	Target       corev1.ResourceList `json:"target"`
	Patches      uint64              `json:"patches"`
	PatchPending bool                `json:"patchPending"`
	PatchError   string              `json:"patchError"`
	Taint        string              `json:"taint"`
}

// daemonAPI calls the daemon's API on its socket.
func (e *env) daemonAPI(ctx context.Context, method, path string, out any) error {
	c := http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.d.Socket)
		},
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://node-resized"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// status returns GET /v1/status.
func (e *env) status() (*daemonStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st daemonStatus
	return &st, e.daemonAPI(ctx, http.MethodGet, "/v1/status", &st)
}

// mustStatus is status, stopping the test on an error.
func (e *env) mustStatus() *daemonStatus {
	e.t.Helper()
	st, err := e.status()
	if err != nil {
		e.t.Fatalf("daemon status: %v", err)
	}
	return st
}

// changes returns the recorded changes after change id since, oldest
// first (GET /v1/events?since=ID).
func (e *env) changes(since uint64) []daemonChange {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []daemonChange
	if err := e.daemonAPI(ctx, http.MethodGet, fmt.Sprintf("/v1/events?since=%d", since), &out); err != nil {
		e.t.Fatalf("daemon events: %v", err)
	}
	return out
}
