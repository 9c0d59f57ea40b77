package evict

import (
	"slices"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/resources"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const evGi = int64(1) << 30

// usage describes a pod for Rank; ws < 0 means the working set is unknown.
func evUsage(name string, req, ws int64, prio int32) PodUsage {
	u := PodUsage{Namespace: "default", Name: name, UID: "uid-" + name, QOS: qosBurstableName,
		Priority: prio, MemoryRequest: req}
	if ws >= 0 {
		u.WorkingSet, u.WorkingSetKnown = ws, true
	}
	return u
}

func evWith(u PodUsage, f func(*PodUsage)) PodUsage {
	f(&u)
	return u
}

func evGuaranteed(u *PodUsage)     { u.QOS = qosGuaranteedName }
func evStatic(u *PodUsage)         { u.Protected = "static pod" }
func evMirror(u *PodUsage)         { u.Protected = "mirror pod" }
func evCritical(u *PodUsage)       { u.Protected = "system-critical pod" }
func evMem(v int64) resources.List { return resources.List{resources.Memory: v} }

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pods        []PodUsage
		allocatable resources.List
		online      []int
		exclusive   map[string][]int
		want        []string
		fits        bool
	}{
		{
			name:        "everything fits: nobody goes",
			pods:        []PodUsage{evUsage("a", 1*evGi, 2*evGi, 0), evUsage("b", 2*evGi, 1*evGi, 0)},
			allocatable: evMem(4 * evGi),
			fits:        true,
		},
		{
			name: "a pod over its request goes before a lower-priority pod within it",
			pods: []PodUsage{
				evUsage("within-low", 3*evGi, 1*evGi, 0),
				evUsage("over-high", 1*evGi, 2*evGi, 1000),
			},
			allocatable: evMem(4 * evGi),
			want:        []string{"over-high"},
			fits:        true,
		},
		{
			name: "then the lower priority",
			pods: []PodUsage{
				evUsage("p100", 2*evGi, 1*evGi, 100),
				evUsage("p-5", 2*evGi, 1*evGi, -5),
				evUsage("p0", 2*evGi, 1*evGi, 0),
			},
			allocatable: evMem(3 * evGi),
			want:        []string{"p-5", "p0"},
			fits:        true,
		},
		{
			name: "then the largest usage above request",
			pods: []PodUsage{
				evUsage("above1", 1*evGi, 2*evGi, 0),
				evUsage("above3", 1*evGi, 4*evGi, 0),
				evUsage("above2", 2*evGi, 4*evGi, 0),
			},
			allocatable: evMem(5 * evGi),
			want:        []string{"above3", "above2"},
			fits:        true,
		},
		{
			name: "usage above request decides among pods within their requests too",
			pods: []PodUsage{
				evUsage("far-below", 4*evGi, 1*evGi, 0), // 3Gi below its request
				evUsage("near", 2*evGi, 2*evGi-1, 0),    // 1 byte below
			},
			allocatable: evMem(5 * evGi),
			want:        []string{"near"},
			fits:        true,
		},
		{
			name: "stops as soon as the rest fits",
			pods: []PodUsage{
				evUsage("a", 1*evGi, 3*evGi, 0),
				evUsage("b", 1*evGi, 2*evGi, 0),
				evUsage("c", 1*evGi, 1*evGi, 0),
			},
			allocatable: evMem(3 * evGi),
			want:        []string{"a"},
			fits:        true,
		},
		{
			name: "the request counts when the working set is below it",
			pods: []PodUsage{
				evUsage("idle", 4*evGi, 100<<20, 0),
				evUsage("busy", 1*evGi, 1*evGi, 10),
			},
			allocatable: evMem(4 * evGi),
			want:        []string{"idle"},
			fits:        true,
		},
		{
			name: "static, mirror and system-critical pods are never chosen",
			pods: []PodUsage{
				evWith(evUsage("static", 1*evGi, 4*evGi, 0), evStatic),
				evWith(evUsage("mirror", 1*evGi, 4*evGi, 0), evMirror),
				evWith(evUsage("critical", 1*evGi, 4*evGi, 0), evCritical),
				evUsage("plain", 1*evGi, 1*evGi, 1000),
			},
			allocatable: evMem(12 * evGi),
			want:        []string{"plain"},
			fits:        true,
		},
		{
			name: "only protected pods left and still too big: everyone else goes, fits is false",
			pods: []PodUsage{
				evWith(evUsage("critical", 6*evGi, 6*evGi, 0), evCritical),
				evUsage("x", 1*evGi, 1*evGi, 0),
				evUsage("y", 1*evGi, 1*evGi, 0),
			},
			allocatable: evMem(4 * evGi),
			want:        []string{"x", "y"},
			fits:        false,
		},
		{
			name: "a Guaranteed pod whose exclusive CPU is gone is chosen although memory fits",
			pods: []PodUsage{
				evWith(evUsage("pinned", 1*evGi, 1*evGi, 1000), evGuaranteed),
				evWith(evUsage("pinned-ok", 1*evGi, 1*evGi, 0), evGuaranteed),
			},
			allocatable: evMem(64 * evGi),
			online:      []int{0, 1, 2},
			exclusive:   map[string][]int{"uid-pinned": {2, 3}, "uid-pinned-ok": {1}},
			want:        []string{"pinned"},
			fits:        true,
		},
		{
			name: "Burstable pods are not evicted for CPU",
			pods: []PodUsage{
				evUsage("burstable", 1*evGi, 1*evGi, 0),
				evWith(evUsage("besteffort", 0, 1<<20, 0), func(u *PodUsage) { u.QOS = qosBestEffortName }),
			},
			allocatable: evMem(64 * evGi),
			online:      []int{0},
			exclusive:   map[string][]int{"uid-burstable": {3}, "uid-besteffort": {3}},
			fits:        true,
		},
		{
			name: "a protected Guaranteed pod keeps its offline CPUs",
			pods: []PodUsage{
				evWith(evWith(evUsage("critical", 1*evGi, 1*evGi, 0), evGuaranteed), evCritical),
			},
			allocatable: evMem(64 * evGi),
			online:      []int{0},
			exclusive:   map[string][]int{"uid-critical": {1}},
			fits:        true,
		},
		{
			name: "without the online set nobody goes for CPU",
			pods: []PodUsage{
				evWith(evUsage("pinned", 1*evGi, 1*evGi, 0), evGuaranteed),
			},
			allocatable: evMem(64 * evGi),
			exclusive:   map[string][]int{"uid-pinned": {7}},
			fits:        true,
		},
		{
			name: "a CPU victim's memory is freed before memory victims are chosen",
			pods: []PodUsage{
				evWith(evUsage("pinned", 4*evGi, 4*evGi, 1000), evGuaranteed),
				evUsage("over", 1*evGi, 2*evGi, 0),
			},
			allocatable: evMem(3 * evGi),
			online:      []int{0},
			exclusive:   map[string][]int{"uid-pinned": {5}},
			want:        []string{"pinned"},
			fits:        true,
		},
		{
			name: "CPU victims come first, then memory victims",
			pods: []PodUsage{
				evUsage("over", 1*evGi, 6*evGi, 0),
				evWith(evUsage("pinned", 1*evGi, 1*evGi, 1000), evGuaranteed),
			},
			allocatable: evMem(2 * evGi),
			online:      []int{0},
			exclusive:   map[string][]int{"uid-pinned": {5}},
			want:        []string{"pinned", "over"},
			fits:        true,
		},
		{
			name: "a pod whose working set is unknown ranks first, as the kubelet ranks pods without stats",
			pods: []PodUsage{
				evUsage("over", 1*evGi, 3*evGi, 0),
				evUsage("unknown", 1*evGi, -1, 1000),
			},
			allocatable: evMem(3 * evGi),
			want:        []string{"unknown"},
			fits:        true,
		},
		{
			name: "no working sets at all: by priority, then the larger request",
			pods: []PodUsage{
				evUsage("small-low", 1*evGi, -1, 0),
				evUsage("big-low", 3*evGi, -1, 0),
				evUsage("big-high", 4*evGi, -1, 10),
			},
			allocatable: evMem(4 * evGi),
			want:        []string{"big-low", "small-low"},
			fits:        true,
		},
		{
			name:        "no memory in allocatable: memory is not constrained",
			pods:        []PodUsage{evUsage("a", 100*evGi, 200*evGi, 0)},
			allocatable: resources.List{resources.CPU: 2000},
			fits:        true,
		},
		{
			name:        "exactly at allocatable fits",
			pods:        []PodUsage{evUsage("a", 1*evGi, 2*evGi, 0), evUsage("b", 2*evGi, 1*evGi, 0)},
			allocatable: evMem(4 * evGi),
			fits:        true,
		},
		{
			name:        "one byte over does not",
			pods:        []PodUsage{evUsage("a", 1*evGi, 2*evGi, 0), evUsage("b", 2*evGi, 1*evGi, 0)},
			allocatable: evMem(4*evGi - 1),
			want:        []string{"a"},
			fits:        true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.pods)
			victims, fits := Rank(tc.pods, tc.allocatable, tc.online, tc.exclusive, false)
			var got []string
			for _, v := range victims {
				got = append(got, v.Name)
				if v.Why == "" {
					t.Errorf("victim %s has no Why", v.Name)
				}
			}
			if !slices.Equal(got, tc.want) || fits != tc.fits {
				t.Errorf("Rank = %v fits %v, want %v fits %v", got, fits, tc.want, tc.fits)
			}
			if !slices.Equal(in, tc.pods) {
				t.Errorf("Rank modified its input")
			}
		})
	}
}

