package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/kubelet/lifecycle"
	"github.com/node-resized/node-resized/metrics"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// recoverWithin bounds `node-resized kubelet-recover`: it runs as
// node-resized.service's ExecStopPost, within the unit's TimeoutStopSec.
const recoverWithin = 20 * time.Second

// stopRecordPath is the kubelet's stop record, in the state directory.
func (o *options) stopRecordPath() string {
	return filepath.Join(filepath.Dir(o.stateFile), lifecycle.StopRecordFile)
}

// startNotesPath is where a recovery with no daemon to tell notes the
// kubelet starts it made, in the state directory.
func (o *options) startNotesPath() string {
	return filepath.Join(filepath.Dir(o.stateFile), lifecycle.StartNotesFile)
}

// bootIDPath is the kernel's boot id under --procfs-root.
func (o *options) bootIDPath() string {
	return filepath.Join(o.procfsRoot, "sys", "kernel", "random", "boot_id")
}

// withRecovery completes the restarter built for the daemon with what
// recovery needs: the stop record, the monitor's model of the machine,
// and a metric and an event for each kubelet it starts. It returns the
// restarter, whose Run is the recovery loop; assemble tells it of the
// agent, which counts each start in the restart budget (Started).
func (p *parts) withRecovery(ar agent.KubeletRestarter, o *options, log *slog.Logger, m *metrics.Metrics) *lifecycle.Restarter {
	a, ok := ar.(restarter)
	if !ok {
		return nil
	}
	r := a.Restarter
	r.StopRecord, r.BootIDPath, r.Logger = o.stopRecordPath(), o.bootIDPath(), log
	r.StartNotes = o.startNotesPath()
	r.Machine = func() (*topology.Snapshot, error) {
		if snap, _ := p.monitor.Snapshot(); snap != nil {
			return snap, nil
		}
		return nil, errors.New("no model of the machine yet")
	}
	relay := p.relay
	r.Recovered = func(rec lifecycle.StopRecord, err error) {
		m.KubeletRecoveries.Inc()
		msg := fmt.Sprintf("started %s, which node-resized (pid %d) had stopped at %s to rewrite its checkpoints and had not started again", rec.Unit, rec.PID, rec.At.Format(time.RFC3339))
		if err != nil {
			msg += ": " + err.Error()
		}
		if relay != nil {
			relay.Event(types.EventWarning, types.EventKubeletRecovered, msg)
		}
	}
	return r
}

const recoverUsage = `node-resized kubelet-recover starts a kubelet that node-resized stopped (to
rewrite its checkpoints before a restart) and did not start again, because
the daemon died in between: SIGKILL, the OOM killer, the watchdog.

It runs as node-resized.service's ExecStopPost, after every stop of the
daemon. Only when the daemon's stop record exists (kubelet-stopped.json in the
state directory), is of this boot and the kubelet's unit is stopped does it
make the kubelet's checkpoints fit the machine as sysfs shows it and start the
unit, with a start that replaces no job (never a shutdown's), then note the
start (kubelet-started.json in the state directory), which the daemon counts
in its restart budget when it starts. A record of another boot is removed. It waits a few seconds at most for a unit that is
still stopping, and does nothing during a shutdown.

Usage:
  node-resized kubelet-recover [daemon flags]

It takes the daemon's flags (the unit passes $NODE_RESIZED_ARGS from
/etc/default/node-resized), reads these and ignores the others:
  --state-file                            its directory holds the stop record
  --kubelet-unit                          the unit to start
  --kubelet-config, --kubelet-root-dir    the checkpoints
  --sysfs-root, --procfs-root             the machine and the boot id
  --log-level, --log-format               as the daemon's

Exit status:
  0   nothing to do, or the kubelet was started
  1   the kubelet had to be started and could not be
  2   bad flags
`

// kubeletRecover is `node-resized kubelet-recover [daemon flags]`,
// node-resized.service's ExecStopPost: the safety net for a daemon that
// died (SIGKILL, OOM, watchdog) after it stopped the kubelet and before
// it started it. When the stop record exists, is of this boot and the
// kubelet's unit is stopped, it makes the checkpoints safe for the
// machine as sysfs shows it and starts the unit, with a start that
// replaces no job (never a shutdown's), then notes the start for the
// daemon's restart budget. It waits a few seconds at most
// for a unit still stopping; nothing at all during a shutdown. It takes
// the daemon's flags (--state-file, --kubelet-unit, --kubelet-config,
// --kubelet-root-dir, --sysfs-root, --procfs-root, the log flags) and
// ignores the others. It exits 0 unless the unit it had to start could
// not be started.
func kubeletRecover(args []string) int {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fmt.Fprint(os.Stdout, recoverUsage)
		return 0
	}
	o, err := parseFlags(args, io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-resized kubelet-recover:", err)
		return 2
	}
	log := newLogger(o, os.Stderr).With("part", "kubelet-recover")
	if _, err := os.Lstat(o.stopRecordPath()); errors.Is(err, os.ErrNotExist) {
		return 0 // the common case: the daemon stopped with no restart under way
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverWithin)
	defer cancel()
	sd := systemd.NewClient()
	defer sd.Close()
	r := &lifecycle.Restarter{Unit: o.kubeletUnit, Systemd: sd}
	if kcfg, err := loadKubeletConfig(o, log); err != nil {
		log.Warn("the kubelet's configuration: its checkpoints are left as they are", "err", err)
	} else if r, err = lifecycle.NewRestarter(sd, o.kubeletUnit, o.kubeletRootDirOrDefault(), kcfg); err != nil {
		log.Warn("the kubelet's configuration: its checkpoints are left as they are", "err", err)
		r = &lifecycle.Restarter{Unit: o.kubeletUnit, Systemd: sd}
	} else {
		r.Machine = func() (*topology.Snapshot, error) {
			fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
			if err != nil {
				return nil, err
			}
			return fsys.Snapshot()
		}
	}
	r.StopRecord, r.BootIDPath, r.Logger = o.stopRecordPath(), o.bootIDPath(), log
	// No daemon runs to count the start in its restart budget: it is
	// noted beside the stop record, and the daemon counts it when it
	// starts (the state file keeps one writer, the daemon).
	r.StartNotes = o.startNotesPath()
	// During `systemctl stop node-resized` the kubelet's start is
	// ordered after this unit's stop, which waits for this command:
	// queue the start, and wait briefly for its result only.
	r.StartWait = 3 * time.Second
	rec, _ := lifecycle.ReadStopRecord(r.StopRecord)
	for {
		got, err := r.Recover(ctx)
		switch got {
		case lifecycle.RecoveryStarted:
			log.Warn("started the kubelet that node-resized had stopped and not started again",
				"unit", o.kubeletUnit, "stopped_at", rec.At, "stopped_by_pid", rec.PID, "err", err)
			return 0
		case lifecycle.RecoveryWaiting:
			if ctx.Err() == nil {
				time.Sleep(250 * time.Millisecond)
				continue
			}
			log.Warn("the kubelet is not stopped yet or could not be started; the daemon's next start retries", "unit", o.kubeletUnit, "err", err)
			return 1
		case lifecycle.RecoveryShutdown:
			log.Info("the system is shutting down: the kubelet is left to it", "unit", o.kubeletUnit)
		case lifecycle.RecoveryCleared:
			log.Info("removed the kubelet's stop record: nothing to start", "unit", o.kubeletUnit, "err", err)
		}
		return 0
	}
}
