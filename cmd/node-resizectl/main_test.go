package main

import (
	"testing"

	"github.com/node-resized/node-resized/monitor"
)

func TestSeqnumsStayReadable(t *testing.T) {
	var few monitor.Seqnums
	for _, n := range []uint64{10, 11, 12, 20} {
		few.Add(n)
	}
	if got := seqnums(few); got != "10-12,20" {
		t.Errorf("few: %q, want the list", got)
	}
	var many monitor.Seqnums
	for i := uint64(0); i < 400; i++ {
		many.Add(1000 + 2*i) // a CPU flip's uevents interleave with other subsystems'
	}
	if got, want := seqnums(many), "1000…1510+ (400 in 256+ ranges)"; got != want {
		t.Errorf("many: %q, want %q", got, want)
	}
	var some monitor.Seqnums
	for i := uint64(0); i < 100; i++ {
		some.Add(1000 + 2*i)
	}
	if got, want := seqnums(some), "1000…1198 (100 in 100 ranges)"; got != want {
		t.Errorf("some: %q, want %q", got, want)
	}
}
