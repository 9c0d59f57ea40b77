package topology

import (
	"fmt"
	"testing"

	"github.com/node-resized/node-resized/resources"
)

func TestCapacityNil(t *testing.T) {
	var s *Snapshot
	if c := s.Capacity(); c != nil || s.NodeCapacities() != nil {
		t.Errorf("nil snapshot capacity %+v", c)
	}
}

// testCapacity is Capacity and NodeCapacities in plain fields, for tables.
type testCapacity struct {
	CPU              int64
	Memory           uint64
	Hugepages        map[string]uint64
	EphemeralStorage uint64
	Nodes            []testNodeCapacity
}

type testNodeCapacity struct {
	ID        int
	CPU       int64
	Memory    uint64
	Hugepages map[string]uint64
}

// capacityOf reads s.Capacity and s.NodeCapacities into a testCapacity,
// failing on anything the one vocabulary would not hold: a fractional CPU
// or an unexpected resource name.
func capacityOf(s *Snapshot) testCapacity {
	split := func(l resources.List) (cpu int64, mem uint64, huge map[string]uint64, eph uint64) {
		for name, v := range l {
			switch {
			case name == resources.CPU:
				if v%1000 != 0 {
					panic(fmt.Sprintf("fractional cpu %d", v))
				}
				cpu = v / 1000
			case name == resources.Memory:
				mem = uint64(v)
			case name == resources.EphemeralStorage:
				eph = uint64(v)
			case name == resources.PID:
			case resources.IsHugePages(name):
				if huge == nil {
					huge = map[string]uint64{}
				}
				huge[name] = uint64(v)
			default:
				panic("unexpected resource " + name)
			}
		}
		return
	}
	var c testCapacity
	c.CPU, c.Memory, c.Hugepages, c.EphemeralStorage = split(s.Capacity())
	for _, n := range s.NodeCapacities() {
		nc := testNodeCapacity{ID: n.ID}
		nc.CPU, nc.Memory, nc.Hugepages, _ = split(n.Capacity)
		c.Nodes = append(c.Nodes, nc)
	}
	return c
}

// TestUnmeasured: a failed ephemeral-storage read is named, so that the
// capacity's reader holds the last amount instead of losing the resource.
func TestUnmeasured(t *testing.T) {
	var none *Snapshot
	if got := none.Unmeasured(); got != nil {
		t.Errorf("nil snapshot: Unmeasured() = %q", got)
	}
	s := &Snapshot{MemTotal: 1 << 30, EphemeralStorage: 100 << 30}
	if got := s.Unmeasured(); got != nil {
		t.Errorf("measured: Unmeasured() = %q", got)
	}
	s = &Snapshot{MemTotal: 1 << 30, EphemeralStorageError: "statfs /var/lib/kubelet: permission denied"}
	got := s.Unmeasured()
	if len(got) != 1 || got[0] != resources.EphemeralStorage {
		t.Fatalf("failed read: Unmeasured() = %q, want [%s]", got, resources.EphemeralStorage)
	}
	if _, ok := s.Capacity()[resources.EphemeralStorage]; ok {
		t.Errorf("failed read: Capacity() has %s", resources.EphemeralStorage)
	}
}
