package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/apimachinery/lease"
	nodeutil "k8s.io/component-helpers/node/util"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/utils/clock"
)

// StandInKubeletAnnotation is set to "true" on every Node a
// [StandInKubelet] registers, so nobody mistakes it for a kubelet's Node.
const StandInKubeletAnnotation = "node-resized.io/stand-in-kubelet"

// The kubelet's defaults (KubeletConfiguration v1beta1).
const (
	DefaultNodeStatusUpdateFrequency = 10 * time.Second
	DefaultNodeStatusReportFrequency = 5 * time.Minute
	DefaultNodeLeaseDuration         = 40 * time.Second
	DefaultMaxPods                   = 110
)

// The values a real kubelet reports that a stand-in does not have.
const (
	standInKubeletVersion = "v1.37.2-stand-in"
	standInRuntime        = "none://stand-in-kubelet"
	standInOSImage        = "node-resized stand-in kubelet (not a kubelet)"
	// controllerManagedAttachAnnotation is set by every kubelet by default.
	controllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"
	// nodeStatusUpdateRetry is the kubelet's retry count per status sync.
	nodeStatusUpdateRetry = 5
)

// MachineView is the machine as a kubelet read it when it started: the
// kubelet never re-reads it until it restarts.
type MachineView struct {
	// Capacity as cAdvisor and the container manager report it: cpu,
	// memory, ephemeral-storage and hugepages-<size>. pods, when absent, is
	// KubeletOptions.MaxPods. The kubelet reports NotReady ("missing node
	// capacity for resources: ...") without cpu, memory, pods and
	// ephemeral-storage.
	Capacity corev1.ResourceList
	// Reserved is the container manager's node allocatable reservation:
	// system-reserved + kube-reserved + hard eviction thresholds, per
	// resource. allocatable = capacity - Reserved (never negative), and
	// allocatable memory also loses every hugepages-* capacity.
	Reserved corev1.ResourceList
}

// Clone returns a deep copy of m.
func (m MachineView) Clone() MachineView {
	return MachineView{Capacity: m.Capacity.DeepCopy(), Reserved: m.Reserved.DeepCopy()}
}

// KubeletOptions configures [StartStandInKubelet].
type KubeletOptions struct {
	// NodeName is the Node to register; required.
	NodeName string
	// Kubeconfig is the node identity's kubeconfig
	// ([Cluster.NodeKubeconfig]); required.
	Kubeconfig string
	// Machine is the boot-time view the stand-in reports until Restart.
	Machine MachineView
	// Hostname for the kubernetes.io/hostname label and the Hostname
	// address; "" means NodeName.
	Hostname string
	// InternalIP is the node's InternalIP address; "" means 127.0.0.1.
	InternalIP string
	// Labels are added to the Node at registration (--node-labels).
	Labels map[string]string
	// MaxPods is the pods capacity when Machine.Capacity has none; 0 means
	// 110.
	MaxPods int
	// NodeStatusUpdateFrequency is how often the status is recomputed and,
	// when it differs from the Node's (for example capacity someone else
	// patched), patched; 0 means 10 s.
	NodeStatusUpdateFrequency time.Duration
	// NodeStatusReportFrequency is how often the status is patched even
	// when nothing changed (refreshing the conditions' heartbeats); 0
	// means 5 min.
	NodeStatusReportFrequency time.Duration
	// NodeLeaseDuration is the Lease's duration; it is renewed every
	// quarter of it. 0 means 40 s.
	NodeLeaseDuration time.Duration
	// PodSyncPeriod is how often the stand-in lists the pods bound to its
	// Node to report them Running (and finish their deletion); 0 means
	// 500 ms, a negative value turns the pod loop off (a fleet of
	// stand-ins that run no pods).
	PodSyncPeriod time.Duration
	// NotReadyAfterStart, when set, makes the Node NotReady for this long
	// after each start or Restart, as a real kubelet is until its first
	// container runtime status check completes.
	NotReadyAfterStart time.Duration
	// Logf receives the stand-in's log lines; nil means the standard
	// logger.
	Logf func(format string, args ...any)
}

