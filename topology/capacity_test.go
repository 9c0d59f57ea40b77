package topology

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The resource names must be the kubelet's: "hugepages-" and the page
// size as a BinarySI quantity.
func TestHugepageResourceName(t *testing.T) {
	for _, kb := range []uint64{1, 4, 64, 512, 1000, 1536, 2048, 8192, 16384, 32768, 524288, 1048576, 2097152, 16777216, 3 << 20} {
		size := kb * 1024
		want := v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(size), resource.BinarySI).String()
		if got := hugepageResourceName(size); got != want {
			t.Errorf("hugepageResourceName(%d) = %q, kubelet %q", size, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 512, 999, 1000, 1001, 1023} {
		if got, want := binarySI(v), resource.NewQuantity(int64(v), resource.BinarySI).String(); got != want {
			t.Errorf("binarySI(%d) = %q, resource.Quantity %q", v, got, want)
		}
	}
}

func TestCapacityNil(t *testing.T) {
	var s *Snapshot
	if c := s.Capacity(); c.CPU != 0 || c.Memory != 0 || c.Nodes != nil {
		t.Errorf("nil snapshot capacity %+v", c)
	}
}
