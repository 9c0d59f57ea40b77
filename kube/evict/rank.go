package evict

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/node-resized/node-resized/resources"
	"github.com/node-resized/node-resized/topology"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Pod annotations and priorities that mark a pod the kubelet never evicts
// (pkg/kubelet/types: IsStaticPod, IsMirrorPod, IsCriticalPod).
const (
	annotationConfigSource = "kubernetes.io/config.source"
	annotationConfigMirror = corev1.MirrorPodAnnotationKey // "kubernetes.io/config.mirror"
	configSourceAPI        = "api"
	// systemCriticalPriority is scheduling.SystemCriticalPriority: the
	// lowest priority of the system-node-critical and
	// system-cluster-critical classes.
	systemCriticalPriority = 2000000000
)

// PodUsage is what the evictor knows of one pod when it ranks the node's
// pods. It is a plain value, safe for concurrent reads.
type PodUsage struct {
	Namespace string
	Name      string
	UID       string
	// QOS is the pod's QoS class spelled as the cgroup hierarchy spells
	// it: "guaranteed", "burstable" or "besteffort".
	QOS string
	// Priority is spec.priority, 0 when unset (as the kubelet reads it).
	Priority int32
	// MemoryRequest is the pod's memory request in bytes, read as the
	// kubelet's eviction manager reads it: the pod-level request when the
	// pod sets pod-level resources, otherwise its containers and sidecars
	// raised to what its init containers need, plus the pod overhead.
	MemoryRequest int64
	// WorkingSet is the pod's memory working set in bytes; it means
	// something only when WorkingSetKnown is true.
	WorkingSet      int64
	WorkingSetKnown bool
	// Protected, when not empty, says why the pod is never evicted:
	// "static pod", "mirror pod" or "system-critical pod".
	Protected string
	// Why is set by Rank on the victims it returns: why the pod must go.
	Why string
}

// Footprint is the memory the pod holds against allocatable: the larger of
// its request and its working set (its request alone when the working set
// is unknown).
func (u PodUsage) Footprint() int64 {
	if u.WorkingSetKnown && u.WorkingSet > u.MemoryRequest {
		return u.WorkingSet
	}
	return u.MemoryRequest
}

// overRequest reports whether the pod's working set is known and exceeds
// its memory request.
func (u PodUsage) overRequest() bool {
	return u.WorkingSetKnown && u.WorkingSet > u.MemoryRequest
}

func (u PodUsage) String() string { return u.Namespace + "/" + u.Name }

