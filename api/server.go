package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/types"
)

// Info describes the daemon to API clients and names the parts whose
// status GET /v1/status shows. A nil part is left out.
type Info struct {
	Version  string
	Hostname string
	Mode     string
	// NodeName is the Node the daemon speaks for; empty in standalone
	// mode.
	NodeName string
	// NodeNameSource is where NodeName came from: flag, env, kubeconfig
	// (and the kind of identity) or hostname.
	NodeNameSource string
	// Decisions is the decision loop (*agent.Agent).
	Decisions Decisions
	// Relay is the API relay (*kube.Relay); nil in standalone mode.
	Relay Relay
	// Enforcement is the kubepods cgroup enforcer (*cgroup.Enforcer).
	Enforcement Enforcement
}

// Decisions is what the API reads of the decision loop.
type Decisions interface {
	Status() agent.Status
}

// Relay is what the API reads of the API relay.
type Relay interface {
	Stats() types.RelayStats
}

// Enforcement is what the API reads of the kubepods cgroup enforcer.
type Enforcement interface {
	Status() cgroup.Status
}

// Server serves the local API over a monitor. It is safe for concurrent use.
type Server struct {
	mon     *monitor.Monitor
	metrics *metrics.Metrics
	info    Info
	log     *slog.Logger
	mux     *http.ServeMux
	epoch   string
	streams atomic.Int64 // event streams open

	// Limits bound what clients may hold: set them before Serve.
	Limits Limits
	// ResyncTimeout bounds how long POST /v1/resync waits for the rebuild.
	ResyncTimeout time.Duration
	// AliveTimeout bounds how long /healthz and /readyz wait for the
	// detection loop to answer (default monitor.AliveTimeout, the
	// watchdog's).
	AliveTimeout time.Duration
}

// NewServer returns a server for mon. m may be nil: then /metrics answers
// 404.
func NewServer(mon *monitor.Monitor, m *metrics.Metrics, info Info, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{mon: mon, metrics: m, info: info, log: log, mux: http.NewServeMux(), epoch: rand.Text()[:16],
		Limits: DefaultLimits(), ResyncTimeout: 30 * time.Second, AliveTimeout: monitor.AliveTimeout}
	s.route(http.MethodGet, "/v1/status", http.HandlerFunc(s.status))
	s.route(http.MethodGet, "/v1/topology", http.HandlerFunc(s.topology))
	s.route(http.MethodGet, "/v1/events", http.HandlerFunc(s.events))
	s.route(http.MethodPost, "/v1/resync", http.HandlerFunc(s.resync))
	s.probes(s.mux)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint "+r.Method+" "+r.URL.Path+"; see GET /v1/status, /v1/topology, /v1/events, /metrics, /healthz, /readyz and POST /v1/resync")
	})
	return s
}

// probes adds what the TCP listener serves as well: /metrics, /healthz
// and /readyz.
func (s *Server) probes(mux *http.ServeMux) {
	route(mux, http.MethodGet, "/healthz", http.HandlerFunc(s.healthz))
	route(mux, http.MethodGet, "/readyz", http.HandlerFunc(s.readyz))
	if s.metrics != nil {
		route(mux, http.MethodGet, "/metrics", s.metrics.Handler())
	}
}

// route serves h for method on path, and a JSON 405 naming the allowed
// method for any other method on the same path.
func (s *Server) route(method, path string, h http.Handler) { route(s.mux, method, path, h) }

func route(mux *http.ServeMux, method, path string, h http.Handler) {
	mux.Handle(method+" "+path, h) // GET also answers HEAD
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, r.Method+" "+path+" is not allowed; use "+method)
	})
}

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler { return s.mux }

// Epoch names this run of the server: the change ids it serves count
// from 1 in each epoch, so a change is (epoch, id). A new server has a
// new random epoch.
func (s *Server) Epoch() string { return s.epoch }

// Serve answers on ln until ctx is done, then shuts down: it stops
// accepting, ends event streams and waits (up to 5s) for requests in
// flight. It closes ln. It holds at most Limits.MaxConnections
// connections of ln open at once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, s.mux)
}

