package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/monitor"
	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/systemd"
)

// run runs the daemon until ctx is done: it builds every part, then starts
// them in order. Each part that needs a loop owns it; the first to fail
// stops the others.
func run(ctx context.Context, o *options, log *slog.Logger) error {
	// A SIGHUP from now on is a reload (onHangup), never the end.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	p, err := assemble(ctx, o, log)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	start := func(name string, run func(context.Context) error) {
		g.Go(func() error {
			if err := run(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	start("detection loop", p.monitor.Run)
	select {
	case <-p.monitor.Ready():
	case <-ctx.Done():
		p.socket.Close()
		if p.tcp != nil {
			p.tcp.Close()
		}
		return g.Wait()
	}
	start("decision loop", p.agent.Run)
	if p.onliner != nil {
		start("auto-online", p.onliner.Run)
	}
	if p.enforcer != nil {
		start("kubepods re-assert", func(ctx context.Context) error { return p.enforcer.Run(ctx, p.monitor) })
	}
	if p.relay != nil {
		start("API relay", p.relay.Run) // the status patch worker, events and the Node watch
	}
	if p.evictor != nil {
		start("evictor", p.evictor.Run)
	}
	if p.nrt != nil {
		start("NodeResourceTopology publisher", p.nrt.Run)
	}
	if p.watcher != nil {
		start("kubelet watch", p.watcher.Run) // systemd and the pod-resources API, polled
	}
	if p.recovery != nil {
		start("kubelet recovery", p.recovery.Run) // at start and on a timer
	}
	listeners := 1
	if p.tcp != nil {
		listeners++
	}
	p.api.Limits = apiLimits(o, listeners, log) // the model built: its files are open
	start("local API", func(ctx context.Context) error { return p.api.Serve(ctx, p.socket) })
	if p.tcp != nil {
		start("TCP listener", func(ctx context.Context) error { return p.api.ServeTCP(ctx, p.tcp) })
	}
	start("SIGHUP handler", func(ctx context.Context) error { return p.onHangup(ctx, hup, log) })
	start("systemd watchdog", func(ctx context.Context) error { return systemd.Watchdog(ctx, p.alive(ctx)) })
	p.announce(o, log)

	<-ctx.Done()
	systemd.Stopping()
	log.Info("shutting down")
	err = g.Wait()
	if p.releaser != nil {
		p.releaser.Stop() // a write in flight ends within its bound
	}
	if p.systemd != nil {
		p.systemd.Close()
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// alive is the watchdog's check: the detection loop answers within
// monitor.AliveTimeout. /healthz and /readyz make the same check.
func (p *parts) alive(ctx context.Context) func() bool {
	return func() bool {
		c, done := context.WithTimeout(ctx, monitor.AliveTimeout)
		defer done()
		return p.monitor.Alive(c)
	}
}

// announce logs the start and tells systemd the daemon is ready.
func (p *parts) announce(o *options, log *slog.Logger) {
	snap, capac := p.monitor.Snapshot()
	if o.metricsAddress != "" {
		log.Warn("--metrics-address is deprecated: use --listen-address", "listen_address", o.listenAddress)
	}
	listen := ""
	if p.tcp != nil {
		listen = p.tcp.Addr().String() // the port the kernel chose for :0
	}
	log.Info("node-resized ready",
		"version", version, "mode", p.info.Mode, "node", o.nodeName, "socket", o.socket, "listen_address", listen,
		"sysfs_root", o.sysfsRoot, "procfs_root", o.procfsRoot, "uevents", o.uevents,
		"capacity", capac.String(), "cpus_online", snap.CPUs.Online.String())
	status := fmt.Sprintf("watching %s CPUs, %s memory", resources.Format(resources.CPU, capac[resources.CPU]),
		api.FormatBytes(uint64(capac[resources.Memory])))
	if err := systemd.Ready(status); err != nil {
		log.Warn("tell systemd we are ready", "err", err)
	}
}

// listeners opens the local API socket and, if asked, the TCP listener.
func listeners(o *options) (socket, tcp net.Listener, err error) {
	socket, err = api.Listen(o.socket, o.socketGroup)
	if err != nil {
		return nil, nil, err
	}
	if o.listenAddress != "" {
		if tcp, err = net.Listen("tcp", o.listenAddress); err != nil {
			socket.Close()
			return nil, nil, fmt.Errorf("--listen-address %s: %w", o.listenAddress, err)
		}
	}
	return socket, tcp, nil
}
