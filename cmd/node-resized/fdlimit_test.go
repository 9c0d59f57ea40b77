package main

import (
	"testing"

	"github.com/node-resized/node-resized/api"
)

func TestConnectionCap(t *testing.T) {
	perListener := api.Refusers + 1
	for _, tc := range []struct {
		name            string
		want, listeners int
		soft            uint64
		open            int
		cap             int
		lowered         bool
	}{
		// The machine: 414 open, systemd's soft limit raised by
		// the Go runtime to the hard one.
		{"raised limit", 64, 1, 524288, 414, 64, false},
		// Soft and hard at 1024: 1024 - 414 - 414 - 5 = 191 left.
		{"1024, one listener", 64, 1, 1024, 414, 64, false},
		{"1024, asked for more", 500, 1, 1024, 414, 1024 - 414 - 414 - perListener, true},
		{"1024, two listeners", 500, 2, 1024, 414, (1024 - 414 - 414 - 2*perListener) / 2, true},
		// Few files open: the reserve is at least detectionReserve.
		{"small process", 1000, 1, 1024, 20, 1024 - 20 - detectionReserve - perListener, true},
		// A machine that needs more files than its limit has: the API
		// still gets one connection.
		{"no room", 64, 1, 1024, 900, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, lowered := connectionCap(tc.want, tc.listeners, tc.soft, tc.open)
			if got != tc.cap || lowered != tc.lowered {
				t.Errorf("connectionCap(%d, %d, %d, %d) = %d, %v; want %d, %v", tc.want, tc.listeners, tc.soft, tc.open, got, lowered, tc.cap, tc.lowered)
			}
		})
	}
}

func TestAPILimitFlags(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--api-idle-timeout", "5s", "--api-read-timeout", "2s", "--api-max-connections", "8", "--api-max-streams", "3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := o.apiLimits; l.IdleTimeout.String() != "5s" || l.ReadTimeout.String() != "2s" || l.MaxConnections != 8 || l.MaxStreams != 3 {
		t.Errorf("limits %+v", l)
	}
	o, err = parseFlags([]string{"--standalone"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.apiLimits != api.DefaultLimits() {
		t.Errorf("default limits %+v, want %+v", o.apiLimits, api.DefaultLimits())
	}
	for _, bad := range [][]string{
		{"--api-idle-timeout", "0s"}, {"--api-read-timeout", "-1s"},
		{"--api-max-connections", "0"}, {"--api-max-streams", "-2"},
	} {
		if _, err := parseFlags(append([]string{"--standalone"}, bad...), nil); err == nil {
			t.Errorf("parseFlags(%v) accepted it", bad)
		}
	}
}
