package main

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/node-resized/node-resized/metrics"
)

// --fs-interval reaches the monitor as its FSPoll, off (negative) when it is
// 0 or there is no kubelet root directory to measure; while
// the watch runs, the listener also delivers the block subsystem, whose
// RESIZE=1 change uevent makes the watch poll fast, and none of it when
// the watch is off.
func TestFSIntervalFlag(t *testing.T) {
	const capacity = "cpu memory node"
	for _, tc := range []struct {
		name       string
		args       []string
		want       time.Duration
		subsystems []string
	}{
		{"default", nil, 10 * time.Second, []string{"cpu", "memory", "node", "block"}},
		{"set", []string{"--fs-interval=30s"}, 30 * time.Second, []string{"cpu", "memory", "node", "block"}},
		{"0: off", []string{"--fs-interval=0"}, -1, nil},
		{"no kubelet root directory", []string{"--kubelet-root-dir="}, -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--standalone"}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := o.fsPollOrOff(); got != tc.want {
				t.Errorf("FSPoll %v, want %v", got, tc.want)
			}
			lo := listenerOptions(o, slog.New(slog.DiscardHandler), metrics.New())
			if !slices.Equal(lo.Subsystems, tc.subsystems) {
				t.Errorf("listener subsystems %q, want %q (nil: the listener's default, %s)", lo.Subsystems, tc.subsystems, capacity)
			}
		})
	}
}

func TestFSIntervalMustNotBeNegative(t *testing.T) {
	if _, err := parseFlags([]string{"--standalone", "--fs-interval=-1s"}, io.Discard); err == nil {
		t.Error("--fs-interval=-1s accepted")
	}
}
