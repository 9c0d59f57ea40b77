package main

import (
	"context"
	"log/slog"
	"os"
	"time"
)

// hangupResyncTimeout bounds the resync a SIGHUP asks for.
const hangupResyncTimeout = 30 * time.Second

// onHangup answers each SIGHUP on hup until ctx is done: node-resized has
// no configuration file to reload (its flags are read once, at start), so
// a reload re-reads what it can, the machine: a full resync of the model,
// as POST /v1/resync does. Without it a SIGHUP would end the daemon at
// once, without a shutdown, its socket left behind.
func (p *parts) onHangup(ctx context.Context, hup <-chan os.Signal, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
		}
		log.Info("SIGHUP: resyncing the machine model; flags are read only at start (restart node-resized to change them)")
		rctx, cancel := context.WithTimeout(ctx, hangupResyncTimeout)
		res, err := p.monitor.Resync(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Warn("SIGHUP: resync failed", "err", err)
		default:
			log.Info("SIGHUP: resync done", "changed", res.Changed)
		}
	}
}
