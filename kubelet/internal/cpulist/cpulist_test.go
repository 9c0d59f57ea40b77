package cpulist

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "", want: nil},
		{in: "0", want: []int{0}},
		{in: "0-3,8,10-11", want: []int{0, 1, 2, 3, 8, 10, 11}},
		{in: "3,1-2,2", want: []int{1, 2, 3}},
		{in: "1-1", want: []int{1}},
		{in: "3-1", bad: true},
		{in: "a", bad: true},
		{in: "-1", bad: true},
		{in: "0-100000000", bad: true},
		{in: "1,", bad: true},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if (err != nil) != tc.bad || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{in: nil, want: ""},
		{in: []int{5}, want: "5"},
		{in: []int{0, 1, 2, 3, 8, 10, 11}, want: "0-3,8,10-11"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
