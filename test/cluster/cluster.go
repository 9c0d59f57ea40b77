package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Identities the control plane knows, from its static token file.
const (
	// AdminUser is the admin identity, in group system:masters.
	AdminUser = "node-resized-test-admin"
	// SchedulerUser is kube-scheduler's identity, bound by the API server's
	// bootstrap RBAC policy.
	SchedulerUser = "system:kube-scheduler"
	// NodeUserPrefix + node name is a node identity, in group NodesGroup, so
	// that the Node authorizer and the NodeRestriction admission plugin
	// apply to it as they do to a kubelet.
	NodeUserPrefix = "system:node:"
	// NodesGroup is the group of every node identity.
	NodesGroup = "system:nodes"
)

// defaultReadyTimeout bounds the wait for each component when
// Options.ReadyTimeout is zero.
const defaultReadyTimeout = 2 * time.Minute

// Options configures [Start]. The zero value is usable.
type Options struct {
	// BinDir holds the etcd, kube-apiserver and kube-scheduler binaries;
	// "" means [DefaultBinDir].
	BinDir string
	// SkipBuild makes Start use the binaries in BinDir as they are instead
	// of running [Build] first (which is quick when they are up to date).
	SkipBuild bool
	// Dir is the cluster's working directory: etcd data, keys, certificates,
	// kubeconfigs and logs. "" creates a temporary directory, which Stop
	// removes unless KeepDir is set or Start failed.
	Dir string
	// KeepDir keeps a temporary Dir after Stop, for its logs.
	KeepDir bool
	// Nodes are the node names that get a node identity
	// (system:node:<name> in group system:nodes); see
	// [Cluster.NodeKubeconfig]. The token file is read once at API server
	// start, so the list is fixed for the cluster's life.
	Nodes []string
	// ReadyTimeout bounds the wait for each component to become ready;
	// 0 means 2 minutes. The context given to Start bounds it too.
	ReadyTimeout time.Duration
	// APIServerArgs are appended to kube-apiserver's command line (a later
	// flag overrides an earlier one).
	APIServerArgs []string
	// SchedulerArgs are appended to kube-scheduler's command line.
	SchedulerArgs []string
	// Controllers, when set, starts kube-controller-manager with only
	// these controllers (its --controllers), e.g. "daemonset" to run a
	// DaemonSet's pods and "root-ca-cert-publisher" for the
	// kube-root-ca.crt ConfigMap that every pod's service account token
	// volume mounts. Empty: no controller manager, as most tests need
	// none (the "default" ServiceAccount is created by Start).
	Controllers []string
	// Logf receives a line for each start-up step; nil discards them.
	Logf func(format string, args ...any)
}

// Cluster is a running control plane: etcd, kube-apiserver,
// kube-scheduler and, with Options.Controllers, kube-controller-manager as
// child processes on loopback. Its methods are safe for
// concurrent use.
type Cluster struct {
	opts      Options
	dir       string
	removeDir bool
	binDir    string
	logf      func(format string, args ...any)

	etcdURL        string
	apiPort        int
	schedulerPort  int
	kcmPort        int
	apiserverArgs  []string
	schedulerArgs  []string
	kcmArgs        []string
	caData         []byte // kube-apiserver's self-signed serving certificate bundle; set once by Start
	adminToken     string
	schedulerToken string
	nodeTokens     map[string]string

	// lifetime ends every child; cancelled by Stop.
	lifetime context.Context
	cancel   context.CancelFunc

	// mu guards the fields below and is held for the whole of Stop,
	// StopAPIServer and StartAPIServer, so those never interleave.
	mu        sync.Mutex
	etcd      *process
	apiserver *process
	scheduler *process
	kcm       *process // kube-controller-manager
	stopped   bool
	stopErr   error
}