// StandInKubelet is NOT the kubelet. It plays the kubelet's part towards the
// API server for tests that have no kubelet and no container runtime:
//
//   - it registers the Node with the node identity's credentials as
//     registerWithAPIServer does (create; if it exists, reconcile labels and
//     hugepages), with the kubelet's labels, addresses, node info,
//     MemoryPressure/DiskPressure/PIDPressure/Ready conditions and
//     capacity/allocatable from its boot-time [MachineView];
//   - every NodeStatusUpdateFrequency it recomputes the status from that
//     view onto the Node as last read, as tryUpdateNodeStatus does, and
//     sends the kubelet's own strategic merge patch on status
//     (k8s.io/component-helpers/node/util.PatchNodeStatus) when the status
//     changed or NodeStatusReportFrequency has passed. So capacity and
//     allocatable written by anyone else revert within one period, while
//     conditions it does not own (CapacityConfigured) and extended
//     resources are left exactly as they are;
//   - it renews its Lease in kube-node-lease with the kubelet's lease
//     controller (k8s.io/component-helpers/apimachinery/lease).
//
// It runs no containers. Pods bound to its Node are only reported Running,
// and a pod being deleted (an eviction) is deleted for good once it could
// have stopped, as the kubelet's final delete with grace 0 does. The Node
// carries the
// annotation [StandInKubeletAnnotation]: "true", its kubelet version ends in
// "-stand-in" and every log line says "stand-in kubelet".
//
// Differences from the kubelet, none of which touch status.capacity or
// conditions: it reads the Node with a GET instead of from an informer
// cache, adds no random delay to the report period, records no events,
// reports no images, volumes or daemon endpoints, and sets no taints.
//
// Its methods are safe for concurrent use.
type StandInKubelet struct {
	opts   KubeletOptions // defaults applied; Machine is in machine
	client kubernetes.Interface
	bootID string
	// base bounds every incarnation's goroutines (the context given to
	// StartStandInKubelet).
	base context.Context

	// life serialises Restart and Stop; it guards run and stopped.
	life    sync.Mutex
	run     *kubeletRun
	stopped bool

	mu      sync.Mutex // guards machine
	machine MachineView
}

// kubeletRun is one incarnation ("process") of the stand-in.
type kubeletRun struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time

	// syncMu serialises this incarnation's status syncs (the periodic one
	// and the one closing the NotReadyAfterStart window), as the kubelet's
	// syncNodeStatusMux does; it guards lastReport.
	syncMu     sync.Mutex
	lastReport time.Time // last successful status patch
}

