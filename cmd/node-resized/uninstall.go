package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-resized/node-resized/agent"
	"github.com/node-resized/node-resized/api"
	"github.com/node-resized/node-resized/cgroup"
	"github.com/node-resized/node-resized/decide"
	"github.com/node-resized/node-resized/hotplug"
	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/kube"
	"github.com/node-resized/node-resized/kube/nrt"
	"github.com/node-resized/node-resized/kubelet/lifecycle"
	"github.com/node-resized/node-resized/systemd"
	"github.com/node-resized/node-resized/topology"
	"github.com/node-resized/node-resized/types"
)

// uninstaller undoes on this node what node-resized set (--uninstall). The
// work is each part's own; this only calls them in order and prints one
// line per item.
type uninstaller struct {
	o      *options
	log    *slog.Logger
	out    io.Writer
	failed []string // the items not undone

	// dropIn is the kubelet drop-in of a plain install (make install);
	// reload reloads systemd (nil: over D-Bus).
	dropIn string
	reload func(context.Context) error
}

// uninstall undoes, one item after the other, each one that can be done
// even when another failed: what a planned release took offline, the
// kubepods limits, the Node's condition and
// taint (its capacity is the kubelet's), its NodeResourceTopology object,
// an event, the state file. It
// refuses to run beside a running daemon, which would put back what it
// removes, and fails when any item could not be undone.
func uninstall(ctx context.Context, o *options, log *slog.Logger, out io.Writer) error {
	if api.Serving(o.socket) {
		return fmt.Errorf("--uninstall: node-resized is running (its socket %s answers) and would put back what this removes: stop it first (systemctl stop node-resized)", o.socket)
	}
	u := &uninstaller{o: o, log: log, out: out, dropIn: plainDropIn}
	// What a planned release took offline comes back first, so that the
	// kubepods limits below are the whole machine's.
	done, err := u.giveBackReleased(ctx)
	u.report("released hardware", done, err)
	done, err = u.restoreKubepods(ctx)
	u.report("kubepods", done, err)
	if !o.standalone {
		u.removeFromNode(ctx)
	}
	removed, err := agent.RemoveState(o.stateFile)
	u.report("state", either(removed, "removed "+o.stateFile, "no state file at "+o.stateFile), err)
	done, err = u.removeDropIn(ctx)
	u.report("kubelet drop-in", done, err)
	if len(u.failed) > 0 {
		return fmt.Errorf("--uninstall: %s not undone (see above); everything else was", strings.Join(u.failed, ", "))
	}
	return nil
}

// report prints one item's line.
func (u *uninstaller) report(item, done string, err error) {
	if err != nil {
		fmt.Fprintf(u.out, "%s: failed: %v\n", item, err)
		u.failed = append(u.failed, item)
		return
	}
	fmt.Fprintf(u.out, "%s: %s\n", item, done)
}

// giveBackReleased brings back online what a planned release took offline
// and the machine still has (the release's record beside the state file),
// and removes the record.
func (u *uninstaller) giveBackReleased(ctx context.Context) (string, error) {
	o := u.o
	path := filepath.Join(filepath.Dir(o.stateFile), hotplug.RecordFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "none released (no " + path + ")", nil
	}
	fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
	if err != nil {
		return "", err
	}
	w := hotplug.NewWriter(o.sysfsRoot, hotplug.Config{BlockTimeout: o.offlineTimeout, CPUTimeout: o.offlineTimeout})
	r, err := hotplug.NewReleaser(hotplug.ReleaserConfig{FS: fsys, Writer: w, RecordPath: path, Logger: u.log})
	if err != nil {
		return "", fmt.Errorf("the release record: %w", err)
	}
	named, short, err := r.GiveBackAll(ctx)
	switch {
	case err != nil:
		return "", err
	case short != "":
		return "", fmt.Errorf("not brought back online: %s (%s keeps what is left)", short, path)
	case named.IsEmpty():
		return "none released; removed " + path, nil
	}
	var what []string
	if len(named.CPUs) > 0 {
		what = append(what, "cpus "+named.CPUs.String())
	}
	if len(named.Blocks) > 0 {
		what = append(what, fmt.Sprintf("%d memory blocks", len(named.Blocks)))
	}
	return "the planned release's record named " + strings.Join(what, " and ") +
		": what the machine still has of them is online again, and the kubelet publishes it once restarted (systemctl restart kubelet); removed " + path, nil
}

