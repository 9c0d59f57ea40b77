// Package api is node-resized's local HTTP/JSON API on a unix socket: the
// server the daemon runs, the client node-resizectl uses, and the types both
// share.
//
// Endpoints (curl --unix-socket PATH http://localhost/...):
//
//	GET  /v1/status          physical capacity as a Kubernetes ResourceList, CPU sets, memory, last change
//	GET  /v1/topology        the full machine model (NUMA nodes, CPUs, memory blocks, hugepages)
//	GET  /v1/events          recent changes, oldest first; ?follow=1 streams NDJSON as they happen
//	POST /v1/resync          rebuild the model now and return what changed
//	GET  /metrics            Prometheus metrics
//	GET  /healthz            200 while the detection loop answers (the watchdog's check); 503 and the reason otherwise
//	GET  /readyz             /healthz, and the first model built and, with a relay, the Node listed once
//
// /metrics, /healthz and /readyz are also served on the TCP listener
// (Server.ServeTCP); the rest only on the socket.
//
// Change ids count from 1 in each epoch (Server.Epoch, a new one each time
// the daemon starts), which every event, /v1/status and the
// Node-Resized-Epoch header carry; a client resumes with
// ?epoch=E&since=ID and is answered 410 Gone (Error.Missed) when changes
// after it cannot all be given. Limits bound what clients may hold: the
// connections per listener, the event streams, and the time to read a
// request and to keep an idle connection.
package api
