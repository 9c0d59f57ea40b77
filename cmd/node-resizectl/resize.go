package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/types"
)

// Exit statuses. resize gives each outcome its own; the other commands use
// exitOK, exitFailed and exitUsage.
const (
	exitOK      = 0
	exitFailed  = 1  // resize: not applied (Infeasible, EmergencyReduced, changed by someone else); others: the command failed
	exitTimeout = 2  // resize: node-resized did not answer for the request within --timeout
	exitAPI     = 3  // resize: the kubeconfig, the API server or the Node refused or failed the write or the watch
	exitUsage   = 64 // bad flags or arguments (sysexits.h EX_USAGE)
)

// resizeHelp ends resize --help.
const resizeHelp = `
The value goes to the Node's spec.configuredCapacity when the API server keeps
that field, otherwise to the annotation ` + types.AnnotationConfiguredCapacity + `,
where node-resized reads it. With --wait, node-resizectl watches the Node and
prints each CapacityConfigured condition node-resized decides for this value
(conditions left from an earlier value do not count).

Exit status:
  0   written; with --wait: Accepted
  1   with --wait: Infeasible or EmergencyReduced (the condition's message is
      printed), or the value was changed by someone else meanwhile
  2   node-resized did not answer for the value within --timeout
  3   the kubeconfig, the API server or the Node failed or refused the write
      (or the watch)
  64  bad flags or arguments

Examples:
  node-resizectl resize --cpu 4 --memory 8Gi --wait
  node-resizectl resize --set hugepages-2Mi=1Gi --node-name worker-1 --kubeconfig ~/.kube/config
  node-resizectl resize --cpu 2 --memory 8Gi --release --wait --timeout 15m
  node-resizectl resize --clear --wait --timeout 10m

With --release (and a node whose node-resized runs with --release), the
capacity above the request is taken offline once the pods that no longer fit
are evicted, the kubelet is restarted onto the smaller machine, and --wait
returns when that is done, printing what may now be unplugged: the CPUs, and
each memory device with every block offline ("safe to unplug").
`

// namedResources are the resources resize has a flag of its own for (cpu,
// memory, ephemeral-storage, hugepages-2Mi, hugepages-1Gi); --set takes any
// other that node-resized manages.
var namedResources = slices.Collect(resources.Names(resources.Configurable))

// namedFlags is "--cpu, --memory, ..., --hugepages-1Gi", for the usage.
func namedFlags() string {
	flags := make([]string, len(namedResources))
	for i, name := range namedResources {
		flags[i] = "--" + name
	}
	return strings.Join(flags, ", ")
}

// configurableKinds is "cpu, memory, ephemeral-storage, hugepages-<size>",
// with prefix before each.
func configurableKinds(prefix string) string {
	var kinds []string
	for k := range resources.Kinds(resources.Configurable) {
		kinds = append(kinds, prefix+k)
	}
	return strings.Join(kinds, ", ")
}

// resizeFlags are resize's own flags.
type resizeFlags struct {
	amounts    map[string]*string // by resource name, from the named flags
	set        setFlag
	clear      bool
	release    bool
	wait       bool
	timeout    time.Duration
	kubeconfig string
	nodeName   string
}

// setFlag collects --set name=quantity, in order.
type setFlag []string

func (s *setFlag) String() string     { return strings.Join(*s, ",") }
func (s *setFlag) Set(v string) error { *s = append(*s, v); return nil }

