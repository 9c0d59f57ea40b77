// Package cluster runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-scheduler and, when a test names controllers, kube-controller-manager,
// built from the Go module proxy) on loopback for tests,
// together with a stand-in kubelet that registers a Node and rewrites its
// status as the real kubelet does.
//
// Its one job is to give node-resized's tests the API server, scheduler and
// kubelet behaviour they must cope with, without a container runtime, Docker
// or prebuilt binaries.
//
// The control plane:
//
//	c, err := cluster.Start(ctx, cluster.Options{Nodes: []string{"node-1"}})
//	defer c.Stop()
//	kubeconfig := c.AdminKubeconfig()
//	nodeKubeconfig, err := c.NodeKubeconfig("node-1") // system:node:node-1
//
// Start builds the four binaries first when they are missing or stale
// (see [Build] and [DefaultBinDir]); the first build takes minutes, later
// ones seconds. The child processes run in their own process groups, are
// killed with the test process (Linux parent-death signal) and log to files
// under [Cluster.Dir]/logs.
//
// What is deliberately absent: kube-controller-manager (so no node lifecycle
// controller: a Node is never marked NotReady when its kubelet stops, and the
// TaintNodesByCondition admission plugin is disabled because nothing would
// ever lift its not-ready taint; the "default" ServiceAccount is created by
// Start), and any container runtime (pods bound to a Node stay Pending).
//
// Running the tests, from the test module (test/):
//
//	go test ./cluster/                   # ~35 s once the binaries are built
//	cluster/up -build-only               # build or refresh the binaries only
//
// TestMain builds the binaries before any test runs and fails (never skips)
// when they cannot be built. A cold build takes 8 to 25 minutes on two
// cores; the go command's -timeout does not count it, but its own kill
// timer (-timeout plus one minute) does, so run "cluster/up -build-only" or
// pass -timeout 40m the first time.
//
// [StandInKubelet] plays the kubelet's part towards the API server only. It
// says so in its log lines and in the Node annotation
// [StandInKubeletAnnotation].
package cluster
