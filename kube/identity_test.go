package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clientCertPEM is a real self-signed client certificate for the common
// name cn, followed by its key, as the kubelet keeps
// kubelet-client-current.pem.
func clientCertPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
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
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// writeKubeconfig writes a kubeconfig whose current context uses user
// with the given credentials, and returns its path.
func writeKubeconfig(t *testing.T, dir, user string, auth *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: user}
	cfg.CurrentContext = "ctx"
	path := filepath.Join(dir, "kubelet.conf")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNodeIdentity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kubeconf func(t *testing.T, dir string) string
		want     string
		how      string
		notNode  bool // ErrNoNodeIdentity
	}{{
		name: "the kubelet's: a relative path to its client .pem, user default-auth",
		kubeconf: func(t *testing.T, dir string) string {
			os.MkdirAll(filepath.Join(dir, "pki"), 0o755)
			os.WriteFile(filepath.Join(dir, "pki", "kubelet-client-current.pem"), clientCertPEM(t, "system:node:worker-7"), 0o600)
			return writeKubeconfig(t, dir, "default-auth", &clientcmdapi.AuthInfo{
				ClientCertificate: "pki/kubelet-client-current.pem", ClientKey: "pki/kubelet-client-current.pem"})
		},
		want: "worker-7", how: IdentityCertificate,
	}, {
		name: "inline client-certificate-data",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "default-auth", &clientcmdapi.AuthInfo{ClientCertificateData: clientCertPEM(t, "system:node:worker-8")})
		},
		want: "worker-8", how: IdentityCertificate,
	}, {
		name: "the certificate overrules the user name",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "system:node:other", &clientcmdapi.AuthInfo{ClientCertificateData: clientCertPEM(t, "system:node:worker-9")})
		},
		want: "worker-9", how: IdentityCertificate,
	}, {
		name: "a token under a node user name",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "system:node:worker-3", &clientcmdapi.AuthInfo{Token: "abc"})
		},
		want: "worker-3", how: IdentityUser,
	}, {
		name: "a dedicated identity's certificate",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "system:node:worker-3", &clientcmdapi.AuthInfo{ClientCertificateData: clientCertPEM(t, "node-resized")})
		},
		notNode: true,
	}, {
		name: "a token of a service account",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "node-resized", &clientcmdapi.AuthInfo{Token: "abc"})
		},
		notNode: true,
	}, {
		name: "system:node: with no name",
		kubeconf: func(t *testing.T, dir string) string {
			return writeKubeconfig(t, dir, "system:node:", &clientcmdapi.AuthInfo{Token: "abc"})
		},
		notNode: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			name, how, err := NodeIdentity(tc.kubeconf(t, t.TempDir()))
			switch {
			case tc.notNode:
				if !errors.Is(err, ErrNoNodeIdentity) {
					t.Errorf("NodeIdentity = %q, %q, %v; want ErrNoNodeIdentity", name, how, err)
				}
			case err != nil || name != tc.want || how != tc.how:
				t.Errorf("NodeIdentity = %q, %q, %v; want %q from the %s", name, how, err, tc.want, tc.how)
			}
		})
	}
}

// A kubeconfig that cannot be read is an error that names it, not "no
// node identity".
func TestNodeIdentityUnreadable(t *testing.T) {
	dir := t.TempDir()
	for name, path := range map[string]string{
		"missing file": filepath.Join(dir, "nope.conf"),
		"missing certificate": writeKubeconfig(t, dir, "default-auth", &clientcmdapi.AuthInfo{
			ClientCertificate: filepath.Join(dir, "gone.pem")}),
	} {
		_, _, err := NodeIdentity(path)
		if err == nil || errors.Is(err, ErrNoNodeIdentity) {
			t.Errorf("%s: %v, want an error reading it", name, err)
		}
	}
}
