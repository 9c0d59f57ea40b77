package nrt

import (
	"math/rand/v2"
	"testing"
)

// The fingerprints the podfingerprint library (version v001, its
// Fingerprint.Add and Sign) gives for these pod sets: the format the
// scheduler plugin checks, byte for byte.
func TestPodFingerprintIsTheLibrarys(t *testing.T) {
	for _, c := range []struct {
		name string
		pods []Pod
		want string
	}{
		{"no pods", nil, "pfp0v001ef46db3751d8e999"},
		{"one pod", []Pod{{"default", "web-0"}}, "pfp0v001d5676506abe7e28f"},
		{"three pods", []Pod{{"kube-system", "coredns-7db6d8ff4d-x2k9q"}, {"default", "web-0"}, {"default", "web-1"}}, "pfp0v001ef2fc57a9e1fcd5e"},
		{"a pod listed twice", []Pod{{"default", "web-0"}, {"default", "web-0"}}, "pfp0v00109d258c4b1a888f0"},
		{"namespace and name swapped", []Pod{{"web-0", "default"}}, "pfp0v0011b57d31c96857575"},
		{"the same bytes split elsewhere", []Pod{{"defaultweb", "-0"}}, "pfp0v0012eaaef8f671b86e8"},
	} {
		if got := PodFingerprint(c.pods); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// The set counts, not the order the kubelet lists it in.
func TestPodFingerprintIgnoresOrder(t *testing.T) {
	pods := []Pod{{"kube-system", "coredns-7db6d8ff4d-x2k9q"}, {"default", "web-0"}, {"default", "web-1"}, {"batch", "job-7-abcde"}}
	want := PodFingerprint(pods)
	for range 20 {
		rand.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		if got := PodFingerprint(pods); got != want {
			t.Fatalf("order %v: %s, want %s", pods, got, want)
		}
	}
	if got := PodFingerprint(pods[1:]); got == want {
		t.Errorf("a pod gone, and the fingerprint %s is the same", got)
	}
}