// Rank chooses the pods to evict so that the remaining pods fit
// allocatable, and reports whether they then fit. It is a pure function:
// safe for concurrent use; it does not modify pods or exclusive.
//
// CPU is compressible, so a pod is evicted for CPU only when it cannot run
// as admitted: a Guaranteed pod whose exclusive CPUs (exclusive, by pod UID,
// from the CPU manager's checkpoint) include one that is not in onlineCPUs.
// release says that onlineCPUs are those a planned release leaves online
// (the others are about to go offline, which the pod's Why says).
// Those pods go first, whatever the memory. Burstable and BestEffort pods
// and Guaranteed pods without exclusive CPUs are never evicted for CPU. An
// empty onlineCPUs means the online set is unknown: nobody goes for CPU.
//
// Memory: the pods fit when the sum of their footprints, max(request,
// working set) each, is at most allocatable["memory"] (no memory entry:
// memory is not constrained). While they do not fit, pods are taken in the
// kubelet's memory-pressure order (rankMemoryPressure in
// pkg/kubelet/eviction/helpers.go): pods whose working set exceeds their
// request first, then lower spec.priority, then the largest working set
// above request. As in the kubelet, a pod whose working set could not be
// read ranks before every pod with a known one. Ties, which the kubelet
// leaves in list order, go to the larger request first (evicting it frees
// the most), then by namespace and name, so that the order is total and a
// table test can state it. Ranking stops as soon as the rest fits; when
// only protected pods (static, mirror, system-critical, which are never
// chosen) are left and they still do not fit, fits is false.
//
// Why the footprint rule matches the kubelet's intent: the kubelet holds
// pods to allocatable in two ways. Admission refuses a pod whose request
// does not fit beside the others' (so requests must fit), and the eviction
// manager evicts when usage eats into the reserve behind allocatable
// (allocatable is capacity minus reservations minus the hard eviction
// threshold, so working sets must fit). Its ranking treats memory up to a
// pod's request as that pod's due and reclaims what lies above it first.
// Counting each pod at max(request, working set) is both at once: a pod
// below its request is charged its request (it may grow to it at any time
// and the scheduler promised it that much), a pod above its request is
// charged what it uses. The sum is at least the sum of the requests and at
// least the sum of the working sets, so when it fits neither the kubelet's
// admission nor its memory-pressure eviction would find the node over.
func Rank(pods []PodUsage, allocatable resources.List, onlineCPUs []int, exclusive map[string][]int, release bool) (victims []PodUsage, fits bool) {
	online := make(map[int]bool, len(onlineCPUs))
	for _, c := range onlineCPUs {
		online[c] = true
	}
	var cpuVictims, candidates []PodUsage
	var total int64
	for _, p := range pods {
		if p.Protected == "" && p.QOS == qosGuaranteedName && len(online) > 0 {
			if gone := offlineCPUs(exclusive[p.UID], online); len(gone) > 0 {
				p.Why = fmt.Sprintf("its exclusive CPUs %s are no longer online", gone)
				if release {
					p.Why = fmt.Sprintf("its exclusive CPUs %s are among those the planned release takes offline", gone)
				}
				cpuVictims = append(cpuVictims, p)
				continue
			}
		}
		total += p.Footprint()
		if p.Protected == "" {
			candidates = append(candidates, p)
		}
	}
	slices.SortFunc(cpuVictims, compareForEviction)
	victims = cpuVictims

	limit, limited := allocatable[resources.Memory]
	if !limited {
		return victims, true
	}
	slices.SortFunc(candidates, compareForEviction)
	for _, p := range candidates {
		if total <= limit {
			break
		}
		p.Why = fmt.Sprintf("the pods' memory (the sum of max(request, working set)) is %s, over allocatable memory %s; %s",
			resources.Format(resources.Memory, total), resources.Format(resources.Memory, limit), describeMemory(p))
		victims = append(victims, p)
		total -= p.Footprint()
	}
	return victims, total <= limit
}

