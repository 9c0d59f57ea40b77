package e2e

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The real daemon with --listen-address serves its probes and metrics on
// TCP: /healthz at once, /readyz once its Node watch has listed the Node
// from the real API server, and nothing of the rest of the API. Without
// --node-name it speaks for the Node its kubeconfig's identity names
// (system:node:<name>).
func TestProbesOnTCP(t *testing.T) {
	e := setup(t, nodeProbes, envOptions{cpus: 4, nameFromKubeconfig: true, args: []string{"--listen-address", "127.0.0.1:0"}})
	base := "http://" + e.listenAddress()
	var st struct {
		Kubernetes struct{ NodeName, NodeNameSource string } `json:"kubernetes"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.daemonAPI(ctx, http.MethodGet, "/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if k := st.Kubernetes; k.NodeName != nodeProbes || k.NodeNameSource != "kubeconfig user name" {
		t.Fatalf("/v1/status kubernetes node %q from %q, want %s named by the kubeconfig user name", k.NodeName, k.NodeNameSource, nodeProbes)
	}

	e.waitHTTP(base+"/healthz", http.StatusOK, `"ok"`)
	e.waitHTTP(base+"/readyz", http.StatusOK, `"ok"`)
	e.waitHTTP(base+"/metrics", http.StatusOK, `node_resized_physical_capacity{resource="cpu",unit="core"} 4`)
	e.waitHTTP(base+"/metrics", http.StatusOK, `node_resized_physical_capacity{resource="memory",unit="byte"} 4.294967296e+09`)
	e.waitHTTP(base+"/metrics", http.StatusOK, `node_resized_build_info{branch="",goarch="`+runtime.GOARCH+`",goos="linux",goversion="`+runtime.Version()+`"`)
	e.waitHTTP(base+"/v1/status", http.StatusNotFound, "unix socket")
}

// listenAddress is the TCP address the daemon says it listens on (the
// port the kernel chose for :0).
func (e *env) listenAddress() string {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, r := range e.d.Stderr.Records("node-resized ready") {
			if a, _ := r["listen_address"].(string); a != "" && !strings.HasSuffix(a, ":0") {
				return a
			}
		}
	}
	e.t.Fatal("the daemon logged no listen_address within 30s")
	return ""
}

// waitHTTP polls url until it answers code with a body containing want
// (30s at most).
func (e *env) waitHTTP(url string, code int, want string) {
	e.t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := c.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp.Status + " " + string(body)
		if resp.StatusCode == code && strings.Contains(string(body), want) {
			return
		}
	}
	e.t.Fatalf("GET %s: want %d with %q within 30s; last answer: %s", url, code, want, last)
}
