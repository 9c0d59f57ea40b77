package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/node-resized/node-resized/kube/internal/kubetest"
	"github.com/node-resized/node-resized/types"
)

// nodeJSON is the Node worker-1 as an API server newer than the client
// sends it: spec.configuredCapacity and a status field the typed client
// does not know.
func nodeJSON(rv, spec, annotation string) string {
	meta := map[string]any{"name": "worker-1", "resourceVersion": rv}
	if annotation != "" {
		meta["annotations"] = map[string]string{types.AnnotationConfiguredCapacity: annotation}
	}
	n := map[string]any{
		"apiVersion": "v1", "kind": "Node", "metadata": meta,
		"status": map[string]any{
			"capacity":    map[string]string{"cpu": "4", "memory": "8Gi"},
			"futureField": map[string]string{"x": "y"},
		},
	}
	if spec != "" {
		n["spec"] = map[string]any{"configuredCapacity": json.RawMessage(spec)}
	}
	b, _ := json.Marshal(n)
	return string(b)
}

func nodeList(rv string, items ...string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"NodeList","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(items, ","))
}

func event(typ, object string) string { return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, object) }

const expired = `{"apiVersion":"v1","kind":"Status","status":"Failure","message":"too old resource version: 15 (18)","reason":"Expired","code":410}`

// fakeAPIServer speaks the list and watch protocol of the API server for
// the nodes resource. lists and watches answer the n-th list and watch;
// a watch answer of nil hangs until the client goes.
type fakeAPIServer struct {
	t       *testing.T
	lists   []func(http.ResponseWriter)
	watches [][]string
	get     string

	mu       sync.Mutex
	requests []string // "list ?query" or "watch ?query", in order
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case r.URL.Path == "/api/v1/nodes/worker-1" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, f.get)
	case r.URL.Path == "/api/v1/nodes" && q.Get("watch") == "true":
		f.serveWatch(w, r, f.record("watch", q))
	case r.URL.Path == "/api/v1/nodes":
		n := f.record("list", q)
		if n >= len(f.lists) {
			http.Error(w, "no more lists", http.StatusInternalServerError)
			return
		}
		f.lists[n](w)
	default:
		http.NotFound(w, r)
	}
}

// record notes a request and returns how many of its kind came before.
func (f *fakeAPIServer) record(kind string, q url.Values) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasPrefix(r, kind+" ") {
			n++
		}
	}
	f.requests = append(f.requests, kind+" "+q.Encode())
	return n
}

func (f *fakeAPIServer) serveWatch(w http.ResponseWriter, r *http.Request, n int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if n >= len(f.watches) || f.watches[n] == nil {
		<-r.Context().Done()
		return
	}
	for _, ev := range f.watches[n] {
		fmt.Fprintln(w, ev)
		w.(http.Flusher).Flush()
	}
}

func (f *fakeAPIServer) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func listAnswer(body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}
}