// StartStandInKubelet registers the Node (retrying, as the kubelet does,
// until it succeeds or ctx ends) and starts the status and lease loops,
// which run until Stop or until ctx ends.
func StartStandInKubelet(ctx context.Context, opts KubeletOptions) (*StandInKubelet, error) {
	if opts.NodeName == "" || opts.Kubeconfig == "" {
		return nil, errors.New("stand-in kubelet: NodeName and Kubeconfig are required")
	}
	if opts.Hostname == "" {
		opts.Hostname = opts.NodeName
	}
	if opts.InternalIP == "" {
		opts.InternalIP = "127.0.0.1"
	}
	if opts.MaxPods <= 0 {
		opts.MaxPods = DefaultMaxPods
	}
	if opts.NodeStatusUpdateFrequency <= 0 {
		opts.NodeStatusUpdateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if opts.NodeStatusReportFrequency <= 0 {
		opts.NodeStatusReportFrequency = DefaultNodeStatusReportFrequency
	}
	if opts.NodeLeaseDuration <= 0 {
		opts.NodeLeaseDuration = DefaultNodeLeaseDuration
	}
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("stand-in kubelet %s: loading kubeconfig %s: %w", opts.NodeName, opts.Kubeconfig, err)
	}
	// As the kubelet's heartbeat client: no request outlives a period.
	cfg.Timeout = max(opts.NodeStatusUpdateFrequency, 5*time.Second)
	cfg.UserAgent = "node-resized-stand-in-kubelet"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("stand-in kubelet %s: client: %w", opts.NodeName, err)
	}
	k := &StandInKubelet{
		opts:    opts,
		client:  client,
		bootID:  randomID(),
		base:    ctx,
		machine: opts.Machine.Clone(),
	}
	k.opts.Machine = MachineView{}
	k.logf("starting with boot-time machine view %s (update every %v)", k.machine, opts.NodeStatusUpdateFrequency)
	if err := k.startLocked(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// NodeName returns the name of the Node it plays the kubelet for.
func (k *StandInKubelet) NodeName() string { return k.opts.NodeName }

// Machine returns the machine view it currently reports.
func (k *StandInKubelet) Machine() MachineView {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.machine.Clone()
}

// Restart simulates the kubelet restarting on a machine that now looks like
// machine: the running loops stop, the Node is registered again (it exists,
// so labels and hugepages are reconciled), and the status is patched at
// once with capacity and allocatable from the new view. ctx bounds the
// registration; the new loops run until Stop or the context given to
// StartStandInKubelet ends. If registration fails the stand-in stays down,
// as a kubelet that cannot start, until the next Restart.
func (k *StandInKubelet) Restart(ctx context.Context, machine MachineView) error {
	k.life.Lock()
	defer k.life.Unlock()
	if k.stopped {
		return fmt.Errorf("stand-in kubelet %s: Restart after Stop", k.opts.NodeName)
	}
	k.stopRunLocked()
	k.mu.Lock()
	k.machine = machine.Clone()
	k.mu.Unlock()
	k.logf("restarting with re-read machine view %s", machine)
	return k.startLocked(ctx)
}

// Stop ends the loops, as a stopped kubelet: the Node and its Lease stay
// (and the Lease expires). It is safe to call more than once.
func (k *StandInKubelet) Stop() {
	k.life.Lock()
	defer k.life.Unlock()
	if k.stopped {
		return
	}
	k.stopped = true
	k.stopRunLocked()
	k.logf("stopped")
}

func (k *StandInKubelet) stopRunLocked() {
	if k.run != nil {
		k.run.cancel()
		k.run.wg.Wait()
		k.run = nil
	}
}

// startLocked registers the Node and starts a new incarnation's loops.
// k.life is held by the caller, or k is not yet shared.
func (k *StandInKubelet) startLocked(ctx context.Context) error {
	started := time.Now()
	if err := k.register(ctx, started); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(k.base)
	r := &kubeletRun{cancel: cancel, started: started}
	k.run = r

	leaseDurationSeconds := int32(k.opts.NodeLeaseDuration / time.Second)
	lc := lease.NewController(clock.RealClock{}, k.client, k.opts.NodeName, leaseDurationSeconds, nil,
		k.opts.NodeLeaseDuration/4, k.opts.NodeName, corev1.NamespaceNodeLease, k.setNodeOwner(runCtx))
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		lc.Run(runCtx)
	}()
	if p := k.opts.PodSyncPeriod; p >= 0 {
		if p == 0 {
			p = 500 * time.Millisecond
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			k.podLoop(runCtx, p)
		}()
	}
	go func() {
		defer r.wg.Done()
		k.statusLoop(runCtx, r)
	}()
	return nil
}

// statusLoop is the kubelet's syncNodeStatus loop (wait.JitterUntil every
// NodeStatusUpdateFrequency), plus one extra sync when a NotReadyAfterStart
// window closes, as the kubelet's fast status update does.
func (k *StandInKubelet) statusLoop(ctx context.Context, r *kubeletRun) {
	if w := k.opts.NotReadyAfterStart; w > 0 {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if sleepCtx(ctx, time.Until(r.started.Add(w))) == nil {
				k.syncNodeStatus(ctx, r)
			}
		}()
	}
	// The kubelet's own jitter (kubelet.go: wait.JitterUntil with 0.04),
	// so that a fleet of stand-ins does not write in lockstep.
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { k.syncNodeStatus(ctx, r) }, k.opts.NodeStatusUpdateFrequency, 0.04, true)
}

func (k *StandInKubelet) syncNodeStatus(ctx context.Context, r *kubeletRun) {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	for i := range nodeStatusUpdateRetry {
		if ctx.Err() != nil {
			return
		}
		err := k.tryUpdateNodeStatus(ctx, r)
		if err == nil {
			return
		}
		k.logf("error updating node status, will retry (attempt %d of %d): %v", i+1, nodeStatusUpdateRetry, err)
	}
	k.logf("unable to update node status: update node status exceeds retry count")
}

