// Command node-resizectl asks a running node-resized daemon, over its unix
// socket, what the machine looks like and what changed; its resize command
// sets the Node's configured capacity through the API server (package kube)
// and follows the daemon's answer.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `node-resizectl asks the node-resized daemon what this machine looks like
and what changed, over its unix socket, and sets the Node's configured
capacity through the API server.

Usage:
  node-resizectl [--socket PATH] [-o table|json] COMMAND [flags]

Commands:
  status             physical capacity (as the kubelet computes it), CPU sets, memory, last change
  topology           NUMA nodes with their CPUs, memory and hugepages; memory blocks
  events [--follow]  recent changes with their cause and detection latency; --follow streams new ones
  resync             rebuild the model from sysfs now and show what changed
  version            versions of node-resizectl and of the daemon
  resize             set the Node's configured capacity; --wait follows node-resized's answer

Flags (before or after the command):
  --socket PATH      the daemon's socket (default %s, or $NODE_RESIZED_SOCKET)
  -o FORMAT          table (default) or json (not for resize)

resize flags:
  %s QUANTITY
                     the configured amount of that resource (e.g. --cpu 4 --memory 8Gi)
  --set NAME=QUANTITY  any resource node-resized manages by name (repeatable)
  --release          ask for a planned release: the CPUs and memory above it go
                     offline for the hypervisor to unplug (node-resized --release)
  --clear            remove the configured capacity: the node follows its hardware
  --wait             follow the condition until node-resized answers for this request
  --timeout D        give up after D (default 5m, 0: no limit)
  --kubeconfig PATH  the identity that writes the Node (default %s, the
                     kubelet's own, as node-resized's)
  --node-name NAME   the Node (default $NODE_NAME, else the hostname)
  The value goes to spec.configuredCapacity when the API server keeps that
  field, otherwise to the annotation %s.