func TestRankWhy(t *testing.T) {
	pods := []PodUsage{
		evWith(evUsage("pinned", 1*evGi, 1*evGi, 0), evGuaranteed),
		evUsage("over", 1*evGi, 3*evGi, 7),
	}
	exclusive := map[string][]int{"uid-pinned": {1, 5, 3, 2}}
	victims, _ := Rank(pods, evMem(1*evGi), []int{0, 1}, exclusive, false)
	if len(victims) != 2 {
		t.Fatalf("victims %v", victims)
	}
	if !strings.Contains(victims[0].Why, "exclusive CPUs 2-3,5 are no longer online") {
		t.Errorf("CPU victim: Why = %q", victims[0].Why)
	}
	// For a planned release, the CPUs are still online: the release is
	// about to take them.
	released, _ := Rank(pods, evMem(1*evGi), []int{0, 1}, exclusive, true)
	if len(released) != 2 || released[0].Why != "its exclusive CPUs 2-3,5 are among those the planned release takes offline" {
		t.Errorf("CPU victim of a release: %v", released)
	}
	for _, s := range []string{"3Gi, over allocatable memory 1Gi", "working set 3Gi, request 1Gi, priority 7"} {
		if !strings.Contains(victims[1].Why, s) {
			t.Errorf("memory victim: Why = %q, want it to say %q", victims[1].Why, s)
		}
	}
}

