package kube

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// Where a kubeconfig named its node identity (NodeIdentity's how).
const (
	// IdentityCertificate: the common name of the current user's client
	// certificate (the kubelet's kubeconfig points at
	// /var/lib/kubelet/pki/kubelet-client-current.pem).
	IdentityCertificate = "client certificate"
	// IdentityUser: the current context's user name.
	IdentityUser = "user name"
)

// ErrNoNodeIdentity is returned by NodeIdentity when the kubeconfig's
// current user is not a node identity (system:node:<name>).
var ErrNoNodeIdentity = errors.New("not a node identity (system:node:<name>)")

// NodeIdentity returns the Node name the kubeconfig at path speaks as, and
// where it found it: the current user's client certificate (its common
// name system:node:<name>, the identity the API server authenticates),
// else the current context's user name of that form. A kubeconfig whose
// user is not a node identity is ErrNoNodeIdentity.
func NodeIdentity(path string) (name, how string, err error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", "", fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return "", "", fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", "", fmt.Errorf("kubeconfig %s: no current context %q", path, cfg.CurrentContext)
	}
	if user, ok := cfg.AuthInfos[kctx.AuthInfo]; ok {
		data, file := user.ClientCertificateData, user.ClientCertificate
		if len(data) == 0 && file != "" {
			if data, err = os.ReadFile(file); err != nil {
				return "", "", fmt.Errorf("kubeconfig %s: read the client certificate: %w", path, err)
			}
		}
		if len(data) > 0 {
			cn, err := commonName(data)
			if err != nil {
				return "", "", fmt.Errorf("kubeconfig %s: client certificate %s: %w", path, file, err)
			}
			if n, ok := strings.CutPrefix(cn, NodeUserPrefix); ok && n != "" {
				return n, IdentityCertificate, nil
			}
			// A certificate is who the API server says the daemon is:
			// a user name in the file does not overrule it.
			return "", "", fmt.Errorf("kubeconfig %s: client certificate of %q: %w", path, cn, ErrNoNodeIdentity)
		}
	}
	if n, ok := strings.CutPrefix(kctx.AuthInfo, NodeUserPrefix); ok && n != "" {
		return n, IdentityUser, nil
	}
	return "", "", fmt.Errorf("kubeconfig %s: user %q: %w", path, kctx.AuthInfo, ErrNoNodeIdentity)
}

// commonName returns the subject common name of the first certificate in
// PEM data (a kubelet's client .pem holds its key too).
func commonName(data []byte) (string, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return "", errors.New("no PEM certificate")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return "", fmt.Errorf("parse: %w", err)
		}
		return c.Subject.CommonName, nil
	}
}
