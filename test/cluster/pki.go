package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
)

// writeServiceAccountKeys writes a fresh ECDSA P-256 key pair for signing
// and verifying service account tokens.
func writeServiceAccountKeys(privPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("cluster: generating service account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("cluster: encoding service account key: %w", err)
	}
	if err := os.WriteFile(privPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("cluster: writing service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("cluster: encoding service account public key: %w", err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("cluster: writing service account public key: %w", err)
	}
	return nil
}

// newToken returns a random bearer token.
func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("cluster: generating token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// identity is one user of the static token file.
type identity struct {
	token  string
	user   string
	uid    string
	groups []string
}

// writeTokenFile writes the kube-apiserver --token-auth-file CSV:
// token,user,uid,"group1,group2".
func writeTokenFile(path string, ids []identity) error {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s,\"%s\"\n", id.token, id.user, id.uid, strings.Join(id.groups, ","))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("cluster: writing token file: %w", err)
	}
	return nil
}