// Start builds the binaries if needed (see [Options.SkipBuild]) and starts
// etcd, kube-apiserver (token authentication, Node and RBAC authorization,
// NodeRestriction admission, service account signing, a self-signed serving
// certificate) and kube-scheduler on free loopback ports. It returns when
// the API server answers /readyz, its system namespaces and the "default"
// ServiceAccount exist, and the scheduler answers its health check. On
// failure everything started is stopped and the error names the log file
// of the component that failed, with its last lines.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	c := &Cluster{opts: opts, logf: opts.Logf, nodeTokens: map[string]string{}}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if opts.ReadyTimeout <= 0 {
		c.opts.ReadyTimeout = defaultReadyTimeout
	}

	c.binDir = opts.BinDir
	if c.binDir == "" {
		if c.binDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	}
	if opts.SkipBuild {
		if err := checkBinaries(c.binDir); err != nil {
			return nil, err
		}
	} else {
		t0 := time.Now()
		c.logf("cluster: building control-plane binaries in %s (minutes on a cold build cache)", c.binDir)
		if err := Build(ctx, c.binDir); err != nil {
			return nil, err
		}
		c.logf("cluster: binaries ready after %v", time.Since(t0).Round(time.Millisecond))
	}

	c.dir = opts.Dir
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "node-resized-cluster-"); err != nil {
			return nil, fmt.Errorf("cluster: creating working directory: %w", err)
		}
		c.removeDir = !opts.KeepDir
	} else if c.dir, err = filepath.Abs(c.dir); err != nil {
		return nil, fmt.Errorf("cluster: working directory: %w", err)
	}
	for _, d := range []string{"etcd", "pki/apiserver", "pki/kube-scheduler", "pki/kube-controller-manager", "logs", "kubeconfig"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("cluster: creating %s: %w", d, err)
		}
	}

	c.lifetime, c.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			c.removeDir = false // keep the logs the error points at
			c.Stop()
		}
	}()

	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.apiPort, c.schedulerPort, c.kcmPort = ports[2], ports[3], ports[4]

	if err := c.writeIdentities(); err != nil {
		return nil, err
	}

	// etcd
	t0 := time.Now()
	etcdArgs := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + c.etcdURL,
		"--advertise-client-urls=" + c.etcdURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=default=" + etcdPeerURL,
		"--unsafe-no-fsync=true", // test data; etcd is never killed while the data matters
		"--log-level=warn",
	}
	c.mu.Lock()
	c.etcd, err = startProcess(c.lifetime, "etcd", filepath.Join(c.binDir, "etcd"), etcdArgs, c.LogPath("etcd"))
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, c.etcd, c.etcdURL+"/health", &http.Client{Timeout: 2 * time.Second}, nil); err != nil {
		return nil, err
	}
	c.logf("cluster: etcd ready at %s after %v", c.etcdURL, time.Since(t0).Round(time.Millisecond))

	// kube-apiserver
	pki := filepath.Join(c.dir, "pki")
	c.apiserverArgs = append([]string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--cert-dir=" + filepath.Join(pki, "apiserver"),
		"--token-auth-file=" + filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// No node lifecycle controller runs here to lift the not-ready taint.
		"--disable-admission-plugins=TaintNodesByCondition",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// A loopback address is not a valid endpoint for the kubernetes Service.
		"--endpoint-reconciler-type=none",
		// Close watches on SIGTERM; otherwise the scheduler's watches hold
		// the shutdown for --request-timeout (1 min).
		"--shutdown-watch-termination-grace-period=5s",
		"--v=1",
	}, opts.APIServerArgs...)
	c.mu.Lock()
	err = c.runAPIServer(ctx)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := c.writeKubeconfigs(); err != nil {
		return nil, err
	}
	if err := c.bootstrap(ctx); err != nil {
		return nil, err
	}

	// kube-scheduler
	schedKubeconfig := filepath.Join(c.dir, "kubeconfig", "kube-scheduler.kubeconfig")
	c.schedulerArgs = append([]string{
		"--kubeconfig=" + schedKubeconfig,
		"--authentication-kubeconfig=" + schedKubeconfig,
		"--authorization-kubeconfig=" + schedKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.schedulerPort),
		"--cert-dir=" + filepath.Join(pki, "kube-scheduler"),
		"--v=2",
	}, opts.SchedulerArgs...)
	c.mu.Lock()
	err = c.runScheduler(ctx)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}

	// kube-controller-manager, with the controllers asked for. It acts as
	// the admin: without --use-service-account-credentials each controller
	// uses its own client identity, and the admin's needs no RBAC set-up.
	if len(opts.Controllers) > 0 {
		c.kcmArgs = []string{
			"--kubeconfig=" + c.AdminKubeconfig(),
			"--authentication-kubeconfig=" + c.AdminKubeconfig(),
			"--authorization-kubeconfig=" + c.AdminKubeconfig(),
			"--controllers=" + strings.Join(opts.Controllers, ","),
			// What the root-ca-cert-publisher puts into every namespace's
			// kube-root-ca.crt: the bundle that verifies the API server.
			"--root-ca-file=" + filepath.Join(pki, "apiserver", "apiserver.crt"),
			"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.kcmPort),
			"--cert-dir=" + filepath.Join(pki, "kube-controller-manager"),
			"--v=2",
		}
		c.mu.Lock()
		err = c.runControllerManager(ctx)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	c.logf("cluster: up in %s; admin kubeconfig %s", c.dir, c.AdminKubeconfig())
	return c, nil
}

