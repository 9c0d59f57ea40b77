package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// auditPolicy records every request's metadata once, when the response
// is complete: who, what verb on what resource, when.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditEntry is the part of an audit event the bench reads.
type auditEntry struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	URI       string `json:"requestURI"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	Received       time.Time `json:"requestReceivedTimestamp"`
	Completed      time.Time `json:"stageTimestamp"` // the response complete
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// code is the response's HTTP status code (0 when not recorded).
func (e auditEntry) code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// countCodes sums requests by "verb resource code".
func countCodes(es []auditEntry) counts {
	c := counts{}
	for _, e := range es {
		c[fmt.Sprintf("%s %s %d", e.Verb, e.resource(), e.code())]++
	}
	return c
}

// resource is "nodes/status", "events", ...
func (e auditEntry) resource() string {
	if e.ObjectRef == nil {
		return "-"
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// agent reports whether node-resized sent the request: its user agent is
// "node-resized" (the stand-in kubelets' is node-resized-stand-in-kubelet).
func (e auditEntry) agent() bool {
	return e.UserAgent == "node-resized" || strings.HasPrefix(e.UserAgent, "node-resized/")
}

// write says whether the request changes an object.
func (e auditEntry) write() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// auditLog reads the API server's audit log as it grows.
type auditLog struct {
	path string
	mu   sync.Mutex
	off  int64
	all  []auditEntry
}

// read takes the entries written since the last read.
func (a *auditLog) read() ([]auditEntry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(a.off, 0); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		a.off += int64(len(line))
		var e auditEntry
		if json.Unmarshal(line, &e) == nil {
			a.all = append(a.all, e)
		}
	}
	return a.all, nil
}

// between returns the entries received in [from, to).
func (a *auditLog) between(from, to time.Time) []auditEntry {
	all, _ := a.read()
	var out []auditEntry
	for _, e := range all {
		if !e.Received.Before(from) && e.Received.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// counts sums requests by "verb resource".
type counts map[string]int

func count(es []auditEntry, keep func(auditEntry) bool) counts {
	c := counts{}
	for _, e := range es {
		if keep(e) {
			c[e.Verb+" "+e.resource()]++
		}
	}
	return c
}

func (c counts) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func (c counts) writes() int {
	n := 0
	for k, v := range c {
		if (auditEntry{Verb: strings.Fields(k)[0]}).write() {
			n += v
		}
	}
	return n
}

// per says the counts per node: "patch nodes/status 1.00, create events 1.02".
func (c counts) per(nodes int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", k, float64(c[k])/float64(nodes))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// rates returns the highest request rate of es over any window-long span
// that starts at one of its requests, and its mean rate over [from, to).
func rates(es []auditEntry, from, to time.Time, window time.Duration) (peak, mean float64) {
	ts := make([]time.Time, 0, len(es))
	for _, e := range es {
		ts = append(ts, e.Received)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	j, best := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < window {
			j++
		}
		best = max(best, j-i)
	}
	return float64(best) / window.Seconds(), float64(len(ts)) / to.Sub(from).Seconds()
}

// byAgents keeps node-resized's entries.
func byAgents(es []auditEntry) []auditEntry {
	var out []auditEntry
	for _, e := range es {
		if e.agent() {
			out = append(out, e)
		}
	}
	return out
}

// perSecond counts es in each of the n seconds from from.
func perSecond(es []auditEntry, from time.Time, n int) []int {
	return perSpan(es, from, time.Second, n)
}

// perSpan counts es in each of the n spans of the given length from from.
func perSpan(es []auditEntry, from time.Time, span time.Duration, n int) []int {
	out := make([]int, n)
	for _, e := range es {
		if i := int(e.Received.Sub(from) / span); i >= 0 && i < n {
			out[i]++
		}
	}
	return out
}

// eventOrder checks, in es (one change's requests), each agent's event
// against its status patch: an event waits for the answer to the patch
// under way (at most 5 s, which the patch, sent first, is always
// received within). It returns how many
// events were received after their patch's answer, how many of the
// nodes had both, and the nodes whose event reached the API server
// before their patch did (none should).
func eventOrder(es []auditEntry) (after, pairs int, early []string) {
	patch := map[string]auditEntry{}
	event := map[string]auditEntry{}
	for _, e := range byAgents(es) {
		switch {
		case e.Verb == "patch" && e.resource() == "nodes/status":
			if _, ok := patch[e.User.Username]; !ok {
				patch[e.User.Username] = e
			}
		case e.Verb == "create" && e.resource() == "events":
			if _, ok := event[e.User.Username]; !ok {
				event[e.User.Username] = e
			}
		}
	}
	for user, ev := range event {
		p, ok := patch[user]
		if !ok {
			continue
		}
		pairs++
		switch {
		case !ev.Received.Before(p.Completed):
			after++
		case ev.Received.Before(p.Received):
			early = append(early, strings.TrimPrefix(user, "system:node:"))
		}
	}
	slices.Sort(early)
	return after, pairs, early
}

// adminWrites returns when the API server answered the first write of
// each Node by someone other than node-resized (the bench's admin).
func adminWrites(es []auditEntry) map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range es {
		if e.agent() || e.Verb != "patch" || e.resource() != "nodes" || e.ObjectRef.Name == "" {
			continue
		}
		if _, ok := out[e.ObjectRef.Name]; !ok {
			out[e.ObjectRef.Name] = e.Completed
		}
	}
	return out
}

// stages splits each Node's way from its start (from: the admin's write
// answered, the machine's change) to its new state seen by the bench's
// watch at the requests the API server logged: the start → node-resized's
// pod list received (for a write, the watch's delivery; then the
// decision) → the list answered (the API server) → its status patch
// received (the evictor's look and the relay) → the patch answered (the
// API server) → seen (the bench's watch). It returns each stage's p50
// and p99, in that order.
func stages(es []auditEntry, from map[string]time.Time, start string, seen map[string]time.Time) string {
	type way struct{ list, patch *auditEntry }
	ways := map[string]*way{}
	for i := range es {
		e := &es[i]
		if !e.agent() {
			continue
		}
		node := strings.TrimPrefix(e.User.Username, "system:node:")
		if ways[node] == nil {
			ways[node] = &way{}
		}
		w := ways[node]
		switch {
		case e.Verb == "list" && e.resource() == "pods" && w.list == nil:
			w.list = e
		case e.Verb == "patch" && e.resource() == "nodes/status" && w.patch == nil:
			w.patch = e
		}
	}
	names := []string{start + " → pod list received", "pod list in the API server", "list answered → status patch received",
		"status patch in the API server", "patch answered → seen"}
	parts := make([][]time.Duration, len(names))
	for node, w := range ways {
		t0, ok0 := from[node]
		at, ok := seen[node]
		if w.list == nil || w.patch == nil || !ok || !ok0 {
			continue
		}
		for i, d := range []time.Duration{w.list.Received.Sub(t0), w.list.Completed.Sub(w.list.Received),
			w.patch.Received.Sub(w.list.Completed), w.patch.Completed.Sub(w.patch.Received), at.Sub(w.patch.Completed)} {
			parts[i] = append(parts[i], d)
		}
	}
	var b strings.Builder
	for i, ds := range parts {
		slices.Sort(ds)
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s p50 %v p99 %v", names[i], quantile(ds, .5), quantile(ds, .99))
	}
	fmt.Fprintf(&b, " (%d Nodes)", len(parts[0]))
	return b.String()
}

// acceptedAt returns, for each Node the bench's watch saw in its awaited
// state (seen), when the API server answered the status patch that put
// it there: node-resized's last status patch for that Node received
// before it was seen. This is when its writer knows the Node is in that
// state; seen adds the bench's own watch's delay. (The watch can deliver
// the change a little before the patch's answer is complete.)
func acceptedAt(es []auditEntry, seen map[string]time.Time) map[string]time.Time {
	out, received := map[string]time.Time{}, map[string]time.Time{}
	for _, e := range es {
		if !e.agent() || e.Verb != "patch" || e.resource() != "nodes/status" || e.code() >= 300 {
			continue
		}
		node := strings.TrimPrefix(e.User.Username, "system:node:")
		at, ok := seen[node]
		if !ok || e.Received.After(at) {
			continue
		}
		if last, ok := received[node]; !ok || e.Received.After(last) {
			received[node], out[node] = e.Received, e.Completed
		}
	}
	return out
}