// compareForEviction orders pods for eviction under memory pressure: a
// negative result means a goes before b. The first three keys are the
// kubelet's (exceedMemoryRequests, priority, memory); the last two only
// make the order total.
func compareForEviction(a, b PodUsage) int {
	// exceedMemoryRequests: unknown stats first, then over-request first.
	if a.WorkingSetKnown != b.WorkingSetKnown {
		return boolFirst(!a.WorkingSetKnown, !b.WorkingSetKnown)
	}
	if c := boolFirst(a.overRequest(), b.overRequest()); c != 0 {
		return c
	}
	// priority: lower first.
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	// memory: the larger working set above request first.
	if a.WorkingSetKnown {
		if c := cmp.Compare(b.WorkingSet-b.MemoryRequest, a.WorkingSet-a.MemoryRequest); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(b.MemoryRequest, a.MemoryRequest); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

// boolFirst orders true before false.
func boolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

func describeMemory(p PodUsage) string {
	req := resources.Format(resources.Memory, p.MemoryRequest)
	if !p.WorkingSetKnown {
		return fmt.Sprintf("this pod: working set unknown, request %s, priority %d", req, p.Priority)
	}
	return fmt.Sprintf("this pod: working set %s, request %s, priority %d",
		resources.Format(resources.Memory, p.WorkingSet), req, p.Priority)
}

// offlineCPUs returns the CPUs of cpus that are not online, as a set
// (printed in the kernel's list format, "0-3,8", as everywhere else).
func offlineCPUs(cpus []int, online map[int]bool) topology.CPUSet {
	var gone topology.CPUSet
	for _, c := range cpus {
		if !online[c] {
			gone = append(gone, c)
		}
	}
	slices.Sort(gone)
	return slices.Compact(gone)
}

// QoS classes as the cgroup hierarchy spells them.
const (
	qosGuaranteedName = "guaranteed"
	qosBurstableName  = "burstable"
	qosBestEffortName = "besteffort"
)

// podUsageOf describes a pod for Rank; the working set is filled in by the
// caller.
func podUsageOf(pod *corev1.Pod) PodUsage {
	u := PodUsage{
		Namespace:     pod.Namespace,
		Name:          pod.Name,
		UID:           string(pod.UID),
		QOS:           podQOSName(pod),
		MemoryRequest: podMemoryRequest(pod),
		Protected:     podProtection(pod),
	}
	if pod.Spec.Priority != nil {
		u.Priority = *pod.Spec.Priority
	}
	return u
}

// podProtection says why the pod may never be evicted, or "" when it may.
// It follows the kubelet's IsCriticalPod (static, mirror, or a priority of
// at least system-critical) and also honours the two system priority class
// names, which matters where spec.priority is not filled in.
func podProtection(pod *corev1.Pod) string {
	if src, ok := pod.Annotations[annotationConfigSource]; ok && src != configSourceAPI {
		return "static pod"
	}
	if _, ok := pod.Annotations[annotationConfigMirror]; ok {
		return "mirror pod"
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority {
		return "system-critical pod"
	}
	switch pod.Spec.PriorityClassName {
	case "system-node-critical", "system-cluster-critical":
		return "system-critical pod"
	}
	return ""
}

// podMemoryRequest returns the pod's memory request in bytes as the
// kubelet's eviction ranking reads it (v1resource.GetResourceRequestQuantity
// over component-helpers' PodRequests): the pod-level request when the pod
// sets pod-level resources, otherwise the sum of its containers and
// restartable (sidecar) init containers, raised to what any init container
// needs beside the sidecars started before it; plus the pod overhead when
// the total is not zero. The spec is read, not the status (the eviction
// manager does not use the resize status).
func podMemoryRequest(pod *corev1.Pod) int64 {
	var total int64
	if podLevelResourcesSet(pod) {
		total = quantityValue(pod.Spec.Resources.Requests, corev1.ResourceMemory)
	} else {
		for i := range pod.Spec.Containers {
			total += quantityValue(pod.Spec.Containers[i].Resources.Requests, corev1.ResourceMemory)
		}
		var sidecars, initMax int64
		for i := range pod.Spec.InitContainers {
			c := &pod.Spec.InitContainers[i]
			req := quantityValue(c.Resources.Requests, corev1.ResourceMemory)
			var need int64
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				total += req
				sidecars += req
				need = sidecars
			} else {
				need = req + sidecars
			}
			initMax = max(initMax, need)
		}
		total = max(total, initMax)
	}
	if total != 0 {
		total += quantityValue(pod.Spec.Overhead, corev1.ResourceMemory)
	}
	return total
}

// podLevelResourcesSet is component-helpers' IsPodLevelResourcesSet:
// pod-level requests or limits name cpu, memory or a huge page size.
func podLevelResourcesSet(pod *corev1.Pod) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	for _, l := range []corev1.ResourceList{pod.Spec.Resources.Requests, pod.Spec.Resources.Limits} {
		for name := range l {
			if resources.PodLevel(string(name)) {
				return true
			}
		}
	}
	return false
}

func quantityValue(l corev1.ResourceList, name corev1.ResourceName) int64 {
	if q, ok := l[name]; ok {
		return q.Value()
	}
	return 0
}

// podQOSName returns the pod's QoS class in the cgroup spelling. The API
// server fills status.qosClass in; for a pod without it the class is
// computed from the containers' requests and limits as the kubelet's
// GetPodQOS does for container-level resources.
func podQOSName(pod *corev1.Pod) string {
	switch pod.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return qosGuaranteedName
	case corev1.PodQOSBurstable:
		return qosBurstableName
	case corev1.PodQOSBestEffort:
		return qosBestEffortName
	}
	requests, limits := map[corev1.ResourceName]*resource.Quantity{}, map[corev1.ResourceName]*resource.Quantity{}
	guaranteed := true
	add := func(m map[corev1.ResourceName]*resource.Quantity, name corev1.ResourceName, q resource.Quantity) {
		if m[name] == nil {
			m[name] = resource.NewQuantity(0, q.Format)
		}
		m[name].Add(q)
	}
	containers := append(append([]corev1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, c := range containers {
		for n := range resources.Names(resources.QoSCompute) {
			name := corev1.ResourceName(n)
			if q, ok := c.Resources.Requests[name]; ok && !q.IsZero() {
				add(requests, name, q)
			}
			if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
				add(limits, name, q)
			} else {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return qosBestEffortName
	}
	if guaranteed {
		for name, l := range limits {
			if r, ok := requests[name]; ok && r.Cmp(*l) != 0 {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(limits) == 2 {
		return qosGuaranteedName
	}
	return qosBurstableName
}
