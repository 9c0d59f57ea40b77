package cgroup

import (
	"testing"
)

func TestResolvePaths(t *testing.T) {
	for _, tc := range []struct {
		driver, cgroupRoot              string
		kubepods, burstable, besteffort Group
	}{
		{
			driver: "", cgroupRoot: "",
			kubepods:   Group{Path: "/kubepods"},
			burstable:  Group{Path: "/kubepods/burstable"},
			besteffort: Group{Path: "/kubepods/besteffort"},
		},
		{
			driver: DriverCgroupfs, cgroupRoot: "/",
			kubepods:   Group{Path: "/kubepods"},
			burstable:  Group{Path: "/kubepods/burstable"},
			besteffort: Group{Path: "/kubepods/besteffort"},
		},
		{
			driver: DriverCgroupfs, cgroupRoot: "/custom/root-a/",
			kubepods:   Group{Path: "/custom/root-a/kubepods"},
			burstable:  Group{Path: "/custom/root-a/kubepods/burstable"},
			besteffort: Group{Path: "/custom/root-a/kubepods/besteffort"},
		},
		{
			driver: DriverSystemd, cgroupRoot: "/",
			kubepods:   Group{Path: "/kubepods.slice", Unit: "kubepods.slice", Parent: "-.slice"},
			burstable:  Group{Path: "/kubepods.slice/kubepods-burstable.slice", Unit: "kubepods-burstable.slice", Parent: "kubepods.slice"},
			besteffort: Group{Path: "/kubepods.slice/kubepods-besteffort.slice", Unit: "kubepods-besteffort.slice", Parent: "kubepods.slice"},
		},
		{
			// The kubelet turns every component of a non-root cgroupRoot
			// into a slice level, "-" escaped to "_".
			driver: DriverSystemd, cgroupRoot: "/node/pool-a",
			kubepods: Group{Path: "/node.slice/node-pool_a.slice/node-pool_a-kubepods.slice",
				Unit: "node-pool_a-kubepods.slice", Parent: "node-pool_a.slice"},
			burstable: Group{Path: "/node.slice/node-pool_a.slice/node-pool_a-kubepods.slice/node-pool_a-kubepods-burstable.slice",
				Unit: "node-pool_a-kubepods-burstable.slice", Parent: "node-pool_a-kubepods.slice"},
			besteffort: Group{Path: "/node.slice/node-pool_a.slice/node-pool_a-kubepods.slice/node-pool_a-kubepods-besteffort.slice",
				Unit: "node-pool_a-kubepods-besteffort.slice", Parent: "node-pool_a-kubepods.slice"},
		},
	} {
		t.Run(tc.driver+tc.cgroupRoot, func(t *testing.T) {
			p, err := ResolvePaths("/sys/fs/cgroup", tc.driver, tc.cgroupRoot)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []struct {
				name      string
				got, want Group
			}{{"kubepods", p.Kubepods, tc.kubepods}, {"burstable", p.Burstable, tc.burstable}, {"besteffort", p.BestEffort, tc.besteffort}} {
				g.want.Dir = "/sys/fs/cgroup" + g.want.Path
				if g.got != g.want {
					t.Errorf("%s = %+v, want %+v", g.name, g.got, g.want)
				}
			}
		})
	}
}

func TestResolvePathsErrors(t *testing.T) {
	if _, err := ResolvePaths("", "cgroupfs2", "/"); err == nil {
		t.Error("unknown driver accepted")
	}
	p, err := ResolvePaths("", "", "")
	if err != nil || p.Root != DefaultRoot || p.Driver != DriverCgroupfs || p.CgroupRoot != "/" {
		t.Errorf("defaults: %+v, %v", p, err)
	}
}

func TestPodPaths(t *testing.T) {
	const uid = "0b1e6f7a-1111-4c3d-9e8f-000000000001"
	for _, tc := range []struct {
		driver, cgroupRoot, qos, want string
	}{
		{DriverCgroupfs, "/", "Guaranteed", "/kubepods/pod" + uid},
		{DriverCgroupfs, "/", "burstable", "/kubepods/burstable/pod" + uid},
		{DriverCgroupfs, "/", "BestEffort", "/kubepods/besteffort/pod" + uid},
		{DriverCgroupfs, "/custom", "burstable", "/custom/kubepods/burstable/pod" + uid},
		{DriverSystemd, "/", "guaranteed", "/kubepods.slice/kubepods-pod0b1e6f7a_1111_4c3d_9e8f_000000000001.slice"},
		{DriverSystemd, "/", "Burstable", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1e6f7a_1111_4c3d_9e8f_000000000001.slice"},
		{DriverSystemd, "/", "besteffort", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b1e6f7a_1111_4c3d_9e8f_000000000001.slice"},
		{DriverSystemd, "/custom", "besteffort", "/custom.slice/custom-kubepods.slice/custom-kubepods-besteffort.slice/custom-kubepods-besteffort-pod0b1e6f7a_1111_4c3d_9e8f_000000000001.slice"},
	} {
		p, err := ResolvePaths("/r", tc.driver, tc.cgroupRoot)
		if err != nil {
			t.Fatal(err)
		}
		g, err := p.Pod(uid, tc.qos)
		if err != nil {
			t.Fatal(err)
		}
		if g.Path != tc.want || g.Dir != "/r"+tc.want {
			t.Errorf("%s %s %s: %+v, want %s", tc.driver, tc.cgroupRoot, tc.qos, g, tc.want)
		}
	}
	p, _ := ResolvePaths("/r", DriverCgroupfs, "/")
	for _, bad := range []struct{ uid, qos string }{
		{"", "burstable"}, {"../../etc", "burstable"}, {"..", "burstable"}, {"a_b", "burstable"}, {uid, "gold"}, {uid, ""},
	} {
		if g, err := p.Pod(bad.uid, bad.qos); err == nil {
			t.Errorf("Pod(%q, %q) = %+v, want an error", bad.uid, bad.qos, g)
		}
	}
}

func TestExpandSlice(t *testing.T) {
	for in, want := range map[string]string{
		"-.slice":              "/",
		"kubepods.slice":       "/kubepods.slice",
		"a-b-c.slice":          "/a.slice/a-b.slice/a-b-c.slice",
		"kubepods-pod_x.slice": "/kubepods.slice/kubepods-pod_x.slice",
	} {
		if got, err := expandSlice(in); err != nil || got != want {
			t.Errorf("expandSlice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ".slice", "a--b.slice", "-a.slice", "a.scope", "a/b.slice"} {
		if got, err := expandSlice(bad); err == nil {
			t.Errorf("expandSlice(%q) = %q, want an error", bad, got)
		}
	}
}
