// Command cluster-up runs the test control plane of package
// github.com/node-resized/node-resized/test/cluster (etcd, kube-apiserver and
// kube-scheduler on loopback) in the foreground until interrupted, for
// trying node-resized by hand. test/cluster/up builds and runs it;
// test/cluster/down stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-resized/node-resized/test/cluster"
)

type options struct {
	binDir    string
	dir       string
	stateFile string
	nodes     []string
	buildOnly bool
	skipBuild bool
	kubelets  bool
	cpu       string
	memory    string
}

func main() {
	var o options
	var nodes string
	flag.StringVar(&o.binDir, "bin-dir", "", "directory of the control-plane binaries (default $"+cluster.EnvBinDir+" or ~/.cache/node-resized/cluster/bin)")
	flag.StringVar(&o.dir, "dir", "", "working directory for data, kubeconfigs and logs (default a new temporary directory, removed at exit)")
	flag.StringVar(&o.stateFile, "state-file", "", "where to record the running control plane for test/cluster/down (default <bin-dir>/../up.state)")
	flag.StringVar(&nodes, "nodes", "node-1", "comma-separated node names that get a node identity (system:node:<name>)")
	flag.BoolVar(&o.buildOnly, "build-only", false, "build the binaries and exit")
	flag.BoolVar(&o.skipBuild, "skip-build", false, "use the binaries as they are")
	flag.BoolVar(&o.kubelets, "stand-in-kubelets", false, "also register each node with a stand-in kubelet (not a kubelet: no pods run)")
	flag.StringVar(&o.cpu, "cpu", "2", "stand-in kubelets' boot-time cpu capacity")
	flag.StringVar(&o.memory, "memory", "4Gi", "stand-in kubelets' boot-time memory capacity")
	flag.Parse()
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.nodes = append(o.nodes, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.binDir == "" {
		d, err := cluster.DefaultBinDir()
		if err != nil {
			return err
		}
		o.binDir = d
	}
	if o.buildOnly {
		t0 := time.Now()
		if err := cluster.Build(ctx, o.binDir); err != nil {
			return err
		}
		fmt.Printf("built %s in %s (%v)\n", strings.Join(cluster.Binaries, ", "), o.binDir, time.Since(t0).Round(time.Second))
		return nil
	}
	if o.stateFile == "" {
		o.stateFile = filepath.Join(filepath.Dir(o.binDir), "up.state")
	}
	if pid, ok := runningPID(o.stateFile); ok {
		return fmt.Errorf("a control plane is already running (pid %d, state %s); stop it with test/cluster/down", pid, o.stateFile)
	}

	c, err := cluster.Start(ctx, cluster.Options{
		BinDir:    o.binDir,
		SkipBuild: o.skipBuild,
		Dir:       o.dir,
		Nodes:     o.nodes,
		Logf:      log.Printf,
	})
	if err != nil {
		return err
	}
	defer c.Stop()

	if o.kubelets {
		machine := cluster.MachineView{Capacity: corev1.ResourceList{}}
		for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: o.cpu, corev1.ResourceMemory: o.memory, corev1.ResourceEphemeralStorage: "100Gi"} {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return fmt.Errorf("-%s: %w", name, err)
			}
			machine.Capacity[name] = q
		}
		for _, n := range o.nodes {
			kc, err := c.NodeKubeconfig(n)
			if err != nil {
				return err
			}
			k, err := cluster.StartStandInKubelet(ctx, cluster.KubeletOptions{NodeName: n, Kubeconfig: kc, Machine: machine, Logf: log.Printf})
			if err != nil {
				return err
			}
			defer k.Stop()
		}
	}

	state := []string{
		"pid=" + strconv.Itoa(os.Getpid()),
		"dir=" + c.Dir(),
		"server=" + c.APIServerURL(),
		"kubeconfig=" + c.AdminKubeconfig(),
	}
	fmt.Println()
	fmt.Printf("Control plane running (etcd, kube-apiserver, kube-scheduler); logs in %s\n", filepath.Join(c.Dir(), "logs"))
	fmt.Printf("  admin kubeconfig: %s\n", c.AdminKubeconfig())
	fmt.Printf("  export KUBECONFIG=%s\n", c.AdminKubeconfig())
	for _, n := range o.nodes {
		kc, err := c.NodeKubeconfig(n)
		if err != nil {
			return err
		}
		fmt.Printf("  node %s kubeconfig (system:node:%s): %s\n", n, n, kc)
		state = append(state, "node-kubeconfig-"+n+"="+kc)
	}
	if err := os.MkdirAll(filepath.Dir(o.stateFile), 0o755); err != nil {
		return fmt.Errorf("writing state file: %w", err)
	}
	if err := os.WriteFile(o.stateFile, []byte(strings.Join(state, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing state file: %w", err)
	}
	defer os.Remove(o.stateFile)
	fmt.Printf("Stop it with Ctrl-C here, or test/cluster/down (state in %s).\n", o.stateFile)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Print("stopping the control plane")
			return nil
		case <-tick.C:
			if err := c.Exited(); err != nil {
				return err
			}
		}
	}
}

// runningPID returns the pid recorded in a state file when that process
// still runs.
func runningPID(stateFile string) (int, bool) {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "pid="); ok {
			pid, err := strconv.Atoi(v)
			if err != nil || pid <= 0 {
				return 0, false
			}
			err = syscall.Kill(pid, 0)
			return pid, err == nil || errors.Is(err, syscall.EPERM)
		}
	}
	return 0, false
}