// writeIdentities writes the service account keys and the token file.
func (c *Cluster) writeIdentities() error {
	pki := filepath.Join(c.dir, "pki")
	if err := writeServiceAccountKeys(filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")); err != nil {
		return err
	}
	var err error
	if c.adminToken, err = newToken(); err != nil {
		return err
	}
	if c.schedulerToken, err = newToken(); err != nil {
		return err
	}
	ids := []identity{
		{token: c.adminToken, user: AdminUser, uid: "uid-admin", groups: []string{"system:masters"}},
		{token: c.schedulerToken, user: SchedulerUser, uid: "uid-kube-scheduler"},
	}
	for _, n := range c.opts.Nodes {
		if n == "" {
			return errors.New("cluster: empty node name in Options.Nodes")
		}
		if _, dup := c.nodeTokens[n]; dup {
			continue
		}
		tok, err := newToken()
		if err != nil {
			return err
		}
		c.nodeTokens[n] = tok
		ids = append(ids, identity{token: tok, user: NodeUserPrefix + n, uid: "uid-node-" + n, groups: []string{NodesGroup}})
	}
	return writeTokenFile(filepath.Join(pki, "tokens.csv"), ids)
}

// runAPIServer starts kube-apiserver with c.apiserverArgs and waits for
// /readyz, trusting the serving certificate it generated in its cert
// directory (kept across restarts). The first time, it records that
// certificate as the CA for the kubeconfigs. c.mu must be held.
func (c *Cluster) runAPIServer(ctx context.Context) error {
	t0 := time.Now()
	p, err := startProcess(c.lifetime, "kube-apiserver", filepath.Join(c.binDir, "kube-apiserver"), c.apiserverArgs, c.LogPath("kube-apiserver"))
	if err != nil {
		return err
	}
	c.apiserver = p

	certFile := filepath.Join(c.dir, "pki", "apiserver", "apiserver.crt")
	var client *http.Client
	getClient := func() *http.Client {
		if client != nil {
			return client
		}
		ca, err := os.ReadFile(certFile)
		if err != nil {
			return nil // not written yet
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil // partly written
		}
		if c.caData == nil {
			c.caData = ca // only during Start, before anyone else sees c
		}
		client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		return client
	}
	hdr := http.Header{"Authorization": {"Bearer " + c.adminToken}}
	if err := c.waitHTTPFunc(ctx, p, c.APIServerURL()+"/readyz", getClient, hdr); err != nil {
		return err
	}
	c.logf("cluster: kube-apiserver ready at %s after %v", c.APIServerURL(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// runScheduler starts kube-scheduler with c.schedulerArgs and waits for
// its health check. c.mu must be held.
func (c *Cluster) runScheduler(ctx context.Context) error {
	t0 := time.Now()
	p, err := startProcess(c.lifetime, "kube-scheduler", filepath.Join(c.binDir, "kube-scheduler"), c.schedulerArgs, c.LogPath("kube-scheduler"))
	if err != nil {
		return err
	}
	c.scheduler = p
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// The scheduler's own self-signed certificate, on loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	schedURL := fmt.Sprintf("https://127.0.0.1:%d/healthz", c.schedulerPort)
	if err := c.waitHTTP(ctx, p, schedURL, insecure, nil); err != nil {
		return err
	}
	c.logf("cluster: kube-scheduler healthy after %v", time.Since(t0).Round(time.Millisecond))
	return nil
}

// runControllerManager starts kube-controller-manager with c.kcmArgs and
// waits for its health check. c.mu must be held.
func (c *Cluster) runControllerManager(ctx context.Context) error {
	t0 := time.Now()
	p, err := startProcess(c.lifetime, "kube-controller-manager", filepath.Join(c.binDir, "kube-controller-manager"), c.kcmArgs, c.LogPath("kube-controller-manager"))
	if err != nil {
		return err
	}
	c.kcm = p
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Its own self-signed certificate, on loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	if err := c.waitHTTP(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.kcmPort), insecure, nil); err != nil {
		return err
	}
	c.logf("cluster: kube-controller-manager (%s) healthy after %v", strings.Join(c.opts.Controllers, ", "), time.Since(t0).Round(time.Millisecond))
	return nil
}

// bootstrap waits for the namespaces the API server creates itself and
// creates the "default" ServiceAccount, which kube-controller-manager
// would otherwise create (pods cannot be admitted without it).
func (c *Cluster) bootstrap(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return fmt.Errorf("cluster: admin client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, corev1.NamespaceNodeLease} {
		for {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsNotFound(err) || ctx.Err() != nil {
				return fmt.Errorf("cluster: waiting for namespace %s: %w", ns, err)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("cluster: waiting for namespace %s: %w", ns, err)
			}
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: metav1.NamespaceDefault}}
	if _, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster: creating ServiceAccount default/default: %w", err)
	}
	return nil
}

// waitHTTP polls url with client until it answers 200, p exits, or the
// ready timeout or ctx ends.
func (c *Cluster) waitHTTP(ctx context.Context, p *process, url string, client *http.Client, hdr http.Header) error {
	return c.waitHTTPFunc(ctx, p, url, func() *http.Client { return client }, hdr)
}

func (c *Cluster) waitHTTPFunc(ctx context.Context, p *process, url string, client func() *http.Client, hdr http.Header) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	last := errors.New("not polled yet")
	for {
		if done, err := p.exited(); done {
			if err == nil {
				err = errors.New("exited with status 0")
			}
			return p.failure("ended before it was ready", err)
		}
		if cl := client(); cl != nil {
			last = getOK(ctx, cl, url, hdr)
			if last == nil {
				return nil
			}
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return p.failure("did not become ready at "+url, fmt.Errorf("%w; last answer: %v", err, last))
		}
	}
}

