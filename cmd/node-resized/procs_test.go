package main

import (
	"runtime"
	"testing"
)

func TestFixProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	unset := func(string) string { return "" }

	// A machine started with one CPU online still gets two processors.
	runtime.GOMAXPROCS(1)
	if n := fixProcs(unset); n != 2 || runtime.GOMAXPROCS(0) != 2 {
		t.Errorf("from 1: fixProcs = %d, GOMAXPROCS %d; want 2", n, runtime.GOMAXPROCS(0))
	}
	// More CPUs: the count at start is kept.
	runtime.GOMAXPROCS(6)
	if n := fixProcs(unset); n != 6 || runtime.GOMAXPROCS(0) != 6 {
		t.Errorf("from 6: fixProcs = %d, GOMAXPROCS %d; want 6", n, runtime.GOMAXPROCS(0))
	}
	// The operator's GOMAXPROCS wins.
	runtime.GOMAXPROCS(1)
	env := func(k string) string {
		if k == "GOMAXPROCS" {
			return "1"
		}
		return ""
	}
	if n := fixProcs(env); n != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("GOMAXPROCS=1 set: fixProcs = %d, GOMAXPROCS %d; want 1", n, runtime.GOMAXPROCS(0))
	}
}
