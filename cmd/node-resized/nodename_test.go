package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/node-resized/node-resized/kube"
)

// kubeletKubeconfig writes a kubeconfig laid out as kubeadm writes the
// kubelet's: user default-auth, its client certificate in a separate
// .pem (a real certificate for the common name cn, then its key).
func kubeletKubeconfig(t *testing.T, cn string) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pemPath := filepath.Join(dir, "kubelet-client-current.pem")
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	if err := os.WriteFile(pemPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: default-cluster
  cluster:
    server: https://10.0.0.1:6443
contexts:
- name: default-context
  context:
    cluster: default-cluster
    user: default-auth
current-context: default-context
users:
- name: default-auth
  user:
    client-certificate: %[1]s
    client-key: %[1]s
`, pemPath)
	path := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The node name comes from --node-name, then $NODE_NAME, then the
// kubeconfig's node identity, then the hostname lower-cased; each step is
// taken only when the ones before it give nothing.
func TestResolveNodeName(t *testing.T) {
	nodeConf := kubeletKubeconfig(t, "system:node:Worker-7.example")
	otherConf := kubeletKubeconfig(t, "node-resized") // a dedicated identity, not a node
	for _, tc := range []struct {
		name       string
		args       []string
		env        string
		kubeconfig string // "" : a file that does not exist
		hostname   string
		hostErr    error
		want       string
		source     string
		skipped    bool // the kubeconfig was read and named no node
		err        bool
	}{
		{name: "flag first", args: []string{"--node-name", "from-flag"}, env: "from-env", kubeconfig: nodeConf, hostname: "HOST",
			want: "from-flag", source: "flag"},
		{name: "then $NODE_NAME", env: "from-env", kubeconfig: nodeConf, hostname: "HOST",
			want: "from-env", source: "env"},
		{name: "then the kubeconfig's client certificate", kubeconfig: nodeConf, hostname: "HOST",
			want: "Worker-7.example", source: "kubeconfig client certificate"},
		{name: "then the hostname, lower-cased, when the kubeconfig is not a node's", kubeconfig: otherConf, hostname: "Host-1",
			want: "host-1", source: "hostname", skipped: true},
		{name: "then the hostname, when there is no kubeconfig", hostname: "Host-1",
			want: "host-1", source: "hostname", skipped: true},
		{name: "standalone does not read the kubeconfig", args: []string{"--standalone"}, kubeconfig: nodeConf, hostname: "Host-1",
			want: "host-1", source: "hostname"},
		{name: "nothing at all", kubeconfig: otherConf, hostErr: errors.New("no uts"), err: true},
		{name: "nothing at all, standalone", args: []string{"--standalone"}, hostErr: errors.New("no uts"), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := tc.kubeconfig
			if conf == "" {
				conf = filepath.Join(t.TempDir(), "absent.conf")
			}
			o, err := parseFlags(append([]string{"--kubeconfig", conf}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = o.resolveNodeName(nodeNameLookup{
				getenv: func(k string) string {
					if k == "NODE_NAME" {
						return tc.env
					}
					return ""
				},
				hostname: func() (string, error) { return tc.hostname, tc.hostErr },
				identity: kube.NodeIdentity,
			})
			if tc.err {
				if err == nil {
					t.Fatalf("resolved %q from %s, want an error", o.nodeName, o.nodeNameSource)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.nodeName != tc.want || o.nodeNameSource != tc.source {
				t.Errorf("node name %q from %q, want %q from %q", o.nodeName, o.nodeNameSource, tc.want, tc.source)
			}
			if (o.nodeNameSkipped != nil) != tc.skipped {
				t.Errorf("kubeconfig skipped: %v, want skipped %v", o.nodeNameSkipped, tc.skipped)
			}
		})
	}
}