// tryUpdateNodeStatus is the kubelet's: recompute the status onto a copy of
// the Node and patch the difference when it changed or the report period
// has passed.
func (k *StandInKubelet) tryUpdateNodeStatus(ctx context.Context, r *kubeletRun) error {
	original, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("error getting node %q: %w", k.opts.NodeName, err)
	}
	node := original.DeepCopy()
	labelsFixed := false
	if node.Labels[corev1.LabelOSStable] != runtime.GOOS || node.Labels[corev1.LabelArchStable] != runtime.GOARCH {
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[corev1.LabelOSStable] = runtime.GOOS
		node.Labels[corev1.LabelArchStable] = runtime.GOARCH
		labelsFixed = true
	}
	now := time.Now()
	k.setNodeStatus(node, r.started, now)
	changed := labelsFixed || nodeStatusHasChanged(&original.Status, &node.Status)
	if !changed && now.Sub(r.lastReport) < k.opts.NodeStatusReportFrequency {
		return nil
	}
	_, patch, err := nodeutil.PatchNodeStatus(k.client.CoreV1(), types.NodeName(k.opts.NodeName), original, node)
	if err != nil {
		return err
	}
	r.lastReport = now
	if diff := describeResourceChanges(original, node); diff != "" {
		k.logf("rewrote %s from its boot-time view (patch %s)", diff, patch)
	} else if changed {
		k.logf("patched node status (patch %s)", patch)
	}
	return nil
}

// register is registerWithAPIServer: retry with the kubelet's backoff
// (100 ms doubling to 7 s) until the Node exists and is reconciled.
func (k *StandInKubelet) register(ctx context.Context, started time.Time) error {
	step := 100 * time.Millisecond
	for {
		err := k.tryRegister(ctx, started)
		if err == nil {
			return nil
		}
		k.logf("unable to register node, will retry in %v: %v", step, err)
		if sleepCtx(ctx, step) != nil {
			return fmt.Errorf("stand-in kubelet %s: registering node: %w (last error: %v)", k.opts.NodeName, ctx.Err(), err)
		}
		step = min(2*step, 7*time.Second)
	}
}

// tryRegister is tryRegisterWithAPIServer.
func (k *StandInKubelet) tryRegister(ctx context.Context, started time.Time) error {
	initial := k.initialNode(started)
	_, err := k.client.CoreV1().Nodes().Create(ctx, initial, metav1.CreateOptions{})
	if err == nil {
		k.logf("registered node (it says it is a stand-in in annotation %s)", StandInKubeletAnnotation)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return err
	}
	existing, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting existing node: %w", err)
	}
	original := existing.DeepCopy()
	k.logf("node was previously registered")
	update := reconcileAnnotations(initial, existing)
	update = updateDefaultLabels(initial, existing) || update
	update = reconcileHugePageResource(initial, existing) || update
	if update {
		if _, _, err := nodeutil.PatchNodeStatus(k.client.CoreV1(), types.NodeName(k.opts.NodeName), original, existing); err != nil {
			return fmt.Errorf("reconciling existing node: %w", err)
		}
	}
	return nil
}

// initialNode is the kubelet's initialNode: metadata plus a full status.
func (k *StandInKubelet) initialNode(started time.Time) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.opts.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:      k.opts.Hostname,
				corev1.LabelOSStable:      runtime.GOOS,
				corev1.LabelArchStable:    runtime.GOARCH,
				"beta.kubernetes.io/os":   runtime.GOOS,
				"beta.kubernetes.io/arch": runtime.GOARCH,
			},
			Annotations: map[string]string{
				StandInKubeletAnnotation:          "true",
				controllerManagedAttachAnnotation: "true",
			},
		},
	}
	maps.Copy(node.Labels, k.opts.Labels)
	k.setNodeStatus(node, started, time.Now())
	return node
}

// reconcileAnnotations makes sure an existing Node says it is a stand-in's.
func reconcileAnnotations(initial, existing *corev1.Node) bool {
	changed := false
	for _, a := range []string{StandInKubeletAnnotation, controllerManagedAttachAnnotation} {
		if existing.Annotations[a] != initial.Annotations[a] {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[a] = initial.Annotations[a]
			changed = true
		}
	}
	return changed
}

// updateDefaultLabels is the kubelet's: the default labels take the
// initial Node's values.
func updateDefaultLabels(initial, existing *corev1.Node) bool {
	changed := false
	for _, l := range []string{corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch"} {
		v, ok := initial.Labels[l]
		if !ok {
			continue
		}
		if existing.Labels[l] != v {
			if existing.Labels == nil {
				existing.Labels = map[string]string{}
			}
			existing.Labels[l] = v
			changed = true
		}
	}
	return changed
}