func getOK(ctx context.Context, cl *http.Client, url string, hdr http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// writeKubeconfigs writes the admin, scheduler and node kubeconfigs.
func (c *Cluster) writeKubeconfigs() error {
	if err := c.writeKubeconfig(c.AdminKubeconfig(), AdminUser, c.adminToken); err != nil {
		return err
	}
	if err := c.writeKubeconfig(filepath.Join(c.dir, "kubeconfig", "kube-scheduler.kubeconfig"), SchedulerUser, c.schedulerToken); err != nil {
		return err
	}
	for n, tok := range c.nodeTokens {
		if err := c.writeKubeconfig(c.nodeKubeconfigPath(n), NodeUserPrefix+n, tok); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["node-resized-test"] = &clientcmdapi.Cluster{Server: c.APIServerURL(), CertificateAuthorityData: c.caData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "node-resized-test", AuthInfo: user}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("cluster: writing kubeconfig %s: %w", path, err)
	}
	return nil
}

func (c *Cluster) nodeKubeconfigPath(node string) string {
	return filepath.Join(c.dir, "kubeconfig", "node-"+node+".kubeconfig")
}

// Dir returns the cluster's working directory.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the log file of a component: "etcd", "kube-apiserver",
// "kube-scheduler" or "kube-controller-manager".
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.dir, "logs", component+".log")
}

// APIServerURL returns the API server's base URL (https on 127.0.0.1). It
// stays the same across [Cluster.StopAPIServer] and
// [Cluster.StartAPIServer].
func (c *Cluster) APIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
}

// EtcdURL returns etcd's client URL.
func (c *Cluster) EtcdURL() string { return c.etcdURL }

// AdminKubeconfig returns the path of a kubeconfig for the admin identity
// (group system:masters).
func (c *Cluster) AdminKubeconfig() string {
	return filepath.Join(c.dir, "kubeconfig", "admin.kubeconfig")
}

// AdminConfig returns a new client configuration for the admin identity.
func (c *Cluster) AdminConfig() *rest.Config {
	return c.restConfig(c.adminToken)
}

