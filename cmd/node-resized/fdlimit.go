package main

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/node-resized/node-resized/api"
)

// detectionReserve is the least room, in descriptors, the API's caps
// leave the detection loop beyond what it holds at start: the sysfs reads
// of a rebuild that are not cached, /proc reads of the metrics, the
// kubelet and API server connections.
const detectionReserve = 256

// connectionCap returns the connection cap per listener that leaves the
// detection loop room below the open-files limit soft, given the
// descriptors open now (the model built, its files cached): room for
// what it holds now again (hot-added memory blocks and CPUs keep files
// open too), at least detectionReserve, and per listener the connections
// it accepts only to refuse (api.Refusers, and the one just accepted). It returns want when
// that fits, and whether it had to lower it; the cap is at least 1.
func connectionCap(want, listeners int, soft uint64, open int) (int, bool) {
	room := int64(soft) - int64(open) - int64(max(open, detectionReserve)) - int64(listeners)*(api.Refusers+1)
	per := room / int64(max(listeners, 1))
	if per >= int64(want) {
		return want, false
	}
	return int(max(per, 1)), true
}

// openFiles returns the process's open-files limit (the soft one, which
// the Go runtime raised to the hard one at start) and how many
// descriptors it has open.
func openFiles() (soft uint64, open int, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, fmt.Errorf("count open descriptors: %w", err)
	}
	return rl.Cur, len(fds), nil
}

// apiLimits returns the API's limits from the flags, the connection cap
// lowered if it would not leave the detection loop room below the
// open-files limit.
func apiLimits(o *options, listeners int, log *slog.Logger) api.Limits {
	lim := o.apiLimits
	soft, open, err := openFiles()
	if err != nil {
		log.Warn("cannot check the API's connection cap against the open-files limit", "err", err)
		return lim
	}
	n, lowered := connectionCap(lim.MaxConnections, listeners, soft, open)
	if lowered {
		log.Warn("lowered the API's connection cap to leave the detection loop room below the open-files limit (raise LimitNOFILE)",
			"api_max_connections", lim.MaxConnections, "cap", n, "open_files_limit", soft, "open", open, "listeners", listeners)
		lim.MaxConnections = n
	}
	log.Debug("local API limits", "max_connections", lim.MaxConnections, "max_streams", lim.MaxStreams,
		"idle_timeout", lim.IdleTimeout, "read_timeout", lim.ReadTimeout, "open_files_limit", soft, "open", open)
	return lim
}