func (r *resizeFlags) register(fs *flag.FlagSet) {
	r.amounts = map[string]*string{}
	for _, name := range namedResources {
		r.amounts[name] = fs.String(name, "", "configured "+name+" (a quantity: "+resources.Example(name)+")")
	}
	fs.Var(&r.set, "set", "configured NAME=QUANTITY for any resource node-resized manages (repeatable)")
	fs.BoolVar(&r.clear, "clear", false, "remove the configured capacity: the node follows its hardware again (and gets back what a release took offline)")
	fs.BoolVar(&r.release, "release", false, "ask for a planned release: node-resized takes the CPUs and memory above the capacity offline, so that the hypervisor can unplug them (the node must allow it: node-resized --release); a request without it gives back what an earlier release took")
	fs.BoolVar(&r.wait, "wait", false, "follow the Node's CapacityConfigured condition until node-resized answers for this request")
	fs.DurationVar(&r.timeout, "timeout", 5*time.Minute, "give up after this long (0: no limit); with --wait, exit 2")
	fs.StringVar(&r.kubeconfig, "kubeconfig", kube.DefaultKubeconfig, "kubeconfig of the identity that writes the Node: by default the kubelet's own, as node-resized's")
	// The default is resolved in request, so that --help (and the
	// manual page made from it) shows no machine's hostname.
	fs.StringVar(&r.nodeName, "node-name", "", "the Node to resize (default $NODE_NAME, else the hostname)")
}

// defaultNodeName is $NODE_NAME, else the hostname in lower case.
func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return strings.ToLower(h)
}

// request checks resize's flags and returns the configured capacity to
// write (Present false for --clear). Its errors are usage errors.
func (r *resizeFlags) request() (types.Configured, error) {
	if r.nodeName == "" {
		r.nodeName = defaultNodeName()
	}
	raw := map[string]string{}
	add := func(name, value, from string) error {
		canon, ok := resources.Canonical(name)
		if !ok || !resources.Configurable(name) {
			return fmt.Errorf("%s: node-resized manages no resource %q (%s)", from, name, configurableKinds(""))
		}
		for have := range raw {
			if c, _ := resources.Canonical(have); c == canon {
				return fmt.Errorf("%s: %s is given twice", from, canon)
			}
		}
		v, err := resources.Parse(canon, value)
		if err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		if v <= 0 {
			return fmt.Errorf("%s: %s must be positive, got %q", from, canon, value)
		}
		raw[name] = value
		return nil
	}
	for _, name := range namedResources {
		if v := *r.amounts[name]; v != "" {
			if err := add(name, v, "--"+name); err != nil {
				return types.Configured{}, err
			}
		}
	}
	for _, s := range r.set {
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" || value == "" {
			return types.Configured{}, fmt.Errorf("--set %q: want NAME=QUANTITY, e.g. --set hugepages-2Mi=1Gi", s)
		}
		if err := add(name, value, "--set "+s); err != nil {
			return types.Configured{}, err
		}
	}
	switch {
	case r.clear && len(raw) > 0:
		return types.Configured{}, errors.New("--clear removes the configured capacity: give it alone, without resources")
	case r.clear && r.release:
		return types.Configured{}, errors.New("--release goes with a capacity to release down to; --clear gives back what was released")
	case r.clear:
		return types.Configured{}, nil
	case len(raw) == 0:
		return types.Configured{}, fmt.Errorf("nothing to set: give %s or --set NAME=QUANTITY, or --clear", configurableKinds("--"))
	case r.timeout < 0:
		return types.Configured{}, fmt.Errorf("--timeout must not be negative, got %s", r.timeout)
	case r.nodeName == "":
		return types.Configured{}, errors.New("--node-name is empty, $NODE_NAME is unset and the hostname is unknown: set --node-name")
	}
	return types.Configured{Present: true, Raw: raw, Release: r.release}, nil
}

// nodeConfig is what resize needs of kube.NodeConfig.
type nodeConfig interface {
	SetConfiguredCapacity(ctx context.Context, raw map[string]string, release bool) (types.NodeView, error)
	ClearConfiguredCapacity(ctx context.Context) (types.NodeView, error)
	WatchNode(ctx context.Context, f func(types.NodeView) (bool, error)) error
}

var _ nodeConfig = (*kube.NodeConfig)(nil)

// connectNode connects to the API server; tests replace it.
var connectNode = func(kubeconfig, nodeName string, log *slog.Logger) (nodeConfig, error) {
	return kube.ConnectNodeConfig(kubeconfig, nodeName, log)
}

