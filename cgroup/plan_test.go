package cgroup

import (
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology"
)

func TestPlanCPUs(t *testing.T) {
	type sets = [3]topology.CPUSet
	all := [3]bool{true, true, true}
	for _, tc := range []struct {
		name      string
		cur       sets
		present   [3]bool
		online    topology.CPUSet
		target    sets
		narrowing bool
	}{
		{name: "all inherit: nothing to write", cur: sets{}, present: all, online: topology.CPUSet{0, 1, 2, 3, 4}},
		{name: "no cpuset controller", present: [3]bool{}, online: topology.CPUSet{0, 1}},
		{name: "kubepods pinned, cpu removed", cur: sets{{0, 1, 2, 3}}, present: all, online: topology.CPUSet{0, 1, 2},
			target: sets{{0, 1, 2}}, narrowing: true},
		{name: "kubepods pinned, cpu added", cur: sets{{0, 1, 2}}, present: all, online: topology.CPUSet{0, 1, 2, 3},
			target: sets{{0, 1, 2, 3}}},
		{name: "kubepods pinned, one out one in", cur: sets{{0, 1, 2, 3}}, present: all, online: topology.CPUSet{0, 1, 2, 4},
			target: sets{{0, 1, 2, 4}}, narrowing: true},
		{name: "already right", cur: sets{{0, 1}}, present: all, online: topology.CPUSet{0, 1}, target: sets{{0, 1}}},
		{name: "child copies kubepods and follows it", cur: sets{{0, 1, 2}, {0, 1, 2}, nil}, present: all,
			online: topology.CPUSet{0, 1, 2, 3}, target: sets{{0, 1, 2, 3}, {0, 1, 2, 3}}},
		{name: "child with its own list only loses offline cpus", cur: sets{{0, 1, 2, 3}, {2, 3}, {3}}, present: all,
			online: topology.CPUSet{0, 1, 2, 4}, target: sets{{0, 1, 2, 4}, {2}, nil}, narrowing: true},
		{name: "child pinned under an inheriting kubepods", cur: sets{nil, {1, 2, 3}, nil}, present: all,
			online: topology.CPUSet{0, 1, 2}, target: sets{nil, {1, 2}}, narrowing: true},
		{name: "child with its own list is not widened", cur: sets{nil, {1}, nil}, present: all,
			online: topology.CPUSet{0, 1, 2, 3}, target: sets{nil, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planCPUs(tc.cur, tc.present, tc.online)
			if !reflect.DeepEqual(p.target, tc.target) || p.narrowing != tc.narrowing {
				t.Errorf("targets %v narrowing %v; want %v %v (notes %q)", p.target, p.narrowing, tc.target, tc.narrowing, p.note)
			}
			for i := range p.note {
				if p.target[i] == nil && p.note[i] == "" {
					t.Errorf("cgroup %d left alone without a note", i)
				}
			}
		})
	}
}