Exit status:
  0   done (resize --wait: Accepted)
  1   the command failed (resize --wait: Infeasible or EmergencyReduced, with the
      condition's message, or the value was changed by someone else meanwhile)
  2   resize: node-resized did not answer for the request within --timeout
  3   resize: the kubeconfig, the API server or the Node failed or refused the
      write (or the watch)
  64  bad flags or arguments

Examples:
  node-resizectl status
  node-resizectl events --follow
  node-resizectl -o json topology | jq '.nodes[].cpus'
  node-resizectl resize --cpu 4 --memory 8Gi --wait --timeout 10m
  curl --unix-socket %s http://localhost/v1/status
`

type globals struct {
	socket string
	output string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.socket, "socket", g.socket, "the daemon's socket")
	fs.StringVar(&g.output, "o", g.output, "output format: table or json")
	fs.StringVar(&g.output, "output", g.output, "output format: table or json")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{socket: api.DefaultSocket, output: "table"}
	if env := os.Getenv("NODE_RESIZED_SOCKET"); env != "" {
		g.socket = env
	}
	top := flag.NewFlagSet("node-resizectl", flag.ContinueOnError)
	top.SetOutput(io.Discard) // a wrong flag is one line, not the whole usage
	top.Usage = func() {}
	printUsage := func(w io.Writer) {
		fmt.Fprintf(w, usage, api.DefaultSocket, namedFlags(), kube.DefaultKubeconfig, types.AnnotationConfiguredCapacity, api.DefaultSocket)
	}
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "node-resizectl: %v (see node-resizectl --help)\n", err)
		return exitUsage
	}
	if top.NArg() == 0 {
		printUsage(stderr)
		return exitUsage
	}
	cmd, rest := top.Arg(0), top.Args()[1:]
	if cmd == "help" {
		printUsage(stdout)
		return 0
	}

	sub := flag.NewFlagSet("node-resizectl "+cmd, flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	sub.Usage = func() {}
	g.register(sub)
	follow := false
	if cmd == "events" {
		sub.BoolVar(&follow, "follow", false, "keep streaming new changes as they happen")
		sub.BoolVar(&follow, "f", false, "short for --follow")
	}
	var rf resizeFlags
	if cmd == "resize" {
		rf.register(sub)
	}
	if err := sub.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: node-resizectl [global flags] %s [flags]\n\nFlags:\n", cmd)
			sub.SetOutput(stdout)
			sub.PrintDefaults()
			if cmd == "resize" {
				fmt.Fprint(stdout, resizeHelp)
			}
			return 0
		}
		fmt.Fprintf(stderr, "node-resizectl %s: %v (see node-resizectl %s --help)\n", cmd, err, cmd)
		return exitUsage
	}
	if sub.NArg() > 0 {
		fmt.Fprintf(stderr, "node-resizectl %s: unexpected argument %q\n", cmd, sub.Arg(0))
		return exitUsage
	}
	if g.output != "table" && g.output != "json" {
		fmt.Fprintf(stderr, "node-resizectl: -o: want table or json, got %q\n", g.output)
		return exitUsage
	}
	if cmd == "resize" {
		if g.output != "table" {
			fmt.Fprintln(stderr, "node-resizectl resize: -o json: resize prints text only (read the Node for its state)")
			return exitUsage
		}
		want, err := rf.request()
		if err != nil {
			fmt.Fprintf(stderr, "node-resizectl resize: %v (see node-resizectl resize --help)\n", err)
			return exitUsage
		}
		return resize(ctx, &rf, want, stdout, stderr)
	}

	c := api.NewClient(g.socket)
	var err error
	switch cmd {
	case "status":
		err = status(ctx, c, g, stdout)
	case "topology":
		err = topo(ctx, c, g, stdout)
	case "events":
		err = events(ctx, c, g, follow, stdout)
	case "resync":
		err = resync(ctx, c, g, stdout)
	case "version":
		err = showVersion(ctx, c, g, stdout)
	default:
		fmt.Fprintf(stderr, "node-resizectl: unknown command %q (see node-resizectl --help)\n", cmd)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(stderr, "node-resizectl:", err)
		return exitFailed
	}
	return exitOK
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func status(ctx context.Context, c *api.Client, g *globals, w io.Writer) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(w, st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Node:\t%s (%s mode, node-resized %s)\n", st.Hostname, st.Mode, st.Version)
	fmt.Fprintf(tw, "Physical capacity:\t%s\n", resourceList(st.Physical))
	fmt.Fprintf(tw, "CPUs:\tonline %s, offline %s, present %s, possible %s\n",
		set(st.CPUs.Online), set(st.CPUs.Offline), set(st.CPUs.Present), set(st.CPUs.Possible))
	fmt.Fprintf(tw, "Memory:\t%s total, %s swap", bytes(st.Memory.TotalBytes), bytes(st.Memory.SwapTotalBytes))
	if st.Memory.BlockSizeBytes > 0 {
		fmt.Fprintf(tw, ", blocks of %s: %d online, %d offline",
			bytes(st.Memory.BlockSizeBytes), st.Memory.BlocksOnline, st.Memory.BlocksOffline)
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "Model:\t%d rebuilds, %d changes, %d uevents, %d lost-event rescans since %s\n",
		st.Stats.Rebuilds, st.Stats.Changes, st.Stats.Uevents, st.Stats.LostEvents, st.Stats.StartedAt.Format(time.RFC3339))
	if st.Stats.LastRebuildErr != "" {
		fmt.Fprintf(tw, "Last rebuild error:\t%s\n", st.Stats.LastRebuildErr)
	}
	if lc := st.LastChange; lc != nil {
		fmt.Fprintf(tw, "Last change:\t#%d %s ago: %s\n", lc.ID, st.Now.Sub(lc.Time).Round(time.Millisecond), describe(*lc))
	}
	if k := st.Kubernetes; k != nil {
		if k.NodeName != "" {
			fmt.Fprintf(tw, "Kubernetes node:\t%s", k.NodeName)
			if k.NodeNameSource != "" {
				fmt.Fprintf(tw, " (name from %s)", k.NodeNameSource)
			}
			fmt.Fprintln(tw)
		}
		if len(k.Configured) > 0 {
			fmt.Fprintf(tw, "Configured capacity:\t%s (from %s)\n", stringMap(k.Configured), k.ConfiguredSource)
		} else {
			fmt.Fprintf(tw, "Configured capacity:\tnone (following the hardware)\n")
		}
		fmt.Fprintf(tw, "Target capacity:\t%s\n", resourceList(k.Target))
		fmt.Fprintf(tw, "Allocatable:\t%s\n", resourceList(k.Allocatable))
		fmt.Fprintf(tw, "CapacityConfigured:\t%s/%s", k.Condition.Status, k.Condition.Reason)
		if k.Condition.Message != "" {
			fmt.Fprintf(tw, ": %s", k.Condition.Message)
		}
		fmt.Fprintln(tw)
		relay := fmt.Sprintf("%d status patches", k.Patches)
		if k.PatchPending {
			relay += ", one pending"
		}
		if k.PatchError != "" {
			relay += ", last error: " + k.PatchError
		}
		if k.NodeName != "" {
			fmt.Fprintf(tw, "API relay:\t%s\n", relay)
		}
		if k.Taint != "" {
			fmt.Fprintf(tw, "Taint:\t%s (new pods kept off until the kubelet has adopted the change)\n", k.Taint)
		}
		if k.LimitsFailed != "" {
			fmt.Fprintf(tw, "Clamp:\tNOT LANDED, retrying: %s\n", k.LimitsFailed)
		}
	}
	if r := st.Release; r != nil {
		printRelease(tw, r)
	}
	if k := st.Kubelet; k != nil {
		printKubelet(tw, k, st.Now)
	}
	if len(st.Enforcement) > 0 {
		var e struct {
			Mode        string `json:"mode"`
			Kubepods    string `json:"kubepods"`
			Found       bool   `json:"found"`
			Unsupported string `json:"unsupported"`
			Last        *struct {
				Action string    `json:"action"`
				Result string    `json:"result"`
				Time   time.Time `json:"time"`
			} `json:"last"`
		}
		if json.Unmarshal(st.Enforcement, &e) == nil {
			line := fmt.Sprintf("%s, kubepods %s", e.Mode, e.Kubepods)
			switch {
			case e.Unsupported != "":
				line = "not enforced: " + e.Unsupported
			case !e.Found:
				line += " (not there yet: the kubelet has not created it)"
			case e.Last != nil:
				line += fmt.Sprintf("; last %s %s at %s", e.Last.Action, e.Last.Result, e.Last.Time.Local().Format(time.TimeOnly))
			}
			fmt.Fprintf(tw, "kubepods limits:\t%s\n", line)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.NUMANodes) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NUMA NODE\tCPUS\tMEMORY\tHUGEPAGES")
		for _, n := range st.NUMANodes {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.ID, set(n.CPUs), bytes(n.Memory), hugepages(n.Capacity))
		}
		return tw.Flush()
	}
	return nil
}

// printKubelet prints the running kubelet as the daemon sees it.
func printKubelet(tw io.Writer, k *api.KubeletStatus, now time.Time) {
	unit := k.Unit
	switch {
	case k.ActiveState != "":
		unit += fmt.Sprintf(" %s/%s", k.ActiveState, k.SubState)
		if k.MainPID != 0 {
			unit += fmt.Sprintf(", pid %d", k.MainPID)
		}
		if !k.Started.IsZero() {
			unit += fmt.Sprintf(", started %s (%s ago)", k.Started.Local().Format(time.DateTime), now.Sub(k.Started).Round(time.Second))
		}
	case k.UnitError != "":
		unit += ": " + k.UnitError
	}
	fmt.Fprintf(tw, "Kubelet:\t%s\n", unit)
	if k.Version != "" {
		version := k.Version
		if k.VersionNote != "" {
			version += " (warning: " + k.VersionNote + ")"
		}
		fmt.Fprintf(tw, "Kubelet version:\t%s\n", version)
	}
	view := "unknown"
	if len(k.Capacity) > 0 {
		view = resourceList(k.Capacity)
		switch {
		case k.Stale && k.StaleSince > 0:
			view += fmt.Sprintf(" (stale since change #%d)", k.StaleSince)
		case k.Stale:
			view += " (stale since before node-resized started)"
		default:
			view += " (current)"
		}
	}
	fmt.Fprintf(tw, "Kubelet's view:\t%s\n", view)
	if names := sortedKeys(k.Sources); len(names) > 0 {
		var from []string
		for _, n := range names {
			from = append(from, n+": "+k.Sources[n])
		}
		fmt.Fprintf(tw, "  learnt from:\t%s\n", strings.Join(from, "; "))
	}
	restart := k.Restart
	switch {
	case k.Restarting:
		restart += ", restarting now"
	case k.RestartBlocked != "":
		restart += ", not now: " + k.RestartBlocked
	case k.RestartWaiting != "":
		restart += fmt.Sprintf(", next at %s (%s)", k.NextRestart.Local().Format(time.DateTime), restartWait(k.RestartWaiting))
	}
	if k.RestartBudget != "" {
		restart += fmt.Sprintf("; budget %s, %d used", k.RestartBudget, len(k.RecentRestarts))
	}
	if r := k.LastRestart; r != nil {
		restart += fmt.Sprintf("; last restart %s at %s", r.Result, r.At.Local().Format(time.DateTime))
		if r.Error != "" {
			restart += ": " + r.Error
		}
	}
	fmt.Fprintf(tw, "Kubelet restarts:\t%s\n", restart)
}

// restartWait says what a restart waits for, from the status's word.
func restartWait(w string) string {
	switch w {
	case "settle":
		return "the change to settle"
	case "interval":
		return "the minimum interval"
	case "budget":
		return "the restart budget is spent"
	}
	return w
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func topo(ctx context.Context, c *api.Client, g *globals, w io.Writer) error {
	s, err := c.Topology(ctx)
	if err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPUs:\tonline %s, offline %s, present %s, possible %s\n",
		set(s.CPUs.Online), set(s.CPUs.Offline), set(s.CPUs.Present), set(s.CPUs.Possible))
	fmt.Fprintf(tw, "Memory:\t%s total, %s swap\n", bytes(s.MemTotal), bytes(s.SwapTotal))
	if len(s.Hugepages) > 0 {
		fmt.Fprintf(tw, "Hugepages:\t%s\n", pools(s.Hugepages))
	}
	if s.EphemeralStorage > 0 {
		fmt.Fprintf(tw, "Ephemeral storage:\t%s\n", bytes(s.EphemeralStorage))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NUMA NODE\tONLINE CPUS\tCORES\tSOCKETS\tMEMORY\tHUGEPAGES\tDISTANCES")
	if len(s.Nodes) == 0 {
		fmt.Fprintln(tw, "-\t(no NUMA node directories in sysfs)\t\t\t\t\t")
	}
	for _, n := range s.Nodes {
		var ids topology.CPUSet
		// A core is the CPUs that share every id but their own, books
		// and drawers too (s390x), as cAdvisor counts them.
		cores, sockets := map[[4]int]bool{}, map[int]bool{}
		for _, cpu := range n.CPUs {
			ids = append(ids, cpu.ID)
			cores[[4]int{cpu.DrawerID, cpu.BookID, cpu.SocketID, cpu.CoreID}] = true
			sockets[cpu.SocketID] = true
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", n.ID, set(ids), len(cores), keys(sockets),
			bytes(n.MemTotal), pools(n.Hugepages), ints(n.Distances))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(s.MemoryBlocks) > 0 {
		type key struct {
			node        int
			state, zone string
		}
		count := map[key]int{}
		for _, b := range s.MemoryBlocks {
			count[key{b.Node, b.State, b.Zone}]++
		}
		ks := make([]key, 0, len(count))
		for k := range count {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool {
			a, b := ks[i], ks[j]
			if a.node != b.node {
				return a.node < b.node
			}
			if a.state != b.state {
				return a.state < b.state
			}
			return a.zone < b.zone
		})
		fmt.Fprintf(w, "\nMemory blocks (%d of %s):\n", len(s.MemoryBlocks), bytes(s.MemoryBlockSize))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NUMA NODE\tSTATE\tZONE\tBLOCKS\tSIZE")
		for _, k := range ks {
			node := fmt.Sprint(k.node)
			if k.node < 0 {
				node = "?"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", node, k.state, dash(k.zone), count[k], bytes(uint64(count[k])*s.MemoryBlockSize))
		}
		return tw.Flush()
	}
	return nil
}

const eventsHeader = "%-6s %-23s %-22s %7s %10s %5s %12s  %s\n"

func eventRow(w io.Writer, c monitor.Change) {
	lat := "-"
	if c.LatencySeconds > 0 {
		lat = c.Latency().Round(10 * time.Microsecond).String()
	}
	trig := make([]string, len(c.Triggers))
	for i, t := range c.Triggers {
		trig[i] = string(t)
	}
	changes := c.Changes.String()
	if len(c.Changes) == 0 {
		changes = "initial model"
	}
	fmt.Fprintf(w, eventsHeader, fmt.Sprintf("#%d", c.ID), c.Time.Local().Format("2006-01-02 15:04:05.000"),
		strings.Join(trig, ","), fmt.Sprint(c.Events), lat, resources.Format(resources.CPU, c.Capacity[resources.CPU]), bytes(uint64(c.Capacity[resources.Memory])), changes)
}

func events(ctx context.Context, c *api.Client, g *globals, follow bool, w io.Writer) error {
	if follow {
		if g.output == "table" {
			fmt.Fprintf(w, eventsHeader, "ID", "TIME", "TRIGGERS", "UEVENTS", "LATENCY", "CPU", "MEMORY", "CHANGES")
		}
		enc := json.NewEncoder(w)
		return c.Follow(ctx, api.Cursor{}, func(ev api.Event) error {
			if g.output == "json" {
				return enc.Encode(ev) // NDJSON, one change a line
			}
			eventRow(w, ev.Change)
			return nil
		})
	}
	list, err := c.Events(ctx)
	if err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(w, list)
	}
	fmt.Fprintf(w, eventsHeader, "ID", "TIME", "TRIGGERS", "UEVENTS", "LATENCY", "CPU", "MEMORY", "CHANGES")
	for _, ev := range list {
		eventRow(w, ev.Change)
	}
	return nil
}

func resync(ctx context.Context, c *api.Client, g *globals, w io.Writer) error {
	r, err := c.Resync(ctx)
	if err != nil {
		return err
	}
	if g.output == "json" {
		return printJSON(w, r)
	}
	if !r.Changed || r.Change == nil {
		fmt.Fprintln(w, "Resynced: the model was already up to date.")
		return nil
	}
	fmt.Fprintf(w, "Resynced: change #%d: %s\n", r.Change.ID, describe(*r.Change))
	return nil
}

func showVersion(ctx context.Context, c *api.Client, g *globals, w io.Writer) error {
	out := map[string]string{"node-resizectl": version}
	st, err := c.Status(ctx)
	if err == nil {
		out["node-resized"] = st.Version
	}
	if g.output == "json" {
		return printJSON(w, out)
	}
	fmt.Fprintln(w, "node-resizectl", version)
	if err != nil {
		fmt.Fprintf(w, "node-resized: unknown (%v)\n", err)
		return nil
	}
	fmt.Fprintln(w, "node-resized", st.Version)
	return nil
}

// describe says in one line what a change was and what caused it.
func describe(c monitor.Change) string {
	var b strings.Builder
	if len(c.Changes) == 0 {
		b.WriteString("initial model")
	} else {
		b.WriteString(c.Changes.String())
	}
	trig := make([]string, len(c.Triggers))
	for i, t := range c.Triggers {
		trig[i] = string(t)
	}
	fmt.Fprintf(&b, " (cpu %s, memory %s; by %s", resources.Format(resources.CPU, c.Capacity[resources.CPU]), bytes(uint64(c.Capacity[resources.Memory])), strings.Join(trig, ","))
	if c.Events > 0 {
		fmt.Fprintf(&b, ", %d uevents, seqnums %s", c.Events, seqnums(c.Seqnums))
	}
	if c.LatencySeconds > 0 {
		fmt.Fprintf(&b, ", detected in %s", c.Latency().Round(10*time.Microsecond))
	}
	b.WriteString(")")
	return b.String()
}

func resourceList(l resources.List) string {
	if len(l) == 0 {
		return "-"
	}
	return l.String()
}

func stringMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

func set(s topology.CPUSet) string {
	if len(s) == 0 {
		return "-"
	}
	return s.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ints(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func keys(m map[int]bool) string {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ints(ks)
}

func pools(hs []topology.Hugepages) string {
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%d×%s", h.Count, bytes(h.PageSize)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// hugepages renders the huge page pools of a capacity.
func hugepages(c resources.List) string {
	pools := resources.List{}
	for name, v := range c {
		if resources.IsHugePages(name) {
			pools[name] = v
		}
	}
	return resourceList(pools)
}

func bytes(b uint64) string { return api.FormatBytes(b) }

// seqnums renders a change's SEQNUMs for a table: the list while it is
// short, otherwise the span and how many ranges it holds (-o json keeps
// every range).
func seqnums(s monitor.Seqnums) string {
	const shown = 3
	if len(s.Ranges) <= shown && !s.Truncated {
		return s.String()
	}
	first, last := s.Ranges[0].First, s.Ranges[len(s.Ranges)-1].Last
	more := ""
	if s.Truncated {
		more = "+"
	}
	return fmt.Sprintf("%d…%d%s (%d in %d%s ranges)", first, last, more, s.Count, len(s.Ranges), more)
}

// printRelease writes the planned release's lines: what is under way, what
// is held offline and what of it the hypervisor may remove.
func printRelease(tw io.Writer, r *api.ReleaseStatus) {
	state := "allowed (--release)"
	switch {
	case !r.Allowed:
		state = "not allowed (no --release); what an earlier release took offline is still held"
	case r.Releasing:
		state += ", releasing"
	case r.GivingBack:
		state += ", giving back"
	}
	fmt.Fprintf(tw, "Planned release:\t%s\n", state)
	if s := r.Summary(); s != "" {
		fmt.Fprintf(tw, "Released:\t%s\n", s)
	}
	for _, d := range r.Devices {
		verdict := "not yet safe to unplug"
		if d.SafeToUnplug {
			verdict = "SAFE TO UNPLUG"
		}
		fmt.Fprintf(tw, "  %s:\t[%#x-%#x) %s, %d/%d blocks offline: %s\n", d.ID, d.Start, d.End, resources.Format(resources.Memory, d.Size), d.Offline, d.Blocks, verdict)
	}
	if r.Short != "" {
		fmt.Fprintf(tw, "Not released:\t%s\n", r.Short)
	}
}