// ServeTCP serves /metrics, /healthz and /readyz on ln until ctx is done,
// and nothing else: the rest of the API stays on the unix socket, whose
// mode says who may use it.
func (s *Server) ServeTCP(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	s.probes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint "+r.Method+" "+r.URL.Path+" on TCP; see GET /metrics, /healthz and /readyz (the rest of the API is on the unix socket)")
	})
	return s.serve(ctx, ln, mux)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	// Streams watch this context, so Shutdown does not wait on them.
	streamCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := s.Limits
	if lim.MaxConnections > 0 {
		ll := newLimitListener(ln, lim.MaxConnections, s.log)
		defer ll.wait()
		ln = ll
	}
	h = s.withEpoch(h)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return streamCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) ready(w http.ResponseWriter) bool {
	select {
	case <-s.mon.Ready():
		return true
	default:
		writeError(w, http.StatusServiceUnavailable, "the machine model is not built yet")
		return false
	}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	snap, capac := s.mon.Snapshot()
	st := StatusOf(snap, capac)
	st.Version, st.Hostname, st.Mode = s.info.Version, s.info.Hostname, s.info.Mode
	st.Epoch = s.epoch
	st.Now = time.Now()
	st.Stats = s.mon.Stats()
	if c, ok := s.mon.LastChange(); ok {
		st.LastChange = &c
	}
	if s.info.Decisions != nil {
		st.Kubernetes = kubernetesStatus(s.info)
		ds := s.info.Decisions.Status()
		st.Kubelet = ds.Kubelet // nil while it knows nothing of the kubelet
		st.Release = ds.Release // nil while none is allowed or held
	}
	if s.info.Enforcement != nil {
		if b, err := json.Marshal(s.info.Enforcement.Status()); err == nil {
			st.Enforcement = b
		}
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) topology(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	snap, _ := s.mon.Snapshot()
	writeJSON(w, http.StatusOK, snap)
}

// healthz answers 200 while the detection loop answers: the systemd
// watchdog's check, so a probe and the watchdog never disagree.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if !s.live(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 while the detection loop answers, once the first
// model is built and, with a relay, once the Node watch has listed the
// Node. A later API server outage does not make the daemon unready: it
// never waits for the API server (the relay retries, /v1/status and the
// metrics say so).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) || !s.live(w, r) {
		return
	}
	if s.info.Relay != nil && !s.info.Relay.Stats().NodeSynced {
		writeError(w, http.StatusServiceUnavailable, "the Node "+s.info.NodeName+" has not been listed from the API server yet")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// live writes a 503 with the reason unless the detection loop answers
// within AliveTimeout.
func (s *Server) live(w http.ResponseWriter, r *http.Request) bool {
	ctx, cancel := context.WithTimeout(r.Context(), s.AliveTimeout)
	defer cancel()
	err := s.mon.Check(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, monitor.ErrStopped):
		writeError(w, http.StatusServiceUnavailable, "the detection loop has stopped")
	default:
		writeError(w, http.StatusServiceUnavailable, "the detection loop did not answer within "+s.AliveTimeout.String())
	}
	return false
}

func (s *Server) resync(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.ResyncTimeout)
	defer cancel()
	res, err := s.mon.Resync(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "resync: "+err.Error())
		return
	}
	s.log.Info("forced resync", "changed", res.Changed)
	writeJSON(w, http.StatusOK, res)
}

// EpochHeader is the response header that names the server's epoch
// (Server.Epoch) on every answer.
const EpochHeader = "Node-Resized-Epoch"

func (s *Server) withEpoch(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(EpochHeader, s.epoch)
		h.ServeHTTP(w, r)
	})
}

