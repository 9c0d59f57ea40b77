// Package systemd is node-resized's glue to systemd, and the one package
// that speaks D-Bus:
//
//   - readiness and watchdog notifications (sd_notify: Ready, Stopping,
//     Watchdog);
//   - a log/slog handler that writes structured entries to the journal
//     (JournalHandler);
//   - Client, a small client of systemd's D-Bus API (go-systemd on godbus)
//     that reads a unit's state (active and sub state, main PID, start
//     times) and restarts, stops or starts it, waiting for the job's
//     result. It connects to the system bus, or any bus address, on first
//     use and again after the bus is lost. Which unit, and when, is its
//     callers' to decide;
//   - the unit file the daemon ships with (node-resized.service).
package systemd
