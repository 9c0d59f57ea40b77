package main

import (
	"io"
	"strings"
	"testing"
)

// --listen-address is the exporters' name; --metrics-address stays as its
// deprecated alias, and two different values are one clear error.
func TestListenAddressAndItsAlias(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // the listen address, or the error's start
		err  bool
	}{
		{name: "neither", args: nil, want: ""},
		{name: "listen-address", args: []string{"--listen-address", "127.0.0.1:9477"}, want: "127.0.0.1:9477"},
		{name: "the deprecated alias", args: []string{"--metrics-address", "127.0.0.1:9478"}, want: "127.0.0.1:9478"},
		{name: "both, equal", args: []string{"--metrics-address", ":9477", "--listen-address", ":9477"}, want: ":9477"},
		{name: "both, different", args: []string{"--metrics-address", ":9478", "--listen-address", ":9477"}, err: true,
			want: "--metrics-address :9478 and --listen-address :9477 differ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--standalone"}, tc.args...), io.Discard)
			if tc.err {
				if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "give only --listen-address") {
					t.Fatalf("error %v, want one line starting %q that says what to do", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.listenAddress != tc.want {
				t.Errorf("listen address %q, want %q", o.listenAddress, tc.want)
			}
		})
	}
}
