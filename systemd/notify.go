package systemd

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready tells systemd that the daemon is up (Type=notify). It is a no-op
// when the daemon was not started by systemd.
func Ready(status string) error {
	_, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+status)
	if err != nil {
		return fmt.Errorf("sd_notify READY: %w", err)
	}
	return nil
}

// Stopping tells systemd that the daemon is shutting down.
func Stopping() {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
}

// Watchdog pings systemd's watchdog at half the configured WatchdogSec for as
// long as alive reports true and ctx is not done. alive should prove that
// the detection loop still turns, not merely that the process exists. It
// returns at once when no watchdog is configured.
func Watchdog(ctx context.Context, alive func() bool) error {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("read the watchdog interval: %w", err)
	}
	if interval == 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if alive() {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
}
