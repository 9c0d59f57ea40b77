package release

import (
	"reflect"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

func TestChooseCPUs(t *testing.T) {
	for _, c := range []struct {
		name      string
		m         *machine
		target    int
		reserved  []int
		exclusive map[int]string
		skip      []int
		noHotplug bool
		want      []CPUStep
		evict     []string
		shortfall string // part of the CPU shortfall's reason; "": none
	}{
		{name: "no target", m: smt2(8), target: 0},
		{name: "target above online", m: smt2(8), target: 9},
		{name: "target at online", m: smt2(8), target: 8},
		{name: "whole core, highest first", m: smt2(8), target: 6, reserved: ids(0, 1),
			want: steps(7, 6)},
		{name: "odd count splits the lowest-ranked whole core last", m: smt2(8), target: 5, reserved: ids(0, 1),
			want: steps(7, 6, 5)},
		{name: "down to the reserved", m: smt2(8), target: 2, reserved: ids(0, 1),
			want: steps(7, 6, 5, 4, 3, 2)},
		{name: "never a reserved CPU", m: smt2(8), target: 1, reserved: ids(0, 1),
			want: steps(7, 6, 5, 4, 3, 2), shortfall: "1 more CPU to take offline, but the other online CPUs are reserved for the system (0-1)"},
		{name: "never a CPU without an online file", m: smt2(4), target: 0 + 1,
			want: steps(3, 2, 1)},
		{name: "cpu0 stays when nothing is reserved", m: cpuMachineOf(4, 1), target: 1,
			want: steps(3, 2, 1)},
		{name: "no online file, short", m: smt2(4), target: 1, reserved: ids(1),
			want: steps(3, 2), shortfall: "are reserved for the system (1) and have no online file, the kernel cannot take them offline (0)"},
		{name: "hot-added CPUs, no SMT", m: cpuMachineOf(8, 1), target: 4, want: steps(7, 6, 5, 4)},
		{name: "a CPU whose sibling is offline completes its core", m: smt2(8, 7), target: 5, reserved: ids(0, 1),
			want: steps(6, 5)},
		{name: "exclusive CPUs kept when the target allows", m: smt2(8), target: 6, reserved: ids(0, 1),
			exclusive: map[int]string{6: "pod-a", 7: "pod-a"}, want: steps(5, 4)},
		{name: "a free CPU beside an exclusive one goes after whole cores", m: smt2(8), target: 5, reserved: ids(0, 1),
			exclusive: map[int]string{7: "pod-a"}, want: steps(5, 4, 6)},
		{name: "exclusive pod evicted when the target needs its CPUs", m: smt2(8), target: 3, reserved: ids(0, 1),
			exclusive: map[int]string{6: "pod-a", 7: "pod-a", 4: "pod-b"},
			want:      []CPUStep{{ID: 3}, {ID: 2}, {ID: 5}, {ID: 7, AfterEvicting: "pod-a"}, {ID: 6, AfterEvicting: "pod-a"}},
			evict:     []string{"pod-a"}},
		{name: "the smallest pod that covers the need", m: smt2(8), target: 6, reserved: ids(0, 1),
			exclusive: map[int]string{2: "big", 3: "big", 4: "big", 5: "big", 6: "small", 7: "small"},
			want:      []CPUStep{{ID: 7, AfterEvicting: "small"}, {ID: 6, AfterEvicting: "small"}}, evict: []string{"small"}},
		{name: "a larger pod when the small one does not cover", m: smt2(8), target: 5, reserved: ids(0, 1),
			exclusive: map[int]string{2: "big", 3: "big", 4: "big", 5: "big", 6: "small", 7: "small"},
			want:      []CPUStep{{ID: 5, AfterEvicting: "big"}, {ID: 4, AfterEvicting: "big"}, {ID: 3, AfterEvicting: "big"}}, evict: []string{"big"}},
		{name: "the largest pods when none covers it", m: smt2(8), target: 2, reserved: ids(0, 1),
			exclusive: map[int]string{2: "a", 3: "a", 4: "b", 5: "b", 6: "b", 7: "c"},
			want: []CPUStep{{ID: 7, AfterEvicting: "c"}, {ID: 6, AfterEvicting: "b"}, {ID: 5, AfterEvicting: "b"},
				{ID: 4, AfterEvicting: "b"}, {ID: 3, AfterEvicting: "a"}, {ID: 2, AfterEvicting: "a"}},
			evict: []string{"a", "b", "c"}},
		{name: "only as many of an evicted pod's CPUs as needed", m: smt2(8), target: 5, reserved: ids(0, 1),
			exclusive: map[int]string{2: "a", 3: "a", 4: "a", 5: "a", 6: "a", 7: "a"},
			want:      []CPUStep{{ID: 7, AfterEvicting: "a"}, {ID: 6, AfterEvicting: "a"}, {ID: 5, AfterEvicting: "a"}}, evict: []string{"a"}},
		{name: "a skipped CPU leaves its core for another", m: smt2(8), target: 6, reserved: ids(0, 1), skip: ids(7),
			want: steps(5, 4)},
		{name: "skipped and short", m: smt2(4), target: 1, reserved: ids(0), skip: ids(2, 3),
			want: steps(1), shortfall: "failed to go offline before (2-3)"},
		{name: "no hotplug facts: nothing can go", m: smt2(4), target: 2, noHotplug: true,
			shortfall: "have no online file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.m.input()
			if c.noHotplug {
				in.Hotplug = nil
			}
			in.TargetCPUs, in.ReservedCPUs, in.Exclusive = c.target, topology.NewCPUSet(c.reserved...), c.exclusive
			in.Skip.CPUs = topology.NewCPUSet(c.skip...)
			p := Choose(in)
			if !reflect.DeepEqual(p.CPUs, c.want) {
				t.Errorf("CPUs\n got %+v\nwant %+v", p.CPUs, c.want)
			}
			if !reflect.DeepEqual(p.EvictFirst, c.evict) {
				t.Errorf("EvictFirst = %v, want %v", p.EvictFirst, c.evict)
			}
			if want := len(in.Machine.CPUs.Online) - len(c.want); p.OnlineCPUs != want {
				t.Errorf("OnlineCPUs = %d, want %d", p.OnlineCPUs, want)
			}
			got := ""
			for _, s := range p.Shortfalls {
				if s.Resource == "cpu" {
					got = s.String()
				}
			}
			switch {
			case c.shortfall == "" && got != "":
				t.Errorf("shortfall %q, want none", got)
			case c.shortfall != "" && !strings.Contains(got, c.shortfall):
				t.Errorf("shortfall %q, want one with %q", got, c.shortfall)
			}
		})
	}
}

func steps(cpus ...int) []CPUStep {
	out := make([]CPUStep, len(cpus))
	for i, id := range cpus {
		out[i] = CPUStep{ID: id}
	}
	return out
}
