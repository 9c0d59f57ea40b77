// Package systemd is node-resized's glue to systemd: readiness and watchdog
// notifications (sd_notify), a log/slog handler that writes structured
// entries to the journal, and the unit file the daemon ships with.
package systemd
