package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "node_resized"

// LatencyBuckets are the histogram buckets, in seconds, for the time from a
// kernel event to the daemon having acted on it. They resolve the
// sub-millisecond model rebuild as well as a coalesced burst that waits for
// its full window.
var LatencyBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// UeventDropReasons are the values of node_resized_uevents_dropped_total's
// reason label: the uevent listener's drop reasons (uevent.DropReason) and
// the detection loop's queue_full.
var UeventDropReasons = []string{"not_kernel", "malformed", "udev", "overflow", "seqnum_gap", "queue_full"}

// ErrorSubsystems are the values of node_resized_resize_errors_total's
// subsystem label.
var ErrorSubsystems = []string{"api_patch", "api_watch", "api_topology", "event", "state_file", "cgroup_update", "eviction"}

// KubeletRestartResults are the values of node_resized_kubelet_restarts_total's
// result label: systemd's job results, and error for a restart that got
// none.
var KubeletRestartResults = []string{"done", "canceled", "timeout", "failed", "dependency", "skipped", "error"}

// HotplugBuckets are the histogram buckets, in seconds, for one write of a
// hotplug file: a CPU online takes milliseconds, a memory block's offline
// migrates its pages first and is cut at its timeout (30 s by default).
var HotplugBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// HotplugResults are the values of node_resized_hotplug_writes_total's
// result label: ok, error (the kernel refused it: EBUSY, EINVAL, ...),
// timeout (cut at its timeout), interrupted (cut as the daemon stopped),
// refused (not written: held offline, or a CPU without an online file)
// and gone (the device was not there).
var HotplugResults = []string{"ok", "error", "timeout", "interrupted", "refused", "gone"}

// ReleaseResults are the values of node_resized_releases_total's result
// label: done (the target was reached), short (the release went as far as
// it could and said what did not go) and stopped (the request changed or
// went while it ran; what it took offline is given back or released again
// as the new request says).
var ReleaseResults = []string{"done", "short", "stopped"}