// events answers with the recorded changes, or with ?follow=1 streams them
// as NDJSON: first those recorded after ?since=ID (all when absent), then
// each new one as it happens. A client that resumes (?since=ID, with
// ?epoch=E of the change it last saw) after changes it can no longer be
// given, the daemon having restarted or the history having dropped them,
// is answered 410 Gone with what it missed.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "since: want a change id, got "+strconv.Quote(v))
			return
		}
		since = n
	}
	epoch := q.Get("epoch")
	follow, _ := strconv.ParseBool(q.Get("follow"))
	if !follow {
		hist := s.mon.History()
		if !s.resumable(w, epoch, since, hist) {
			return
		}
		out := []Event{}
		for _, c := range hist {
			if c.ID > since {
				out = append(out, Event{Epoch: s.epoch, Change: c})
			}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if n := s.streams.Add(1); s.Limits.MaxStreams > 0 && n > int64(s.Limits.MaxStreams) {
		s.streams.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "too many event streams open ("+strconv.Itoa(s.Limits.MaxStreams)+
			", --api-max-streams): retry later, or poll GET /v1/events?since=ID")
		return
	}
	defer s.streams.Add(-1)

	// Subscribe before reading the history so nothing falls between them;
	// skip what the history already sent.
	ch, cancel := s.mon.Subscribe()
	defer cancel()
	hist := s.mon.History()
	if !s.resumable(w, epoch, since, hist) {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	last := since
	send := func(l streamLine) bool {
		// A follower that stops reading is dropped once its socket's
		// buffer is full, not held for ever.
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if err := enc.Encode(l); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for _, c := range hist {
		if c.ID > last {
			if !send(streamLine{Event: Event{Epoch: s.epoch, Change: c}}) {
				return
			}
			last = c.ID
		}
	}
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if err := rc.Flush(); err != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case c, ok := <-ch:
			if !ok {
				send(streamLine{Error: "the stream fell behind and was ended; reconnect with ?epoch=" + s.epoch + "&since=" + strconv.FormatUint(last, 10)})
				return
			}
			if c.ID <= last {
				continue
			}
			if !send(streamLine{Event: Event{Epoch: s.epoch, Change: c}}) {
				return
			}
			last = c.ID
		}
	}
}

// resumable reports whether every change after since of epoch is in hist
// (or since is 0 and the epoch is this one or not given); otherwise it
// answers 410 Gone (or 400 for an id this epoch has not reached) and
// reports false.
func (s *Server) resumable(w http.ResponseWriter, epoch string, since uint64, hist []monitor.Change) bool {
	var oldest, newest uint64
	if len(hist) > 0 {
		oldest, newest = hist[0].ID, hist[len(hist)-1].ID
	}
	gone := func(reason, msg string) bool {
		w.Header().Set(EpochHeader, s.epoch)
		writeJSON(w, http.StatusGone, Error{Error: msg, Missed: &Missed{Reason: reason, Epoch: s.epoch, Oldest: oldest, Newest: newest}})
		return false
	}
	resume := "read GET /v1/status for the machine as it is now, then follow from ?epoch=" + s.epoch + "&since=" + strconv.FormatUint(newest, 10)
	switch {
	case epoch != "" && epoch != s.epoch:
		return gone(MissedRestarted, "changes after #"+strconv.FormatUint(since, 10)+" of epoch "+epoch+
			" are not known: node-resized restarted since (its epoch is now "+s.epoch+"); "+resume)
	case since > newest && epoch == "":
		return gone(MissedRestarted, "no change #"+strconv.FormatUint(since, 10)+" in epoch "+s.epoch+" (the newest is #"+
			strconv.FormatUint(newest, 10)+"): node-resized restarted since that change; "+resume)
	case since > newest:
		writeError(w, http.StatusBadRequest, "since: change #"+strconv.FormatUint(since, 10)+" is ahead of the newest, #"+strconv.FormatUint(newest, 10))
		return false
	case since > 0 && since+1 < oldest:
		return gone(MissedExpired, "changes #"+strconv.FormatUint(since+1, 10)+" to #"+strconv.FormatUint(oldest-1, 10)+
			" are no longer recorded (--history keeps the newest "+strconv.Itoa(len(hist))+"); "+resume)
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}

// kubernetesStatus is the decision loop's and the relay's view.
func kubernetesStatus(info Info) *KubernetesStatus {
	st := info.Decisions.Status()
	out := &KubernetesStatus{
		Configured:       st.Configured.Raw,
		ConfiguredSource: st.ConfiguredSource,
		Target:           st.Target,
		Allocatable:      st.Allocatable,
		Condition: Condition{
			Status:             string(st.Condition.Status),
			Reason:             string(st.Condition.Reason),
			Message:            st.Condition.Message,
			LastTransitionTime: st.Condition.LastTransitionTime,
		},
		Error:        st.Error,
		Taint:        st.Taint,
		LimitsFailed: st.LimitsFailed,
	}
	if st.Configured.Invalid != "" {
		out.Configured = map[string]string{"invalid": st.Configured.Invalid}
	}
	if info.Relay != nil {
		rs := info.Relay.Stats()
		out.NodeName, out.NodeNameSource = info.NodeName, info.NodeNameSource
		out.Patches, out.LastPatch, out.PatchError, out.PatchPending = rs.Patches, rs.LastPatch, rs.LastError, rs.Pending
		out.NodeSynced = rs.NodeSynced
	}
	return out
}
