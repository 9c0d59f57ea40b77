package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/node-resized/node-resized/kubelet/lifecycle"
	"github.com/node-resized/node-resized/topology"
)

const prestartUsage = `node-resized kubelet-prestart makes the kubelet's CPU and memory manager
checkpoints (cpu_manager_state, memory_manager_state in --kubelet-root-dir)
acceptable to it on the machine as it is, just before the kubelet starts.

The stock kubelet's static CPU and memory managers refuse to start when the
machine's CPUs or memory differ from their checkpoints ("current set of
available CPUs ... doesn't match with CPUs in state"): after a hot-add or an
unplug, or a VM resized while the kubelet was down. This plans both
checkpoints for the CPUs online in sysfs and the memory of each NUMA node now,
with the planner the daemon uses before it restarts the kubelet, keeping every
exclusive assignment that still fits, and writes what changed (atomically;
the previous files are kept as *.node-resized.bak). A second run changes
nothing.

It runs as an ExecStartPre of kubelet.service, from the drop-in
/usr/lib/systemd/system/kubelet.service.d/90-node-resized.conf the packages
install (make install: /etc/systemd/system/kubelet.service.d), so that every
start of the kubelet passes through it: the daemon's restart (then one
systemd job), systemctl restart kubelet by hand, systemd's own restarts, the
boot. It takes tens of milliseconds on a host (about 25 ms) and about
135 ms in an emulated guest (docs/measurements.md).

It never keeps a kubelet from starting that would have started without it:
on any failure (the kubelet's configuration or sysfs unreadable, a checkpoint
that is corrupt or that no rewrite makes safe, a write error, a panic, its
own deadline of a few seconds) it logs why, leaves the files as they were and
exits 0; the drop-in's "-" makes systemd ignore its exit status too. After a
rollback (a rewrite the kubelet refused, put back from the backups) it
rewrites nothing while the files are those the rollback restored
(kubelet-prestart-hold.json in the state directory).

It logs one record per run (the kubelet's journal, SYSLOG_IDENTIFIER
node-resized; journalctl -u kubelet -t node-resized), with its outcome and
duration.

Usage:
  node-resized kubelet-prestart [daemon flags]

It takes the daemon's flags (the drop-in passes $NODE_RESIZED_ARGS from
/etc/default/node-resized, so they are configured in one place), reads these
and ignores the others:
  --kubelet-config, --kubelet-config-dir  reservedSystemCPUs, strict-cpu-reservation, reservedMemory
  --kubelet-root-dir                      where the checkpoints are
  --sysfs-root, --procfs-root             the machine
  --state-file                            its directory holds the rollback's hold
  --log-level, --log-format               as the daemon's
`

// kubeletPrestart is `node-resized kubelet-prestart`. It returns the exit
// status, which is 0 whatever happened (see prestartUsage).
func kubeletPrestart(args []string, stdout, stderr io.Writer) (status int) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(stderr, "node-resized kubelet-prestart: panic: %v; the kubelet starts as it would without node-resized\n", v)
			status = 0
		}
	}()
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fmt.Fprint(stdout, prestartUsage)
		return 0
	}
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		newLogger(&options{logLevel: "info", logFormat: "auto"}, stderr).Warn(
			"kubelet pre-start failed: the checkpoints are as they were, the kubelet starts as it would without node-resized",
			"outcome", string(lifecycle.PrestartFailed), "err", fmt.Errorf("the daemon's flags: %w", err))
		return 0
	}
	log := newLogger(o, stderr)
	p := &lifecycle.Prestart{
		Checkpoints: func() (lifecycle.Checkpoints, error) {
			cfg, err := loadKubeletConfig(o, log)
			if err != nil {
				return lifecycle.Checkpoints{}, err
			}
			return lifecycle.NewCheckpoints(o.kubeletRootDirOrDefault(), cfg)
		},
		Machine: func() (*topology.Snapshot, error) {
			fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
			if err != nil {
				return nil, err
			}
			return fsys.Snapshot()
		},
		HoldFile: filepath.Join(filepath.Dir(o.stateFile), lifecycle.HoldFile),
		Log:      log,
	}
	p.Run(context.Background())
	return 0
}