// reconcileHugePageResource is the kubelet's: hugepage sizes take the
// initial Node's capacity and allocatable, and sizes no longer there are
// removed.
func reconcileHugePageResource(initial, existing *corev1.Node) bool {
	changed := false
	for name, q := range initial.Status.Capacity {
		if !v1helper.IsHugePageResourceName(name) {
			continue
		}
		if cur, ok := existing.Status.Capacity[name]; !ok || cur.Cmp(q) != 0 {
			if existing.Status.Capacity == nil {
				existing.Status.Capacity = corev1.ResourceList{}
			}
			existing.Status.Capacity[name] = q.DeepCopy()
			changed = true
		}
		a := initial.Status.Allocatable[name]
		if cur, ok := existing.Status.Allocatable[name]; !ok || cur.Cmp(a) != 0 {
			if existing.Status.Allocatable == nil {
				existing.Status.Allocatable = corev1.ResourceList{}
			}
			existing.Status.Allocatable[name] = a.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if !v1helper.IsHugePageResourceName(name) {
			continue
		}
		if _, ok := initial.Status.Capacity[name]; !ok {
			delete(existing.Status.Capacity, name)
			delete(existing.Status.Allocatable, name)
			changed = true
		}
	}
	return changed
}

// setNodeStatus runs the kubelet's status setters that matter here
// (NodeAddress, MachineInfo, VersionInfo, GoRuntime, the three pressure
// conditions and ReadyCondition, in that order) on node.
func (k *StandInKubelet) setNodeStatus(node *corev1.Node, started, now time.Time) {
	machine := k.Machine()
	// NodeAddress, with --node-ip given.
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: k.opts.InternalIP},
		{Type: corev1.NodeHostName, Address: k.opts.Hostname},
	}
	k.setMachineInfo(node, machine)
	// VersionInfo and GoRuntime.
	node.Status.NodeInfo.KernelVersion = kernelVersion()
	node.Status.NodeInfo.OSImage = standInOSImage
	node.Status.NodeInfo.ContainerRuntimeVersion = standInRuntime
	node.Status.NodeInfo.KubeletVersion = standInKubeletVersion
	node.Status.NodeInfo.OperatingSystem = runtime.GOOS
	node.Status.NodeInfo.Architecture = runtime.GOARCH

	setPressureCondition(node, corev1.NodeMemoryPressure, now, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	setPressureCondition(node, corev1.NodeDiskPressure, now, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	setPressureCondition(node, corev1.NodePIDPressure, now, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
	var notReady []string
	if w := k.opts.NotReadyAfterStart; w > 0 && now.Before(started.Add(w)) {
		notReady = append(notReady, "container runtime status check may not have completed yet")
	}
	setReadyCondition(node, now, notReady)
}

// setMachineInfo is the MachineInfo setter, with the machine view in place
// of cAdvisor and the container manager.
func (k *StandInKubelet) setMachineInfo(node *corev1.Node, machine MachineView) {
	// Not a blind overwrite: resources others advertise stay.
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	for name, q := range machine.Capacity {
		node.Status.Capacity[name] = q.DeepCopy()
	}
	if _, ok := machine.Capacity[corev1.ResourcePods]; !ok {
		node.Status.Capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(k.opts.MaxPods), resource.DecimalSI)
	}
	node.Status.NodeInfo.MachineID = "stand-in-" + k.opts.NodeName
	node.Status.NodeInfo.SystemUUID = "stand-in-" + k.opts.NodeName
	node.Status.NodeInfo.BootID = k.bootID

	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	for name := range node.Status.Allocatable {
		if _, ok := node.Status.Capacity[name]; !ok && v1helper.IsExtendedResourceName(name) {
			delete(node.Status.Allocatable, name)
		}
	}
	for name, q := range node.Status.Capacity {
		v := q.DeepCopy()
		if r, ok := machine.Reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		node.Status.Allocatable[name] = v
	}
	for name, q := range node.Status.Capacity {
		if v1helper.IsHugePageResourceName(name) {
			mem := node.Status.Allocatable[corev1.ResourceMemory]
			mem.Sub(q)
			if mem.Sign() < 0 {
				mem.Set(0)
			}
			node.Status.Allocatable[corev1.ResourceMemory] = mem
		}
	}
}

// setPressureCondition is MemoryPressureCondition (and its disk and PID
// siblings) with no pressure.
func setPressureCondition(node *corev1.Node, t corev1.NodeConditionType, now time.Time, reason, message string) {
	var cond *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			cond = &node.Status.Conditions[i]
		}
	}
	isNew := cond == nil
	if isNew {
		cond = &corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown}
	}
	ts := metav1.NewTime(now)
	cond.LastHeartbeatTime = ts
	if cond.Status != corev1.ConditionFalse {
		cond.Status = corev1.ConditionFalse
		cond.Reason = reason
		cond.Message = message
		cond.LastTransitionTime = ts
	}
	if isNew {
		node.Status.Conditions = append(node.Status.Conditions, *cond)
	}
}