func evList(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestPodMemoryRequest(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	ctr := func(memory string) corev1.Container {
		c := corev1.Container{Name: "c"}
		if memory != "" {
			c.Resources.Requests = evList("memory", memory)
		}
		return c
	}
	sidecar := func(memory string) corev1.Container {
		c := ctr(memory)
		c.RestartPolicy = &always
		return c
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{ctr("1Gi"), ctr("2Gi"), ctr("")}}, 3 * evGi},
		{"an init container raises the total", corev1.PodSpec{
			InitContainers: []corev1.Container{ctr("5Gi"), ctr("1Gi")},
			Containers:     []corev1.Container{ctr("1Gi"), ctr("2Gi")}}, 5 * evGi},
		{"sidecars add to the containers and to later init containers", corev1.PodSpec{
			InitContainers: []corev1.Container{ctr("1Gi"), sidecar("1Gi"), ctr("1536Mi")},
			Containers:     []corev1.Container{ctr("1Gi")}}, 2*evGi + evGi/2},
		{"sidecars add to the containers", corev1.PodSpec{
			InitContainers: []corev1.Container{sidecar("1Gi"), ctr("512Mi")},
			Containers:     []corev1.Container{ctr("2Gi")}}, 3 * evGi},
		{"overhead adds to a non-zero request", corev1.PodSpec{
			Overhead:   evList("memory", "128Mi"),
			Containers: []corev1.Container{ctr("1Gi")}}, evGi + 128<<20},
		{"overhead is not added to nothing", corev1.PodSpec{
			Overhead:   evList("memory", "128Mi"),
			Containers: []corev1.Container{ctr("")}}, 0},
		{"pod-level resources win over the containers'", corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: evList("memory", "3Gi")},
			Containers: []corev1.Container{ctr("1Gi")}}, 3 * evGi},
		{"pod-level cpu alone hides the containers' memory, as in the kubelet", corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: evList("cpu", "1")},
			Containers: []corev1.Container{ctr("1Gi")}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podMemoryRequest(&corev1.Pod{Spec: tc.spec}); got != tc.want {
				t.Errorf("podMemoryRequest = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPodProtection(t *testing.T) {
	prio := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		priority    *int32
		class       string
		want        string
	}{
		{"plain", nil, nil, "", ""},
		{"from the API server", map[string]string{annotationConfigSource: "api"}, nil, "", ""},
		{"static", map[string]string{annotationConfigSource: "file"}, nil, "", "static pod"},
		{"mirror", map[string]string{annotationConfigMirror: "abc"}, nil, "", "mirror pod"},
		{"critical priority", nil, prio(2000000000), "", "system-critical pod"},
		{"node-critical priority", nil, prio(2000001000), "", "system-critical pod"},
		{"just below critical", nil, prio(1999999999), "", ""},
		{"critical class without a priority", nil, nil, "system-node-critical", "system-critical pod"},
		{"cluster-critical class", nil, nil, "system-cluster-critical", "system-critical pod"},
		{"other class", nil, prio(1000), "high", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations},
				Spec: corev1.PodSpec{Priority: tc.priority, PriorityClassName: tc.class}}
			if got := podProtection(p); got != tc.want {
				t.Errorf("podProtection = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodQOSName(t *testing.T) {
	ctr := func(req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	full := evList("cpu", "1", "memory", "1Gi")
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"status wins", corev1.Pod{Status: corev1.PodStatus{QOSClass: corev1.PodQOSGuaranteed}}, qosGuaranteedName},
		{"no resources", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr(nil, nil)}}}, qosBestEffortName},
		{"limits equal requests", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr(full, full)}}}, qosGuaranteedName},
		{"limits only", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr(nil, full)}}}, qosGuaranteedName},
		{"requests only", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr(full, nil)}}}, qosBurstableName},
		{"requests below limits", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			ctr(evList("cpu", "500m", "memory", "1Gi"), full)}}}, qosBurstableName},
		{"memory limit only", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			ctr(nil, evList("memory", "1Gi"))}}}, qosBurstableName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podQOSName(&tc.pod); got != tc.want {
				t.Errorf("podQOSName = %q, want %q", got, tc.want)
			}
		})
	}
}