// startRelayOn runs a relay whose clients speak to srv.
func startRelayOn(t *testing.T, srv *httptest.Server, log *slog.Logger, subs ...NodeSubscriber) *Relay {
	t.Helper()
	r, err := connect(&rest.Config{Host: srv.URL}, Options{NodeName: "worker-1", NodeSubscribers: subs, Logger: log,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Run(t, r.Run)
	return r
}

// TestWatchKeepsUnknownFieldsAndFollowsBookmarks runs the relay's watch
// against an API server that is away at first, then lists the Node from
// its cache, sends a change and a bookmark, ends the watch, expires the
// bookmark's resourceVersion, and serves the Node again. Every view keeps
// spec.configuredCapacity (a field the typed client would drop) or the
// annotation; the watch resumes from the bookmark, and starts over with a
// list when its resourceVersion expired.
func TestWatchKeepsUnknownFieldsAndFollowsBookmarks(t *testing.T) {
	api := &fakeAPIServer{t: t,
		lists: []func(http.ResponseWriter){
			func(w http.ResponseWriter) { http.Error(w, "etcd is away", http.StatusInternalServerError) },
			listAnswer(nodeList("10", nodeJSON("10", `{"cpu":"3","memory":"6Gi"}`, `{"cpu":"1"}`))),
			listAnswer(nodeList("20", nodeJSON("20", "", `{"cpu":"2"}`))),
		},
		watches: [][]string{
			{event("MODIFIED", nodeJSON("11", `{"cpu":"5"}`, `{"cpu":"1"}`)),
				event("BOOKMARK", `{"apiVersion":"v1","kind":"Node","metadata":{"resourceVersion":"15"}}`)},
			{event("ERROR", expired)},
			nil,
		},
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	views := make(chan types.NodeView, 10)
	logs := &kubetest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	startRelayOn(t, srv, log, NodeSubscriberFunc(func(v types.NodeView) { views <- v }))

	for i, want := range []struct {
		source, cpu, rv string
	}{
		{types.SourceSpec, "3", "10"},
		{types.SourceSpec, "5", "11"},
		{types.SourceAnnotation, "2", "20"},
	} {
		var v types.NodeView
		select {
		case v = <-views:
		case <-time.After(10 * time.Second):
			t.Fatalf("view %d: none; requests %q", i, api.seen())
		}
		if v.Source != want.source || v.Configured.Raw["cpu"] != want.cpu || v.ResourceVersion != want.rv || v.Capacity["cpu"] != 4000 {
			t.Errorf("view %d: source %q configured %v rv %s capacity %v; want %s cpu %s rv %s", i,
				v.Source, v.Configured.Raw, v.ResourceVersion, v.Capacity, want.source, want.cpu, want.rv)
		}
	}
	want := []struct{ kind, rv string }{{"list", "0"}, {"list", "0"}, {"watch", "10"}, {"watch", "15"}, {"list", ""}, {"watch", "20"}}
	kubetest.WaitFor(t, "the watch from the new list", func() bool { return len(api.seen()) >= len(want) })
	reqs := api.seen()
	for i, w := range want {
		kind, query, _ := strings.Cut(reqs[i], " ")
		q, _ := url.ParseQuery(query)
		if kind != w.kind || (w.rv != "" && q.Get("resourceVersion") != w.rv) {
			t.Errorf("request %d: %s, want a %s from resourceVersion %q", i, reqs[i], w.kind, w.rv)
		}
		if q.Get("fieldSelector") != "metadata.name=worker-1" {
			t.Errorf("request %d: %s, want the field selector metadata.name=worker-1", i, reqs[i])
		}
		if kind == "watch" && q.Get("allowWatchBookmarks") != "true" {
			t.Errorf("request %d: %s, want bookmarks allowed", i, reqs[i])
		}
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "etcd is away") || strings.Contains(l, "level=ERROR") {
		t.Errorf("the failed list is not logged as a warning:\n%s", l)
	}
}

// TestGetNodeKeepsUnknownFields: the start-up read sees
// spec.configuredCapacity too.
func TestGetNodeKeepsUnknownFields(t *testing.T) {
	srv := httptest.NewServer(&fakeAPIServer{t: t, get: nodeJSON("7", `{"cpu":"3"}`, `{"cpu":"1"}`)})
	t.Cleanup(srv.Close)
	r, err := connect(&rest.Config{Host: srv.URL}, Options{NodeName: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.GetNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Source != types.SourceSpec || v.Configured.Raw["cpu"] != "3" || v.ResourceVersion != "7" {
		t.Errorf("GetNode: source %q configured %v rv %s; want spec cpu 3 rv 7", v.Source, v.Configured.Raw, v.ResourceVersion)
	}
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.GetNode(ctx); err == nil || !strings.Contains(err.Error(), "get Node worker-1") {
		t.Errorf("GetNode with the API server away = %v, want an error naming the Node", err)
	}
}

// The relay's Stats say the Node watch is synced once a list has
// answered, not before: a failed list and a list in flight do not count.
func TestWatchSyncedAfterTheFirstList(t *testing.T) {
	gate := make(chan struct{})
	api := &fakeAPIServer{t: t,
		lists: []func(http.ResponseWriter){
			func(w http.ResponseWriter) { http.Error(w, "etcd is away", http.StatusInternalServerError) },
			func(w http.ResponseWriter) {
				<-gate
				listAnswer(nodeList("10", nodeJSON("10", "", "")))(w)
			},
		},
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before srv.Close, which waits for the list in flight
	r := startRelayOn(t, srv, nil)
	kubetest.WaitFor(t, "the second list", func() bool { return len(api.seen()) >= 2 })
	if r.Stats().NodeSynced {
		t.Fatal("NodeSynced before any list answered")
	}
	open()
	kubetest.WaitFor(t, "NodeSynced", func() bool { return r.Stats().NodeSynced })
}