// setReadyCondition is ReadyCondition: Ready unless there are errors or a
// required capacity is missing.
func setReadyCondition(node *corev1.Node, now time.Time, errs []string) {
	ts := metav1.NewTime(now)
	var missing []string
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		if _, ok := node.Status.Capacity[r]; !ok {
			missing = append(missing, string(r))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, "missing node capacity for resources: "+strings.Join(missing, ", "))
	}
	ready := corev1.NodeCondition{
		Type:              corev1.NodeReady,
		Status:            corev1.ConditionTrue,
		Reason:            "KubeletReady",
		Message:           "stand-in kubelet is posting ready status (not a real kubelet)",
		LastHeartbeatTime: ts,
	}
	if len(errs) > 0 {
		ready.Status = corev1.ConditionFalse
		ready.Reason = "KubeletNotReady"
		ready.Message = strings.Join(errs, ", ")
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			if node.Status.Conditions[i].Status == ready.Status {
				ready.LastTransitionTime = node.Status.Conditions[i].LastTransitionTime
			} else {
				ready.LastTransitionTime = ts
			}
			node.Status.Conditions[i] = ready
			return
		}
	}
	ready.LastTransitionTime = ts
	node.Status.Conditions = append(node.Status.Conditions, ready)
}

// nodeStatusHasChanged is the kubelet's: any difference but heartbeats.
func nodeStatusHasChanged(original, status *corev1.NodeStatus) bool {
	if len(original.Conditions) != len(status.Conditions) {
		return true
	}
	oc := slices.Clone(original.Conditions)
	nc := slices.Clone(status.Conditions)
	sort.SliceStable(oc, func(i, j int) bool { return oc[i].Type < oc[j].Type })
	sort.SliceStable(nc, func(i, j int) bool { return nc[i].Type < nc[j].Type })
	for i := range nc {
		oc[i].LastHeartbeatTime = metav1.Time{}
		nc[i].LastHeartbeatTime = metav1.Time{}
		if !apiequality.Semantic.DeepEqual(&oc[i], &nc[i]) {
			return true
		}
	}
	o, n := original.DeepCopy(), status.DeepCopy()
	o.Conditions, n.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(o, n)
}

// setNodeOwner is the kubelet's SetNodeOwnerFunc: the Lease is owned by
// the Node.
func (k *StandInKubelet) setNodeOwner(ctx context.Context) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		if len(l.OwnerReferences) > 0 {
			return nil
		}
		node, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			k.logf("failed to get node when trying to set owner ref to the node lease: %v", err)
			return err
		}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: k.opts.NodeName, UID: node.UID}}
		return nil
	}
}

func (k *StandInKubelet) logf(format string, args ...any) {
	k.opts.Logf("stand-in kubelet (not the kubelet) for node %s: "+format, append([]any{k.opts.NodeName}, args...)...)
}

// String formats the view for log lines.
func (m MachineView) String() string {
	return "capacity{" + formatResources(m.Capacity) + "} reserved{" + formatResources(m.Reserved) + "}"
}

func formatResources(rl corev1.ResourceList) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(rl)) {
		q := rl[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, " ")
}

// describeResourceChanges lists capacity and allocatable values that differ
// between two Nodes, for log lines.
func describeResourceChanges(from, to *corev1.Node) string {
	var parts []string
	for _, f := range []struct {
		field    string
		old, new corev1.ResourceList
	}{
		{"status.capacity", from.Status.Capacity, to.Status.Capacity},
		{"status.allocatable", from.Status.Allocatable, to.Status.Allocatable},
	} {
		for _, name := range slices.Sorted(maps.Keys(f.new)) {
			n := f.new[name]
			if o, ok := f.old[name]; !ok || o.Cmp(n) != 0 {
				old := "<none>"
				if ok {
					old = o.String()
				}
				parts = append(parts, fmt.Sprintf("%s[%s] %s -> %s", f.field, name, old, n.String()))
			}
		}
	}
	return strings.Join(parts, ", ")
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
