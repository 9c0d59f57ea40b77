// Command node-resized is the node-resized daemon: it follows the kernel's
// CPU and memory hotplug events, keeps an exact model of the machine and
// serves it on a local unix socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/uevent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usageHead = `node-resized follows CPU and memory hotplug on this machine and keeps an
exact model of it: kernel uevents (NETLINK_KOBJECT_UEVENT) trigger a rebuild
of the NUMA topology from sysfs within milliseconds, a MemTotal watch catches
balloon and virtio-mem changes that send no uevent, and a periodic resync is
the safety net. The model, the kubelet-exact physical capacity and every
change are served on a unix socket (ask it with node-resizectl or
curl --unix-socket).

Usage:
  node-resized --standalone [flags]

Examples:
  node-resized --standalone                      run against this machine
  node-resized --standalone --socket /tmp/nr.sock --log-level debug
  node-resized --standalone --sysfs-root ./testdata/sys --procfs-root ./testdata/proc --uevents=false

Run under systemd with: systemctl enable --now node-resized
Logs: journalctl -u node-resized (structured fields with -o verbose)

Flags:
`

// options are the daemon's settings, filled from flags.
type options struct {
	standalone     bool
	sysfsRoot      string
	procfsRoot     string
	kubeletRootDir string
	socket         string
	socketGroup    string
	metricsAddress string
	uevents        bool
	ueventBuffer   int
	quiet          time.Duration
	maxWait        time.Duration
	memPoll        time.Duration
	resync         time.Duration
	history        int
	logLevel       string
	logFormat      string
	showVersion    bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("node-resized", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.standalone, "standalone", false, "run without a Kubernetes cluster: detect, model and serve the local API only")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "where sysfs is mounted (point at a synthetic tree for tests)")
	fs.StringVar(&o.procfsRoot, "procfs-root", "/proc", "where procfs is mounted")
	fs.StringVar(&o.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root directory; its filesystem's size is the ephemeral-storage capacity (empty: not measured)")
	fs.StringVar(&o.socket, "socket", api.DefaultSocket, "unix socket of the local API (created 0660, parent directory created)")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group that owns the socket, so its members can use node-resizectl without root")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "also serve /metrics on this TCP address, e.g. 127.0.0.1:9477 (empty: only on the socket)")
	fs.BoolVar(&o.uevents, "uevents", true, "listen to kernel uevents (turn off only with a synthetic --sysfs-root; the MemTotal watch and resyncs still run)")
	fs.IntVar(&o.ueventBuffer, "uevent-buffer", 16<<20, "receive buffer of the uevent socket in bytes (SO_RCVBUFFORCE when permitted)")
	fs.DurationVar(&o.quiet, "coalesce-quiet", 20*time.Millisecond, "rebuild once no event has arrived for this long (a burst of events becomes one change)")
	fs.DurationVar(&o.maxWait, "coalesce-max", 500*time.Millisecond, "rebuild at the latest this long after the first event of a burst")
	fs.DurationVar(&o.memPoll, "memtotal-interval", time.Second, "how often to check MemTotal for changes that send no uevent (0: off)")
	fs.DurationVar(&o.resync, "resync-interval", 5*time.Minute, "how often to rebuild the model in full as a safety net (0: off)")
	fs.IntVar(&o.history, "history", 256, "how many changes to keep for /v1/events")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto (journal under systemd, text otherwise), journal, text or json")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (node-resized takes flags only; see --help)", fs.Arg(0))
	}
	switch {
	case o.showVersion:
		return o, nil
	case !o.standalone:
		return nil, errors.New("--standalone is required: this build runs without a Kubernetes cluster only (see --help)")
	case o.quiet <= 0:
		return nil, fmt.Errorf("--coalesce-quiet must be positive, got %s", o.quiet)
	case o.maxWait < o.quiet:
		return nil, fmt.Errorf("--coalesce-max (%s) must not be shorter than --coalesce-quiet (%s)", o.maxWait, o.quiet)
	case o.memPoll < 0 || o.resync < 0:
		return nil, errors.New("--memtotal-interval and --resync-interval must not be negative (0 turns them off)")
	case o.history <= 0:
		return nil, fmt.Errorf("--history must be positive, got %d", o.history)
	case o.socket == "":
		return nil, errors.New("--socket must not be empty")
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	switch o.logFormat {
	case "auto", "journal", "text", "json":
	default:
		return nil, fmt.Errorf("--log-format: want auto, journal, text or json, got %q", o.logFormat)
	}
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: want debug, info, warn or error, got %q", s)
	}
	return l, nil
}

func newLogger(o *options, stderr io.Writer) *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	format := o.logFormat
	if format == "auto" {
		format = "text"
		if systemd.UnderJournal() {
			format = "journal"
		}
	}
	switch format {
	case "journal":
		return slog.New(systemd.NewJournalHandler("node-resized", level))
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	default:
		return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	}
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-resized:", err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("node-resized", version)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(o, os.Stderr)
	if err := run(ctx, o, log); err != nil {
		// One clear line: to the journal with fields under systemd, plain
		// on stderr otherwise.
		if _, journal := log.Handler().(*systemd.JournalHandler); journal {
			log.Error("node-resized failed", "err", err)
		} else {
			fmt.Fprintln(os.Stderr, "node-resized:", err)
		}
		os.Exit(1)
	}
}

// run runs the daemon until ctx is done.
func run(ctx context.Context, o *options, log *slog.Logger) error {
	fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
	if err != nil {
		return err
	}
	fsys = fsys.WithKubeletRootDir(o.kubeletRootDir)
	m := metrics.New()

	var src monitor.Source
	if o.uevents {
		l, err := uevent.Listen(uevent.Options{
			ReceiveBuffer: o.ueventBuffer,
			Logger:        log,
			OnEvent: func(subsystem string, action uevent.Action) {
				m.UeventsTotal.WithLabelValues(subsystem, action.String()).Inc()
			},
			OnDrop: func(reason uevent.DropReason, n int) {
				m.UeventsDropped.WithLabelValues(string(reason)).Add(float64(n))
			},
		})
		if err != nil {
			return fmt.Errorf("listen for kernel uevents: %w (run with --uevents=false to rely on the MemTotal watch and resyncs only)", err)
		}
		src = l
	}

	mon := monitor.New(fsys, src, monitor.Config{
		Quiet:   o.quiet,
		MaxWait: o.maxWait,
		MemPoll: disabledIfZero(o.memPoll),
		Resync:  disabledIfZero(o.resync),
		History: o.history,
		Logger:  log,
		Metrics: m,
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}

	goRun("detection loop", func() error { return mon.Run(ctx) })
	select {
	case <-mon.Ready():
	case <-ctx.Done():
		wg.Wait()
		return firstErr(errs)
	}

	ln, err := api.Listen(o.socket, o.socketGroup)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	hostname, _ := os.Hostname()
	srv := api.NewServer(mon, m, api.Info{Version: version, Hostname: hostname, Mode: "standalone"}, log)
	goRun("local API", func() error { return srv.Serve(ctx, ln) })
	if o.metricsAddress != "" {
		mln, err := net.Listen("tcp", o.metricsAddress)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("--metrics-address %s: %w", o.metricsAddress, err)
		}
		goRun("metrics listener", func() error { return srv.ServeMetrics(ctx, mln) })
	}
	goRun("systemd watchdog", func() error {
		return systemd.Watchdog(ctx, func() bool {
			c, done := context.WithTimeout(ctx, 5*time.Second)
			defer done()
			return mon.Alive(c)
		})
	})

	snap, capac := mon.Snapshot()
	log.Info("node-resized ready",
		"version", version, "socket", o.socket, "metrics_address", o.metricsAddress,
		"sysfs_root", o.sysfsRoot, "procfs_root", o.procfsRoot, "uevents", o.uevents,
		"cpu", capac.CPU, "memory_bytes", capac.Memory, "cpus_online", snap.CPUs.Online.String())
	if err := systemd.Ready(fmt.Sprintf("watching %d CPUs, %s memory", capac.CPU, humanBytes(capac.Memory))); err != nil {
		log.Warn("tell systemd we are ready", "err", err)
	}

	<-ctx.Done()
	systemd.Stopping()
	log.Info("shutting down")
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func disabledIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func firstErr(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(b)/float64(div), strings.ToUpper("kmgtpe")[exp])
}
