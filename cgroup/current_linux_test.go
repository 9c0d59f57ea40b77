package cgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/decide"
)

func TestCurrentReadsTheKubeletsLimits(t *testing.T) {
	for _, driver := range []string{DriverCgroupfs, DriverSystemd} {
		tr := newTree(t, driver, "/")
		e, rec, _ := newTestEnforcer(t, tr, nil)
		got, err := e.Current()
		if err != nil {
			t.Fatal(err)
		}
		if want := (decide.CgroupLimits{MemoryMax: 7516192768, CPUWeight: 157}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Current() = %+v, want %+v", driver, got, want)
		}
		if len(rec.take()) != 0 {
			t.Errorf("%s: Current wrote", driver)
		}
	}
}

func TestCurrentUnknowns(t *testing.T) {
	kp := func(tr *tree) string { return tr.paths.Kubepods.Dir }
	for _, tc := range []struct {
		name    string
		mut     func(t *testing.T, tr *tree)
		want    decide.CgroupLimits
		wantErr bool
	}{
		{name: "memory.max is max", mut: func(t *testing.T, tr *tree) { tr.set(t, kp(tr), "memory.max", "max") },
			want: decide.CgroupLimits{CPUWeight: 157}},
		{name: "cpu controller not enabled", mut: func(t *testing.T, tr *tree) {
			if err := os.Remove(filepath.Join(kp(tr), "cpu.weight")); err != nil {
				t.Fatal(err)
			}
		}, want: decide.CgroupLimits{MemoryMax: 7516192768}},
		{name: "kubepods absent", mut: func(t *testing.T, tr *tree) {
			if err := os.RemoveAll(kp(tr)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "unparsable weight", mut: func(t *testing.T, tr *tree) { tr.set(t, kp(tr), "cpu.weight", "heavy") },
			want: decide.CgroupLimits{MemoryMax: 7516192768}, wantErr: true},
		{name: "weight out of range", mut: func(t *testing.T, tr *tree) { tr.set(t, kp(tr), "cpu.weight", "10001") },
			want: decide.CgroupLimits{MemoryMax: 7516192768}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t, DriverCgroupfs, "/")
			e, _, _ := newTestEnforcer(t, tr, nil)
			tc.mut(t, tr)
			got, err := e.Current()
			if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Current() = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
