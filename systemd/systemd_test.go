package systemd

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

func TestUnitFile(t *testing.T) {
	f, err := os.Open("node-resized.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		t.Fatalf("parse the unit: %v", err)
	}
	got := map[string]string{}
	for _, o := range opts {
		got[o.Section+"."+o.Name] = o.Value
	}
	for key, want := range map[string]string{
		// A node agent is restarted whatever happened, and never given up
		// on (as the kubelet's unit does).
		"Unit.StartLimitIntervalSec": "0",
		"Service.Restart":            "always",
		// The packages ship this unit as is: the binary in /usr/bin, its
		// flags from the optional /etc/default/node-resized (make install
		// rewrites the path to $(PREFIX)/bin). Unbraced, so that systemd
		// splits the variable into one argument per word.
		"Service.EnvironmentFile": "-/etc/default/node-resized",
		"Service.ExecStart":       "/usr/bin/node-resized $NODE_RESIZED_ARGS",
		// The safety net of a kubelet restart cut short, and the time a
		// stop gives a restart under way to finish.
		"Service.ExecStopPost":         "-/usr/bin/node-resized kubelet-recover $NODE_RESIZED_ARGS",
		"Service.TimeoutStopSec":       "30s",
		"Service.Type":                 "notify",
		"Service.WatchdogSec":          "30s",
		"Service.RuntimeDirectory":     "node-resized",
		"Service.StateDirectory":       "node-resized",
		"Service.NoNewPrivileges":      "yes",
		"Service.ProtectSystem":        "strict",
		"Service.ProtectControlGroups": "no",
		"Install.WantedBy":             "multi-user.target",
	} {
		if got[key] != want {
			t.Errorf("%s = %q, want %q", key, got[key], want)
		}
	}
	if !strings.Contains(got["Service.RestrictAddressFamilies"], "AF_NETLINK") {
		t.Error("RestrictAddressFamilies must allow AF_NETLINK for the uevent socket")
	}
	// The kubelet's restart: its checkpoints are rewritten (a temporary
	// file and a backup renamed within their directory), and systemd is
	// called over the system bus's unix socket, which nothing may hide.
	if got["Service.ReadWritePaths"] != "-/var/lib/kubelet" {
		t.Errorf("ReadWritePaths = %q, want only the kubelet's root directory, optional", got["Service.ReadWritePaths"])
	}
	if ro := got["Service.ReadOnlyPaths"]; !strings.Contains(ro, "/var/lib/kubelet/pods") || !strings.Contains(ro, "/var/lib/kubelet/pki") {
		t.Errorf("ReadOnlyPaths = %q, want the pods' volumes and the kubelet's credentials kept read-only", ro)
	}
	if !strings.Contains(got["Service.RestrictAddressFamilies"], "AF_UNIX") {
		t.Error("RestrictAddressFamilies must allow AF_UNIX for D-Bus and the pod-resources socket")
	}
	for _, key := range []string{"Service.PrivateNetwork", "Service.InaccessiblePaths", "Service.TemporaryFileSystem", "Service.PrivateIPC"} {
		if v, ok := got[key]; ok && v != "no" {
			t.Errorf("%s = %q would cut the daemon off the system bus at /run/dbus/system_bus_socket", key, v)
		}
	}
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{
		"change_id":   "CHANGE_ID",
		"latency":     "LATENCY",
		"cpus-online": "CPUS_ONLINE",
		"_hidden":     "HIDDEN",
		"9lives":      "F_9LIVES",
		"message":     "F_MESSAGE",
		"priority":    "F_PRIORITY",
		"":            "F_",
	} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := fieldName(strings.Repeat("a", 100)); len(got) != 64 {
		t.Errorf("long names are cut to 64, got %d", len(got))
	}
}

func TestJournalHandlerLevels(t *testing.T) {
	h := NewJournalHandler("node-resized", slog.LevelWarn)
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelError) {
		t.Error("level filter wrong")
	}
	g := h.WithGroup("relay").WithAttrs([]slog.Attr{slog.Int("patches", 3)}).(*JournalHandler)
	if len(g.attrs) != 1 || g.attrs[0].Key != "relay_patches" {
		t.Errorf("grouped attrs %v, want relay_patches", g.attrs)
	}
}

func TestWatchdogWithoutSystemd(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if err := Watchdog(ctx, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 500*time.Millisecond {
		t.Error("Watchdog waited although no watchdog is configured")
	}
	if err := Ready("test"); err != nil {
		t.Errorf("Ready without NOTIFY_SOCKET: %v", err)
	}
}
