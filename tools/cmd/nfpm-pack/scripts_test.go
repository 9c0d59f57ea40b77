package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScriptsWithSystemd runs the maintainer scripts as on a machine booted
// with systemd (a private /run with /run/systemd/system, in a mount
// namespace of their own) against a systemctl that records what it is asked.
// The scripts reload systemd, restart a running daemon on upgrade, stop it on
// removal and then run node-resized --uninstall (a recording stand-in) with
// the flags of /etc/default/node-resized, and never enable or start it. The scripts that delete the state
// (deb purge, rpm erase) run in the install tests, in temporary roots.
func TestScriptsWithSystemd(t *testing.T) {
	need(t, "unshare", "mount")
	needRoot(t)
	p := packages(t)

	bin := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	write(t, filepath.Join(bin, "systemctl"), "#!/bin/sh\necho \"$*\" >>\"$SYSTEMCTL_CALLS\"\nexit \"${SYSTEMCTL_EXIT:-0}\"\n")
	if err := os.Chmod(filepath.Join(bin, "systemctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	// deb-systemd-invoke and deb-systemd-helper as init-system-helpers
	// has them, but the helper's state and links on this machine are not
	// the test's: it records its calls (it makes links itself, without
	// systemctl; the install tests run the real one in a temporary root).
	// It says the unit was not installed or enabled by it before.
	for name, body := range map[string]string{
		"deb-systemd-invoke": "#!/bin/sh\nexec systemctl \"$@\"\n",
		"deb-systemd-helper": "#!/bin/sh\necho \"deb-systemd-helper $*\" >>\"$SYSTEMCTL_CALLS\"\ncase \"$*\" in *debian-installed* | *was-enabled*) exit 1 ;; esac\n",
	} {
		write(t, filepath.Join(bin, name), body)
		if err := os.Chmod(filepath.Join(bin, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// node-resized records its arguments in the same list, so that the
	// order of the stop and the uninstall shows.
	write(t, filepath.Join(bin, "node-resized"), "#!/bin/sh\necho \"node-resized $*\" >>\"$SYSTEMCTL_CALLS\"\nexit \"${UNINSTALL_EXIT:-0}\"\n")
	if err := os.Chmod(filepath.Join(bin, "node-resized"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The systemd test: /run/systemd/system exists only in the namespace.
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system").CombinedOutput(); err != nil {
		t.Skipf("no mount namespace here (unshare --mount): %v\n%s", err, out)
	}

	// The wrapper finds its programs whatever PATH the script gets.
	mount, _ := exec.LookPath("mount")
	mkdirProg, err := exec.LookPath("mkdir")
	if err != nil {
		t.Fatal(err)
	}
	// /etc/default/node-resized, in the namespace only, holds flags with a
	// word that a shell would expand as a glob.
	wrapper := mount + " -t tmpfs tmpfs /run && " + mkdirProg + " -p /run/systemd/system && " +
		mount + " -t tmpfs tmpfs /etc/default && " +
		`echo 'NODE_RESIZED_ARGS="--node-name w* --kubeconfig /etc/nr.conf"' >/etc/default/node-resized && exec /bin/sh "$@"`

	const reload, restart, stop = "--system daemon-reload", "try-restart node-resized.service", "stop node-resized.service"
	const rpmReload, preset, disable = "daemon-reload", "--no-reload preset node-resized.service", "--no-reload disable --now node-resized.service"
	const uninstall = "node-resized --log-level warn --node-name w* --kubeconfig /etc/nr.conf --uninstall"
	// deb-systemd-helper's calls, which it makes with or without systemd.
	const dshInstalled, dshState = "deb-systemd-helper debian-installed node-resized.service", "deb-systemd-helper update-state node-resized.service"
	const dshMask = "deb-systemd-helper mask node-resized.service"
	for _, c := range []struct {
		script string
		args   []string
		env    []string // added to the environment
		want   []string // systemctl's arguments, one call each
	}{
		{"deb/postinst", []string{"configure", ""}, nil, []string{dshInstalled, dshState, reload}},
		{"deb/postinst", []string{"configure", "1.2.2"}, nil, []string{dshInstalled, dshState, reload, restart}},
		{"deb/postinst", []string{"abort-upgrade", "1.2.4"}, nil, []string{dshInstalled, dshState, reload}},
		{"deb/postinst", []string{"configure", "1.2.2"}, []string{"SYSTEMCTL_EXIT=1"}, []string{dshInstalled, dshState, reload, restart}},
		// Installed into another root: the running systemd is not its own,
		// deb-systemd-helper works in the root (DPKG_ROOT).
		{"deb/postinst", []string{"configure", ""}, []string{"DPKG_ROOT=/srv/root"}, []string{dshInstalled, dshState}},
		// No systemctl and no init-system-helpers at all.
		{"deb/postinst", []string{"configure", ""}, []string{"PATH=/nonexistent"}, nil},
		{"deb/prerm", []string{"remove"}, nil, []string{stop, uninstall}},
		// An uninstall that fails does not stop the removal.
		{"deb/prerm", []string{"remove"}, []string{"UNINSTALL_EXIT=1"}, []string{stop, uninstall}},
		{"deb/prerm", []string{"remove"}, []string{"DPKG_ROOT=/srv/root"}, nil},
		{"deb/prerm", []string{"upgrade", "1.2.4"}, nil, nil},
		{"deb/prerm", []string{"failed-upgrade", "1.2.4"}, nil, nil},
		{"deb/prerm", []string{"remove"}, []string{"PATH=/nonexistent"}, nil},
		// postrm checks /usr/bin/deb-systemd-helper itself, as debhelper's
		// does.
		{"deb/postrm", []string{"remove"}, nil, []string{dshMask, reload}},
		{"deb/postrm", []string{"upgrade", "1.2.4"}, nil, nil},
		{"rpm/post", []string{"1"}, nil, []string{preset, rpmReload}},
		{"rpm/post", []string{"2"}, nil, []string{rpmReload, restart}},
		{"rpm/post", []string{"2"}, []string{"SYSTEMCTL_EXIT=1"}, []string{rpmReload, restart}},
		{"rpm/post", []string{"1"}, []string{"PATH=/nonexistent"}, nil},
		{"rpm/preun", []string{"0"}, nil, []string{disable, uninstall}},
		{"rpm/preun", []string{"0"}, []string{"UNINSTALL_EXIT=1"}, []string{disable, uninstall}},
		{"rpm/preun", []string{"1"}, nil, nil},
		{"rpm/postun", []string{"0"}, nil, []string{rpmReload}},
		{"rpm/postun", []string{"1"}, nil, nil},
	} {
		name := c.script + " " + strings.Join(c.args, " ") + " " + strings.Join(c.env, " ")
		if err := os.WriteFile(calls, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "DPKG_ROOT=") })
		env = append(env, "PATH="+bin+":"+os.Getenv("PATH"), "SYSTEMCTL_CALLS="+calls)
		env = append(env, c.env...) // the last PATH wins
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "/bin/sh", "-c", wrapper, "sh",
			filepath.Join(p.root, "packaging/scripts", c.script)}, c.args...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, out)
			continue
		}
		b, err := os.ReadFile(calls)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: systemctl %q, want %q", name, got, c.want)
		}
		for _, call := range got {
			if f := strings.Fields(call); f[0] != "deb-systemd-helper" && (slices.Contains(f, "enable") || slices.Contains(f, "start")) {
				t.Errorf("%s: systemctl %s: the package must not enable or start the service", name, call)
			}
		}
	}
}
