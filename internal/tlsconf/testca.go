package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority made in memory: tests make throwaway ones,
// and `tierstore certs` makes a development one (docs/security.md).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a self-signed CA named name, valid for d from now.
func NewCA(name string, d time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"tierstore"}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(d),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

// Leaf is a certificate the CA issued and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue makes a certificate named name with roles, valid from notBefore to
// notAfter, for both TLS client and server use.
func (ca *CA) Issue(name string, roles []Role, notBefore, notAfter time.Time) (Leaf, error) {
	return ca.IssueNode(name, roles, nil, notBefore, notAfter)
}

// IssueNode is Issue with the certificate bound to node names (NodeURI).
func (ca *CA) IssueNode(name string, roles []Role, nodes []string, notBefore, notAfter time.Time) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	uris := make([]*url.URL, len(roles))
	for i, r := range roles {
		uris[i] = r.URI()
	}
	for _, n := range nodes {
		uris = append(uris, NodeURI(n))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"tierstore"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
		// Loopback names, for servers whose clients check host names
		// (etcd's: tierstore-etcd with TLS in tests).
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}, nil
}

// WriteFiles writes the leaf, its key and the CA's certificate into dir as
// name.crt, name.key and ca.crt (replacing each by rename, as a rotation
// does) and returns their paths.
func (ca *CA) WriteFiles(dir, name string, l Leaf) (Files, error) {
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.Cert, l.CertPEM, 0o644}, {f.Key, l.KeyPEM, 0o600}, {f.CA, ca.PEM, 0o644}} {
		if err := WriteFileAtomic(w.path, w.data, w.mode); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// Source issues a leaf valid from a minute ago for an hour (bound to
// nodes, when any), writes it into dir (WriteFiles) and loads it: the
// certificate of one process of a test.
func (ca *CA) Source(dir, name string, roles []Role, nodes ...string) (*Source, error) {
	l, err := ca.IssueNode(name, roles, nodes, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		return nil, err
	}
	f, err := ca.WriteFiles(dir, name, l)
	if err != nil {
		return nil, err
	}
	return Load(f)
}

// WriteFileAtomic writes data to path through a temporary file renamed over
// it, so a reader sees the old content or the new, never half of it.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := fmt.Sprintf("%s.tmp%d", path, time.Now().UnixNano())
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
