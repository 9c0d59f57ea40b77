package retry

import (
	"log/slog"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/node-resized/node-resized/metrics"
)

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		first, limit         time.Duration
		wantFirst, wantLimit time.Duration
	}{
		{"zero takes both defaults", 0, 0, time.Second, 30 * time.Second},
		{"negative first is the default", -time.Second, 0, time.Second, 30 * time.Second},
		{"set values are kept", 2 * time.Second, 5 * time.Second, 2 * time.Second, 5 * time.Second},
		{"a limit below first is the default limit", 2 * time.Second, time.Second, 2 * time.Second, 30 * time.Second},
		{"the limit is never below first", time.Minute, 0, time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log *slog.Logger
			var m *metrics.Metrics
			var clk clock.Clock
			first, limit := tc.first, tc.limit
			Defaults(&log, &m, &clk, &first, &limit, time.Second, 30*time.Second)
			if log == nil || m == nil || clk == nil {
				t.Fatalf("left nil: logger %v, metrics %v, clock %v", log, m, clk)
			}
			if first != tc.wantFirst || limit != tc.wantLimit {
				t.Errorf("bounds %v, %v; want %v, %v", first, limit, tc.wantFirst, tc.wantLimit)
			}
		})
	}
	// What is set is kept.
	log := slog.Default()
	m := metrics.New()
	var clk clock.Clock = testingclock.NewFakeClock(time.Unix(0, 0))
	first, limit := time.Second, 2*time.Second
	Defaults(&log, &m, &clk, &first, &limit, time.Millisecond, time.Minute)
	if log != slog.Default() || m == nil || clk.Now() != time.Unix(0, 0) {
		t.Errorf("replaced what was set")
	}
}
