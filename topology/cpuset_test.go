package topology

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestParseCPUSet(t *testing.T) {
	for _, c := range []struct {
		in   string
		want CPUSet
		str  string
	}{
		{"", nil, ""},
		{"\n", nil, ""},
		{"0", CPUSet{0}, "0"},
		{"0-3\n", CPUSet{0, 1, 2, 3}, "0-3"},
		{"0-3,8", CPUSet{0, 1, 2, 3, 8}, "0-3,8"},
		{"0,2,4-5,7", CPUSet{0, 2, 4, 5, 7}, "0,2,4-5,7"},
		{"8,0-1", CPUSet{0, 1, 8}, "0-1,8"},          // out of order
		{"0-3,2-5", CPUSet{0, 1, 2, 3, 4, 5}, "0-5"}, // overlapping
		{" 1 , 3 ", CPUSet{1, 3}, "1,3"},
		{"1023", CPUSet{1023}, "1023"},
	} {
		got, err := ParseCPUSet(c.in)
		if err != nil {
			t.Errorf("ParseCPUSet(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCPUSet(%q) = %#v, want %#v", c.in, got, c.want)
		}
		if got.String() != c.str {
			t.Errorf("ParseCPUSet(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
	}
	for _, bad := range []string{"a", "1-", "-1", "3-1", "1,,2", "1-2-3", "0x1", "99999999", "0-65536", "1:2"} {
		if got, err := ParseCPUSet(bad); err == nil {
			t.Errorf("ParseCPUSet(%q) = %v, want an error", bad, got)
		}
	}
}

func TestCPUSetMethods(t *testing.T) {
	s := CPUSet{0, 1, 2, 5, 7}
	if s.Len() != 5 {
		t.Errorf("Len() = %d", s.Len())
	}
	for cpu, want := range map[int]bool{0: true, 2: true, 3: false, 7: true, 8: false, -1: false} {
		if s.Contains(cpu) != want {
			t.Errorf("Contains(%d) = %v", cpu, !want)
		}
	}
	for _, c := range []struct {
		a, b, want CPUSet
	}{
		{s, CPUSet{1, 5, 9}, CPUSet{0, 2, 7}},
		{s, nil, s},
		{nil, s, nil},
		{s, s, nil},
		{CPUSet{3, 4}, CPUSet{0, 1}, CPUSet{3, 4}},
	} {
		if got := c.a.Difference(c.b); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v.Difference(%v) = %#v, want %#v", c.a, c.b, got, c.want)
		}
	}
	if CPUSet(nil).Len() != 0 || CPUSet(nil).Contains(0) || CPUSet(nil).String() != "" {
		t.Error("nil set misbehaves")
	}
}

func TestCPUSetJSON(t *testing.T) {
	type doc struct {
		A CPUSet `json:"a"`
		B CPUSet `json:"b"`
	}
	b, err := json.Marshal(doc{A: CPUSet{0, 1, 2, 3, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"a":"0-3,8","b":""}` {
		t.Errorf("Marshal = %s", b)
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"a":"0-3,8","b":null}`), &d); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.A, CPUSet{0, 1, 2, 3, 8}) || d.B != nil {
		t.Errorf("Unmarshal = %#v", d)
	}
	for _, bad := range []string{`{"a":"x"}`, `{"a":[0,1]}`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func FuzzParseCPUSet(f *testing.F) {
	for _, s := range []string{"", "0-3,8", "0,2,4-5", "7-1", "1,,2", "65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUSet(s)
		if err != nil {
			return
		}
		for i := 1; i < len(set); i++ {
			if set[i] <= set[i-1] {
				t.Fatalf("ParseCPUSet(%q) = %v: not sorted and unique", s, set)
			}
		}
		again, err := ParseCPUSet(set.String())
		if err != nil || !reflect.DeepEqual(again, set) {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, set, set.String(), again, err)
		}
	})
}

func TestNewCPUSet(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{3, 1, 2, 2, 0, 8}, "0-3,8"},
		{[]int{5, 7, 6, 10}, "5-7,10"},
	} {
		in := slices.Clone(tc.ids)
		got := NewCPUSet(in...)
		if got.String() != tc.want {
			t.Errorf("NewCPUSet(%v) = %q, want %q", tc.ids, got.String(), tc.want)
		}
		if !slices.Equal(in, tc.ids) {
			t.Errorf("NewCPUSet(%v) changed its argument to %v", tc.ids, in)
		}
	}
}