// restoreKubepods sets the kubepods limits to what the kubelet writes for
// the machine as it is now.
func (u *uninstaller) restoreKubepods(ctx context.Context) (string, error) {
	o := u.o
	if !o.enforce {
		return "left as they are (--enforce=false: node-resized wrote no limits)", nil
	}
	kcfg, err := loadKubeletConfig(o, u.log)
	if err != nil {
		return "", err
	}
	e, err := newEnforcer(o, kcfg, u.log, nil)
	if err != nil {
		return "", err
	}
	if e == nil {
		return "left as they are (the kubelet runs without cgroupsPerQOS: there is no kubepods cgroup)", nil
	}
	fsys, err := topology.NewFS(o.sysfsRoot, o.procfsRoot)
	if err != nil {
		return "", err
	}
	snap, err := fsys.Snapshot()
	if err != nil {
		return "", fmt.Errorf("read the machine: %w", err)
	}
	capac := snap.Capacity()
	ch, err := e.Restore(ctx, decide.KubepodsLimits(capac, kcfg.Reservations), snap.CPUs.Online)
	if err != nil {
		return "", err
	}
	machine := "what the kubelet writes for the machine as it is (" + capac.Published().String() + ")"
	switch ch.Result {
	case cgroup.ResultSkipped:
		return "left as they are: " + ch.Reason, nil
	case cgroup.ResultUnchanged:
		return "already " + machine, nil
	}
	return "set to " + machine + ": " + ch.Summary(), nil
}

// removeFromNode takes node-resized's condition and taint off the Node
// and records an event saying so.
func (u *uninstaller) removeFromNode(ctx context.Context) {
	o := u.o
	relay, err := kube.Connect(kube.Options{
		Kubeconfig: o.kubeconfig, NodeName: o.nodeName, QPS: float32(o.kubeAPIQPS), Burst: o.kubeAPIBurst, Logger: u.log,
	})
	if err != nil {
		u.report("node", "", fmt.Errorf("%w; its condition and any taint stay on the Node", err))
		return
	}
	node := "Node " + o.nodeName
	removed, err := relay.RemoveCondition(ctx)
	u.report("condition", either(removed, "removed "+types.ConditionType+" from "+node,
		node+" has no "+types.ConditionType+" condition"), err)
	removed, err = relay.RemoveTaint(ctx)
	u.report("taint", either(removed, "removed "+types.TaintKey+":NoSchedule from "+node,
		node+" does not carry "+types.TaintKey), err)
	u.removeTopology(ctx, relay)
	u.report("capacity", "left to the kubelet, which writes its own view of the machine over the Node's capacity and "+
		"allocatable at its next status update (nodeStatusUpdateFrequency, 10s by default)", nil)

	msg := "node-resized was uninstalled from this node: the kubepods limits are the kubelet's for the machine as it is, and its condition is removed"
	if len(u.failed) > 0 {
		msg = "node-resized was uninstalled from this node; not undone: " + strings.Join(u.failed, ", ")
	}
	// The event only tells: not recording it leaves nothing behind.
	if err := relay.RecordRemoval(ctx, msg); err != nil {
		fmt.Fprintf(u.out, "event: not recorded (this leaves nothing behind): %v\n", err)
		return
	}
	fmt.Fprintf(u.out, "event: recorded Normal %s on %s\n", kube.ReasonRemoved, node)
}

// removeTopology deletes the Node's NodeResourceTopology object. An
// identity that may not delete it fails the item only when
// --publish-topology says node-resized wrote it.
func (u *uninstaller) removeTopology(ctx context.Context, relay *kube.Relay) {
	name := "NodeResourceTopology " + u.o.nodeName
	removed, err := nrt.Delete(ctx, relay.Client(), u.o.nodeName)
	if err != nil && apierrors.IsForbidden(err) && !u.o.publishTopology {
		u.report("topology", "not deleted: this identity may not delete "+name+", and --publish-topology was not given", nil)
		return
	}
	u.report("topology", either(removed, "deleted "+name, "there is no "+name), err)
}

func either(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// plainDropIn is where make install puts the kubelet's pre-start drop-in;
// the packages' is packagedDropIn, which their package manager removes.
const (
	plainDropIn    = "/etc/systemd/system/kubelet.service.d/" + lifecycle.PrestartDropIn
	packagedDropIn = "/usr/lib/systemd/system/kubelet.service.d/" + lifecycle.PrestartDropIn
)

// removeDropIn removes the pre-start drop-in of a plain install, when it
// is node-resized's (an operator's mask of the packaged one, a link to
// /dev/null, is not), and reloads systemd, so that the kubelet's next start
// runs no pre-start.
func (u *uninstaller) removeDropIn(ctx context.Context) (string, error) {
	b, err := capped.ReadFile(u.dropIn, 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return "no drop-in at " + u.dropIn + " (a package's, " + packagedDropIn + ", goes with the package)", nil
	}
	if err != nil {
		return "", err
	}
	if !bytes.Contains(b, []byte("node-resized kubelet-prestart")) {
		return "left " + u.dropIn + " as it is: it does not run node-resized kubelet-prestart", nil
	}
	if err := os.Remove(u.dropIn); err != nil {
		return "", err
	}
	reload := u.reload
	if reload == nil {
		reload = func(ctx context.Context) error {
			sd := systemd.NewClient()
			defer sd.Close()
			return sd.Reload(ctx)
		}
	}
	if err := reload(ctx); err != nil {
		return "", fmt.Errorf("removed %s, but systemd was not reloaded (systemctl daemon-reload does it): %w", u.dropIn, err)
	}
	return "removed " + u.dropIn + " and reloaded systemd", nil
}