// Metrics holds every metric of the daemon. It is safe for concurrent use:
// the Prometheus types are.
type Metrics struct {
	Registry *prometheus.Registry

	// UeventsTotal counts kernel uevents delivered to the detection loop,
	// by subsystem and action.
	UeventsTotal *prometheus.CounterVec
	// UeventsDropped counts kernel messages that were dropped or lost, by
	// reason (not_kernel, malformed, udev, overflow, seqnum_gap, queue_full).
	UeventsDropped *prometheus.CounterVec
	// DetectionLatency observes the time from the arrival of the first
	// kernel event of a batch to the updated model.
	DetectionLatency prometheus.Histogram
	// Rebuilds counts model rebuilds, incremental or full, by trigger and
	// result (changed, unchanged, error).
	Rebuilds *prometheus.CounterVec
	// RebuildDuration observes how long one rebuild from sysfs takes, the
	// one whose model the loop installs: incremental or full.
	RebuildDuration prometheus.Histogram
	// IncrementalMismatch counts incremental models that a full rebuild
	// of the same moment contradicted: each one is a bug in the
	// incremental update (the full model is installed instead).
	IncrementalMismatch prometheus.Counter
	// Capacity is the node's physical capacity by resource and unit
	// (resources.UnitOf: core, byte, integer), as kube-state-metrics'
	// kube_node_status_capacity labels it.
	Capacity *prometheus.GaugeVec
	// TargetCapacity is the capacity node-resized publishes and enforces
	// (the target: the configured capacity, or less after a loss), by
	// resource and unit.
	TargetCapacity *prometheus.GaugeVec
	// Allocatable is the allocatable of the target, by resource and unit.
	Allocatable *prometheus.GaugeVec
	// NUMACapacity is the physical capacity of each NUMA node, by
	// resource and unit.
	NUMACapacity *prometheus.GaugeVec
	// ModelChanges counts model changes by kind of change.
	ModelChanges *prometheus.CounterVec

	// ResizeRequests counts changes of the published capacity by resource
	// and direction (up, down).
	ResizeRequests *prometheus.CounterVec
	// ResizeErrors counts failures by subsystem (api_patch, api_watch,
	// api_topology, event, state_file, cgroup_update, ...).
	ResizeErrors *prometheus.CounterVec
	// PatchLatency observes the time from the first uevent of a hardware
	// change to the API server acknowledging the Node status patch.
	PatchLatency prometheus.Histogram
	// ClampLatency observes the time from the first uevent of a hardware
	// loss to the last kubepods limit written (not counting the read-backs
	// and the files that needed no write).
	ClampLatency prometheus.Histogram
	// AutoOnline counts hot-added devices the daemon brought online, by
	// kind (cpu, memory_block) and result (onlined, held: kept offline
	// for its unplug, already: online before the daemon's write, brought
	// online by the kernel itself or a udev rule, error).
	AutoOnline *prometheus.CounterVec
	// HotplugWrites counts writes of the kernel's hotplug files (package
	// hotplug), by kind (cpu, memory_block), op (online, offline) and
	// result (HotplugResults). The writer exposes each series at 0 when
	// it is made.
	HotplugWrites *prometheus.CounterVec
	// HotplugWriteDuration observes how long each write of a hotplug
	// file took, by kind and op, cut ones included.
	HotplugWriteDuration *prometheus.HistogramVec
	// CapacityCondition is 1 for the reason the CapacityConfigured
	// condition has now and 0 for the others (every reason is always
	// exported, so that an alert's "for" sees one series throughout).
	CapacityCondition *prometheus.GaugeVec
	// KubeletStale is 1 while the running kubelet's view of the machine
	// differs from the machine.
	KubeletStale prometheus.Gauge
	// KubeletRestartNeeded is 1 while the kubelet is stale and node-resized
	// will not restart it (turned off, unit not active, checkpoints).
	KubeletRestartNeeded prometheus.Gauge
	// KubeletRestarts counts the kubelet restarts node-resized did, by
	// result (systemd's job result: done, failed, timeout, …; error when
	// the restart did not get a result).
	KubeletRestarts *prometheus.CounterVec
	// KubeletRecoveries counts the kubelet units node-resized found left
	// stopped by a stop of its own (a daemon killed mid-restart) and
	// started again.
	KubeletRecoveries prometheus.Counter
	// KubeletCheckpointRollbacks counts the kubelet restarts after which
	// the kubelet refused a checkpoint node-resized had rewritten, and the
	// files were restored from their backups.
	KubeletCheckpointRollbacks prometheus.Counter
	// Tainted is 1 while node-resized keeps its NoSchedule taint on the
	// Node (--taint-while-stale, from a loss until the kubelet adopts it).
	Tainted prometheus.Gauge
	// KubepodsLimitsFailing is 1 while the last write of the kubepods
	// limits for the applied target failed (it is retried).
	KubepodsLimitsFailing prometheus.Gauge

	// ReleaseAllowed is 1 when the node allows planned releases
	// (--release, with a releaser to carry them out).
	ReleaseAllowed prometheus.Gauge
	// ReleaseInProgress is 1 while a planned release or its give back
	// runs.
	ReleaseInProgress prometheus.Gauge
	// ReleasedCPUs counts the CPUs node-resized holds offline after a
	// planned release (present and offline).
	ReleasedCPUs prometheus.Gauge
	// ReleasedMemoryBytes is the memory of the blocks node-resized holds
	// offline after a planned release that are still present: blocks
	// times the block size.
	ReleasedMemoryBytes prometheus.Gauge
	// MemoryDeviceSafeToUnplug is, for each memory device with a block
	// offline after a planned release, 1 when every block of it is
	// offline (the hypervisor may unplug it) and 0 otherwise; a device's
	// series goes when it has no released block any more.
	MemoryDeviceSafeToUnplug *prometheus.GaugeVec
	// Releases counts the planned releases that ended, by result
	// (ReleaseResults).
	Releases *prometheus.CounterVec
}

