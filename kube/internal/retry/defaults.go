package retry

import (
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-resized/node-resized/metrics"
)

// Defaults fills in what the options of one of kube/'s API workers (the
// relay, the evictor, the NodeResourceTopology publisher) leave zero, the
// same way for each: a logger that discards, a metrics registry of its
// own, the real clock, and the retry delay bounds first (when zero or
// negative) and limit (when below first; never below first).
func Defaults(log **slog.Logger, m **metrics.Metrics, clk *clock.Clock, first, limit *time.Duration, defFirst, defLimit time.Duration) {
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	if *m == nil {
		*m = metrics.New()
	}
	if *clk == nil {
		*clk = clock.RealClock{}
	}
	if *first <= 0 {
		*first = defFirst
	}
	if *limit < *first {
		*limit = max(defLimit, *first)
	}
}
