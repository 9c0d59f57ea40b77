package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestShippedRestartPolicy: the flags' defaults are the restart policy the
// agent's flapping-CPU test runs under (agent.shippedPolicy): at most 3
// restarts in any 20 minutes, node-problem-detector's FrequentKubeletRestart
// firing at 5.
func TestShippedRestartPolicy(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeletSettle != 10*time.Second || o.kubeletMinInterval != 2*time.Minute || o.kubeletRestartTimeout != 2*time.Minute ||
		o.kubeletBudgetN != 3 || o.kubeletBudgetWindow != 20*time.Minute {
		t.Fatalf("settle %v, interval %v, timeout %v, budget %d/%v; want 10s, 2m, 2m, 3/20m",
			o.kubeletSettle, o.kubeletMinInterval, o.kubeletRestartTimeout, o.kubeletBudgetN, o.kubeletBudgetWindow)
	}
}

// TestRestartBudgetFlag: --kubelet-restart-budget takes N/WINDOW; anything
// else is one error that names the flag.
func TestRestartBudgetFlag(t *testing.T) {
	o, err := parseFlags([]string{"--kubelet-restart-budget", "4/1h"}, io.Discard)
	if err != nil || o.kubeletBudgetN != 4 || o.kubeletBudgetWindow != time.Hour {
		t.Fatalf("4/1h: %+v, %v", o, err)
	}
	for _, bad := range []string{"3", "0/20m", "3/0s", "three/20m"} {
		if _, err := parseFlags([]string{"--kubelet-restart-budget", bad}, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "--kubelet-restart-budget: ") {
			t.Errorf("%q: error %v, want one that names --kubelet-restart-budget", bad, err)
		}
	}
}
