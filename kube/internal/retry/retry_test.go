package retry

import (
	"testing"
	"time"
)

func TestBackoffIsJitteredAndCapped(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		b := Backoff(time.Second, 8*time.Second)
		for i, base := range []time.Duration{1, 2, 4, 8, 8, 8} {
			d := b.Step()
			if lo, hi := base*time.Second, base*time.Second*3/2; d < lo || d >= hi {
				t.Fatalf("step %d: %v, want in [%v, %v)", i, d, lo, hi)
			}
			if i == 0 {
				seen[d] = true
			}
		}
	}
	if len(seen) < 50 {
		t.Errorf("100 first delays took only %d values: retries would come in lockstep", len(seen))
	}
	p := Poll(5 * time.Second)
	for range 100 {
		if d := p.Step(); d < 5*time.Second || d >= 6*time.Second {
			t.Fatalf("poll wait %v, want in [5s, 6s)", d)
		}
	}
}
