package types

import "testing"

func TestReleasedSummary(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Released
		want string
	}{
		{"nothing", Released{}, ""},
		{"cpus", Released{CPUs: []int{3, 2, 6, 7, 8}}, "cpus 2-3,6-8"},
		{"a dimm offline, one in part", Released{CPUs: []int{3}, Blocks: []int{72, 73, 74, 75, 76, 77, 78, 79, 80}, Devices: []ReleasedDevice{
			{ID: "PNP0C80:00", Start: 0x240000000, End: 0x280000000, Size: 1 << 30, Offline: 8, Blocks: 8, SafeToUnplug: true},
			{ID: "PNP0C80:01", Start: 0x280000000, End: 0x2c0000000, Size: 1 << 30, Offline: 1, Blocks: 8},
		}}, "cpus 3; memory PNP0C80:00 [0x240000000-0x280000000) 1Gi, 8/8 blocks offline, safe to unplug; memory PNP0C80:01 [0x280000000-0x2c0000000) 1Gi, 1/8 blocks offline"},
		{"blocks of no device", Released{Blocks: []int{9, 10}}, "2 memory blocks of no memory device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Summary(); got != tc.want {
				t.Errorf("Summary()\n got %q\nwant %q", got, tc.want)
			}
			if tc.r.Empty() != (tc.want == "" || len(tc.r.CPUs)+len(tc.r.Blocks) == 0) {
				t.Errorf("Empty() %v", tc.r.Empty())
			}
		})
	}
}

func TestReleaseIsPartOfTheRequest(t *testing.T) {
	a := Configured{Present: true, Raw: map[string]string{"cpu": "2"}}
	b := a
	b.Release = true
	if a.Key() == b.Key() || b.Key() != `{"cpu":"2"}`+ReleaseSuffix {
		t.Errorf("keys %q and %q", a.Key(), b.Key())
	}
	if !(Condition{Message: ConfiguredPhrase(b.Key()) + ": capacity applied"}).DecidedFor(b) ||
		(Condition{Message: ConfiguredPhrase(a.Key()) + ": capacity applied"}).DecidedFor(b) {
		t.Errorf("DecidedFor does not tell a release request from the same capacity without one")
	}
}