// New creates the metrics and registers them, with the Go runtime and
// process collectors, on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		UeventsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "uevents_total",
			Help:      "Kernel uevents delivered to the detection loop: the cpu, memory and node subsystems, and the block subsystem while the filesystem watch runs (a disk's resize).",
		}, []string{"subsystem", "action"}),
		UeventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "uevents_dropped_total",
			Help:      "Kernel uevent messages dropped (not from the kernel, malformed, udev) or lost (socket overflow, SEQNUM gap, full queue); a loss triggers a full rescan.",
		}, []string{"reason"}),
		DetectionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "detection_latency_seconds",
			Help:      "Time from the arrival of the first kernel event of a change to the updated machine model.",
			Buckets:   LatencyBuckets,
		}),
		Rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "model_rebuilds_total",
			Help:      "Rebuilds of the machine model from sysfs (incremental after uevents, full otherwise), by trigger and result.",
		}, []string{"trigger", "result"}),
		RebuildDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "model_rebuild_duration_seconds",
			Help:      "Time one rebuild of the machine model from sysfs takes, incremental or full.",
			Buckets:   LatencyBuckets,
		}),
		IncrementalMismatch: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "incremental_mismatch_total",
			Help:      "Incremental machine models that a full rebuild of the same moment contradicted (a bug; the full model was installed).",
		}),
		Capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "physical_capacity",
			Help:      "Physical capacity of the node as the kubelet computes it, by resource, in unit (core for cpu, byte for memory, hugepages and ephemeral-storage).",
		}, []string{"resource", "unit"}),
		TargetCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "target_capacity",
			Help:      "Capacity node-resized publishes on the Node and enforces (the configured capacity, or less after a loss), by resource, in unit.",
		}, []string{"resource", "unit"}),
		Allocatable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "allocatable",
			Help:      "Allocatable node-resized publishes on the Node (the target capacity less the kubelet's reservations), by resource, in unit.",
		}, []string{"resource", "unit"}),
		NUMACapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "numa_node_capacity",
			Help:      "Physical capacity of each NUMA node, by resource, in unit (core for cpu, byte for memory and hugepages).",
		}, []string{"numa_node", "resource", "unit"}),
		ModelChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "model_changes_total",
			Help:      "Changes of the machine model, by kind (cpu_online, memory_block_offline, memtotal, ...).",
		}, []string{"kind"}),
		ResizeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "resize_requests_total",
			Help:      "Changes of the capacity node-resized publishes and enforces, by resource and direction (up, down).",
		}, []string{"resource", "direction"}),
		ResizeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "resize_errors_total",
			Help:      "Failures while relaying or enforcing a capacity, by subsystem (api_patch, api_watch, api_topology, event, state_file, cgroup_update).",
		}, []string{"subsystem"}),
		PatchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "patch_latency_seconds",
			Help:      "Time from the first uevent of a hardware change to the API server acknowledging the Node status patch.",
			Buckets:   LatencyBuckets,
		}),
		ClampLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "clamp_latency_seconds",
			Help:      "Time from the first uevent of a hardware loss to the kubepods cgroup limits written.",
			Buckets:   LatencyBuckets,
		}),
		AutoOnline: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "auto_online_total",
			Help:      "Hot-added devices brought online by the daemon (--auto-online), by kind and result.",
		}, []string{"kind", "result"}),
		HotplugWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "hotplug_writes_total",
			Help:      "Writes of the kernel's CPU and memory-block hotplug files (onlining, offlining), by kind, op and result (ok, error, timeout, interrupted, refused, gone).",
		}, []string{"kind", "op", "result"}),
		HotplugWriteDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "hotplug_write_duration_seconds",
			Help:      "Time one write of a CPU or memory-block hotplug file took, by kind and op, including the writes cut at their timeout.",
			Buckets:   HotplugBuckets,
		}, []string{"kind", "op"}),
		CapacityCondition: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "capacity_condition",
			Help:      "1 for the reason the Node's CapacityConfigured condition has now (Accepted, InProgress, Infeasible, EmergencyReduced), 0 for the others.",
		}, []string{"reason"}),
		KubeletStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "kubelet_stale",
			Help:      "1 while the running kubelet's view of the machine (its capacity) differs from the machine, 0 otherwise.",
		}),
		KubeletRestartNeeded: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "kubelet_restart_needed",
			Help:      "1 while the kubelet is stale and node-resized will not restart it (--kubelet-restart=never, unit not active, checkpoints that cannot be made safe): restart it yourself.",
		}),
		KubeletRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "kubelet_restarts_total",
			Help:      "Kubelet restarts node-resized did so that the kubelet adopts a capacity, by result (systemd's job result, or error).",
		}, []string{"result"}),
		KubepodsLimitsFailing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "kubepods_limits_failing",
			Help:      "1 while the last write of the kubepods limits for the applied target failed (a clamp that did not land; it is retried), 0 otherwise.",
		}),
		KubeletRecoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "kubelet_recoveries_total",
			Help:      "Kubelet units node-resized found left stopped by a restart of its own that did not finish (the daemon killed after the stop) and started again.",
		}),
		KubeletCheckpointRollbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "kubelet_checkpoint_rollbacks_total",
			Help:      "Kubelet restarts after which the kubelet refused a CPU or memory manager checkpoint node-resized had rewritten, which was then restored from its backup (a KubeletCheckpointRolledBack event says which).",
		}),
		Tainted: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "node_tainted",
			Help:      "1 while node-resized keeps the NoSchedule taint node-resized.io/capacity-changing on its Node (--taint-while-stale: from a loss until the kubelet has adopted it), 0 otherwise.",
		}),
		ReleaseAllowed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "release_allowed",
			Help:      "1 when the node allows planned releases (node-resized --release), 0 otherwise.",
		}),
		ReleaseInProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "release_in_progress",
			Help:      "1 while a planned release takes CPUs and memory offline, or its give back brings them back, 0 otherwise.",
		}),
		ReleasedCPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "released_cpus",
			Help:      "CPUs node-resized holds offline after a planned release (present and offline: the hypervisor may unplug them).",
		}),
		ReleasedMemoryBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "released_memory_bytes",
			Help:      "Memory of the blocks node-resized holds offline after a planned release that are still present (blocks times the block size).",
		}),
		MemoryDeviceSafeToUnplug: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "memory_device_safe_to_unplug",
			Help:      "For each memory device with blocks offline after a planned release (an ACPI memory device such as PNP0C80:00, or virtio-mem memory): 1 when every block of it is offline and the hypervisor may unplug it, 0 while some are online.",
		}, []string{"device"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "releases_total",
			Help:      "Planned releases that ended, by result (done: the target reached; short: what did not go is in the condition; stopped: the request changed while it ran).",
		}, []string{"result"}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.UeventsTotal, m.UeventsDropped, m.DetectionLatency, m.Rebuilds,
		m.RebuildDuration, m.IncrementalMismatch, m.Capacity, m.NUMACapacity, m.ModelChanges,
		m.ResizeRequests, m.ResizeErrors, m.PatchLatency, m.ClampLatency, m.AutoOnline,
		m.HotplugWrites, m.HotplugWriteDuration,
		m.CapacityCondition, m.KubeletStale, m.KubeletRestartNeeded, m.KubeletRestarts, m.Tainted,
		m.KubepodsLimitsFailing,
		m.KubeletRecoveries,
		m.KubeletCheckpointRollbacks,
		m.TargetCapacity, m.Allocatable,
		m.ReleaseAllowed, m.ReleaseInProgress, m.ReleasedCPUs, m.ReleasedMemoryBytes,
		m.MemoryDeviceSafeToUnplug, m.Releases,
	)
	// The counters of every known label value exist at 0 from the start,
	// so that increase() in an alert sees the first event: a series that
	// appears at its first Inc() has no earlier sample to rise from.
	for _, r := range UeventDropReasons {
		m.UeventsDropped.WithLabelValues(r)
	}
	for _, s := range ErrorSubsystems {
		m.ResizeErrors.WithLabelValues(s)
	}
	for _, r := range KubeletRestartResults {
		m.KubeletRestarts.WithLabelValues(r)
	}
	for _, r := range ReleaseResults {
		m.Releases.WithLabelValues(r)
	}
	return m
}

// RegisterBuildInfo registers node_resized_build_info, client_golang's
// version collector (labels version, revision, branch, goversion, goos,
// goarch, tags; value 1), with version as the daemon's version (set at
// build time, see the Makefile). Call it once.
func (m *Metrics) RegisterBuildInfo(version string) {
	m.Registry.MustRegister(versioncollector.NewCollector(namespace,
		versioncollector.WithExtraConstLabels(prometheus.Labels{"version": version})))
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