// resize writes the configured capacity and, with --wait, follows the
// condition until node-resized answers for it. It returns the exit status.
func resize(ctx context.Context, r *resizeFlags, want types.Configured, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "node-resizectl resize: "+format+"\n", a...)
		return code
	}
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	// The watch's retried failures (an API server gone for a while) are
	// warnings on stderr; the wait goes on.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := connectNode(r.kubeconfig, r.nodeName, log)
	if err != nil {
		return fail(exitAPI, "%v", err)
	}
	var v types.NodeView
	if want.Present {
		v, err = nc.SetConfiguredCapacity(ctx, want.Raw, want.Release)
	} else {
		v, err = nc.ClearConfiguredCapacity(ctx)
	}
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fail(exitTimeout, "timed out after %s: %v", r.timeout, err)
	case err != nil:
		return fail(exitAPI, "Node %s: %v (check --kubeconfig and --node-name; the identity must be allowed to patch the Node)", r.nodeName, err)
	}
	if want.Present {
		fmt.Fprintf(stdout, "Node %s: configured capacity %s set (%s)\n", r.nodeName, want.Key(), v.Source)
	} else {
		fmt.Fprintf(stdout, "Node %s: configured capacity removed; the node follows its hardware\n", r.nodeName)
	}
	if !r.wait {
		return exitOK
	}

	w := &waiter{want: want, out: stdout}
	err = nc.WatchNode(ctx, w.see)
	switch {
	case err == nil:
		if w.code != exitOK {
			return fail(w.code, "%s", w.why)
		}
		return exitOK
	case errors.Is(err, context.DeadlineExceeded):
		last := "last condition: none for this value yet"
		if w.last != nil {
			last = fmt.Sprintf("last condition: %s: %s", w.last.Reason, w.last.Message)
		}
		return fail(exitTimeout, "node-resized did not answer within %s (%s)", r.timeout, last)
	case ctx.Err() != nil:
		return fail(exitFailed, "interrupted: %v", ctx.Err())
	}
	return fail(exitAPI, "%v", err)
}

// waiter follows the Node's views until the condition answers the request
// want. It prints each new condition decided for the request as progress.
type waiter struct {
	want types.Configured
	out  io.Writer
	// last is the condition printed last; waiting says the "waiting" line
	// is printed; ours says the Node was seen with want configured.
	last    *types.Condition
	waiting bool
	ours    bool
	// code and why are the outcome once see returns true.
	code int
	why  string
}

// see takes one view of the Node and reports whether the wait is over.
func (w *waiter) see(v types.NodeView) (bool, error) {
	if v.Configured.Key() == w.want.Key() {
		w.ours = true
	} else if w.ours {
		// Watched in order: someone else changed it after this request.
		w.code, w.why = exitFailed, fmt.Sprintf("the configured capacity was changed to %s meanwhile", describeConfigured(v.Configured))
		return true, nil
	}
	c := v.Condition
	if c == nil || !c.DecidedFor(w.want) || !w.ours {
		if !w.waiting {
			w.waiting = true
			fmt.Fprintf(w.out, "Waiting for node-resized to answer for %s...\n", describeConfigured(w.want))
		}
		return false, nil
	}
	if w.last == nil || !w.last.Same(*c) {
		cc := *c
		w.last = &cc
		fmt.Fprintf(w.out, "%s  %-16s %s\n", time.Now().Format(time.TimeOnly), c.Reason, c.Message)
	}
	switch c.Reason {
	case types.ReasonAccepted:
		w.code = exitOK
		if _, released, ok := strings.Cut(c.Message, "released: "); ok && w.want.Release {
			fmt.Fprintf(w.out, "Released (remove in the hypervisor what is safe to unplug): %s\n", released)
		}
		return true, nil
	case types.ReasonInfeasible, types.ReasonEmergencyReduced:
		w.code, w.why = exitFailed, fmt.Sprintf("not applied (%s): %s", c.Reason, c.Message)
		return true, nil
	}
	return false, nil
}

func describeConfigured(c types.Configured) string {
	if !c.Present {
		return "no configured capacity"
	}
	return c.Key()
}