// NodeKubeconfig returns the path of a kubeconfig for the node identity
// system:node:<nodeName> (group system:nodes), as a kubelet's, so the Node
// authorizer and NodeRestriction apply. nodeName must be in Options.Nodes.
func (c *Cluster) NodeKubeconfig(nodeName string) (string, error) {
	if _, ok := c.nodeTokens[nodeName]; !ok {
		return "", fmt.Errorf("cluster: no identity for node %q: list it in Options.Nodes (have %v)", nodeName, c.nodeNames())
	}
	return c.nodeKubeconfigPath(nodeName), nil
}

// NodeConfig returns a new client configuration for the node identity
// system:node:<nodeName>; see [Cluster.NodeKubeconfig].
func (c *Cluster) NodeConfig(nodeName string) (*rest.Config, error) {
	tok, ok := c.nodeTokens[nodeName]
	if !ok {
		return nil, fmt.Errorf("cluster: no identity for node %q: list it in Options.Nodes (have %v)", nodeName, c.nodeNames())
	}
	return c.restConfig(tok), nil
}

func (c *Cluster) nodeNames() []string {
	return slices.Sorted(maps.Keys(c.nodeTokens))
}

func (c *Cluster) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.APIServerURL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: slices.Clone(c.caData)},
		QPS:             50,
		Burst:           100,
	}
}

// Exited reports a component that has ended on its own (not through
// StopAPIServer or Stop), naming its log file; nil while all run.
func (c *Cluster) Exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster: stopped")
	}
	for _, p := range []*process{c.etcd, c.apiserver, c.scheduler, c.kcm} {
		if p == nil {
			continue
		}
		if done, err := p.exited(); done {
			if err == nil {
				err = errors.New("exited with status 0")
			}
			return p.failure("ended unexpectedly", err)
		}
	}
	return nil
}

// APIServerPID is the running kube-apiserver's process id (to read its
// CPU time), 0 while it is stopped.
func (c *Cluster) APIServerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil || c.apiserver.cmd.Process == nil {
		return 0
	}
	return c.apiserver.cmd.Process.Pid
}

// SchedulerPID is the running kube-scheduler's process id.
func (c *Cluster) SchedulerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scheduler == nil || c.scheduler.cmd.Process == nil {
		return 0
	}
	return c.scheduler.cmd.Process.Pid
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 20 s)
// and waits for it; etcd and the scheduler keep running. It is a no-op when
// the API server is not running.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver != nil {
		c.apiserver.Stop()
		c.apiserver = nil
		c.logf("cluster: kube-apiserver stopped")
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after [Cluster.StopAPIServer],
// on the same port, with the same etcd (so all objects survive), flags and
// serving certificate, and waits for /readyz; then it restarts
// kube-scheduler, whose watches would otherwise come back late, and waits
// for its health check.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
		return errors.New("cluster: StartAPIServer after Stop")
	case c.apiserver != nil:
		return errors.New("cluster: kube-apiserver is already running")
	}
	if err := c.runAPIServer(ctx); err != nil {
		c.apiserver.Stop()
		c.apiserver = nil
		return err
	}
	// The scheduler is started anew: through the outage its informers'
	// list-and-watch backed off (client-go doubles the delay up to 30 s,
	// with as much again in jitter), so it would see pods and Nodes only
	// up to a minute after the API server is back, and a test that runs
	// next would wait on the harness, not on what it tests.
	if c.scheduler != nil {
		c.scheduler.Stop()
		c.scheduler = nil
	}
	if err := c.runScheduler(ctx); err != nil {
		return err
	}
	// The controller manager likewise.
	if c.kcm != nil {
		c.kcm.Stop()
		c.kcm = nil
		return c.runControllerManager(ctx)
	}
	return nil
}

// Stop ends the controller manager, the scheduler, the API server and
// etcd, in that order, waits
// for each, and removes a temporary working directory (see
// Options.KeepDir). It is safe to call more than once; later calls return
// the first call's result.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	for _, p := range []*process{c.kcm, c.scheduler, c.apiserver, c.etcd} {
		if p != nil {
			p.Stop()
		}
	}
	c.kcm, c.scheduler, c.apiserver, c.etcd = nil, nil, nil, nil
	if c.cancel != nil {
		c.cancel()
	}
	if c.removeDir {
		if err := os.RemoveAll(c.dir); err != nil {
			c.stopErr = fmt.Errorf("cluster: removing %s: %w", c.dir, err)
		}
	}
	return c.stopErr
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
