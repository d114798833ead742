package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/tierstore/tierstore/internal/filestamp"
)

// Role is what a certificate's holder may do in a tierstore cluster.
type Role string

// The roles. A certificate names them as SAN URIs tierstore://role/<role>.
const (
	Client Role = "client"
	Node   Role = "node"
	Master Role = "master"
)

// URI is the SAN URI that gives a certificate role r.
func (r Role) URI() *url.URL {
	return &url.URL{Scheme: "tierstore", Host: "role", Path: "/" + string(r)}
}

// NodeURI is the SAN URI that binds a certificate to node name: its holder
// may make a node's calls at a master only as that node (docs/security.md,
// Node names).
func NodeURI(name string) *url.URL {
	return &url.URL{Scheme: "tierstore", Host: "node", Path: "/" + name}
}

// NodesOf returns the node names cert is bound to (its SAN URIs
// tierstore://node/<name>), in the order given; none: any node name.
func NodesOf(cert *x509.Certificate) []string {
	var out []string
	for _, u := range cert.URIs {
		if u.Scheme == "tierstore" && u.Host == "node" {
			if n := strings.TrimPrefix(u.Path, "/"); n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func (r Role) known() bool { return r == Client || r == Node || r == Master }

// Sentinel errors; the errors of this package wrap them.
var (
	// ErrFiles: --tls_cert, --tls_key and --tls_ca are given together or
	// not at all, and each must load.
	ErrFiles = errors.New("tlsconf: TLS files")
	// ErrNoRole: a certificate names no tierstore role.
	ErrNoRole = errors.New("tlsconf: the certificate names no tierstore role (a SAN URI tierstore://role/client, node or master)")
	// ErrWrongRole: a peer's certificate lacks the role the connection or
	// call needs.
	ErrWrongRole = errors.New("tlsconf: wrong role")
	// ErrWrongNode: a node's call names a node its certificate is not
	// bound to (NodesOf).
	ErrWrongNode = errors.New("tlsconf: the certificate is bound to another node name")
	// ErrUntrusted: a server's certificate does not verify against the CA.
	ErrUntrusted = errors.New("tlsconf: certificate not trusted")
)

// RolesOf returns the tierstore roles cert names (its SAN URIs
// tierstore://role/<role>, unknown role names ignored), in the order given.
func RolesOf(cert *x509.Certificate) []Role {
	var out []Role
	for _, u := range cert.URIs {
		if u.Scheme != "tierstore" || u.Host != "role" {
			continue
		}
		r := Role(strings.TrimPrefix(u.Path, "/"))
		if r.known() && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// PeerRoles returns the roles of the peer of a server-side connection whose
// client certificate crypto/tls verified (VerifiedChains set); nil when the
// peer presented no verified certificate.
func PeerRoles(cs tls.ConnectionState) []Role {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	return RolesOf(cs.PeerCertificates[0])
}

// Describe names a certificate in messages: its subject and roles.
func Describe(cert *x509.Certificate) string {
	if nodes := NodesOf(cert); len(nodes) > 0 {
		return fmt.Sprintf("subject %q, roles %v, nodes %v", cert.Subject.String(), RolesOf(cert), nodes)
	}
	return fmt.Sprintf("subject %q, roles %v", cert.Subject.String(), RolesOf(cert))
}

// Files are the paths of the --tls_cert, --tls_key and --tls_ca flags.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any of the three is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Check returns an error naming the missing flags when some but not all of
// the three are set.
func (f Files) Check() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	for _, p := range []struct{ flag, v string }{{"--tls_cert", f.Cert}, {"--tls_key", f.Key}, {"--tls_ca", f.CA}} {
		if p.v == "" {
			missing = append(missing, p.flag)
		}
	}
	if missing != nil {
		return fmt.Errorf("%w: --tls_cert, --tls_key and --tls_ca go together; missing %s", ErrFiles, strings.Join(missing, ", "))
	}
	return nil
}

// Source holds the certificate, key and CA pool of one process, re-read
// when the files change (doc.go, Rotation). Safe for concurrent use.
type Source struct {
	files Files

	// mu protects the loaded material and the reload record below.
	mu      sync.Mutex
	stamps  [3]filestamp.Stamp // of the files the loaded material came from
	cert    *tls.Certificate
	pool    *x509.CertPool
	reloads int   // successful reloads since Load
	lastErr error // the last reload that failed (nil after a success)
}

// Load reads the three files; the error names the flag and file that does
// not load.
func Load(f Files) (*Source, error) {
	if !f.Enabled() {
		return nil, fmt.Errorf("%w: --tls_cert, --tls_key and --tls_ca are not set", ErrFiles)
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	s := &Source{files: f}
	st, err := f.stamps()
	if err != nil {
		return nil, err
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	s.stamps, s.cert, s.pool = st, cert, pool
	return s, nil
}

func (f Files) stamps() ([3]filestamp.Stamp, error) {
	var out [3]filestamp.Stamp
	for i, p := range []struct{ flag, path string }{{"--tls_cert", f.Cert}, {"--tls_key", f.Key}, {"--tls_ca", f.CA}} {
		st, err := filestamp.Of(p.path)
		if err != nil {
			return out, fmt.Errorf("%w: %s: %w", ErrFiles, p.flag, err)
		}
		out[i] = st
	}
	return out, nil
}

func (f Files) load() (*tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --tls_cert %s, --tls_key %s: %w", ErrFiles, f.Cert, f.Key, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("%w: --tls_cert %s: %w", ErrFiles, f.Cert, err)
		}
	}
	if len(RolesOf(cert.Leaf)) == 0 {
		return nil, nil, fmt.Errorf("%w: --tls_cert %s (%s): %w", ErrFiles, f.Cert, Describe(cert.Leaf), ErrNoRole)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --tls_ca: %w", ErrFiles, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%w: --tls_ca %s: no PEM certificate in it", ErrFiles, f.CA)
	}
	return &cert, pool, nil
}

// current returns the material in use, re-read first if a file changed.
// A reload that fails keeps the previous material (doc.go, Rotation).
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.files.stamps()
	if err == nil && st == s.stamps {
		return s.cert, s.pool
	}
	if err == nil {
		var cert *tls.Certificate
		var pool *x509.CertPool
		if cert, pool, err = s.files.load(); err == nil {
			s.stamps, s.cert, s.pool = st, cert, pool
			s.reloads++
		}
	}
	s.lastErr = err
	return s.cert, s.pool
}

// Roles are the roles of this process's own certificate (as now loaded).
func (s *Source) Roles() []Role {
	cert, _ := s.current()
	return RolesOf(cert.Leaf)
}

// Leaf is this process's certificate as now loaded.
func (s *Source) Leaf() *x509.Certificate {
	cert, _ := s.current()
	return cert.Leaf
}

// Reloads returns the count of successful reloads since Load and the error
// of the last reload if it failed (the previous material is still in use).
func (s *Source) Reloads() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloads, s.lastErr
}

// NeedRole returns an error (ErrWrongRole) unless this process's own
// certificate names role r: a process checks at start that it was given
// the certificate of what it is.
func (s *Source) NeedRole(r Role) error {
	if cert := s.Leaf(); !slices.Contains(RolesOf(cert), r) {
		return fmt.Errorf("%w: --tls_cert %s (%s) does not name role %s (SAN URI %s)", ErrWrongRole, s.files.Cert, Describe(cert), r, r.URI())
	}
	return nil
}

// ServerConfig is the tls.Config of a server: TLS 1.3, a client
// certificate required and verified against the CA pool of the moment, with
// at least one tierstore role. ALPN offers h2 (gRPC's), which data-plane
// clients, offering none, do not need.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    pool,
				NextProtos:   []string{"h2"},
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(PeerRoles(cs)) == 0 {
						return fmt.Errorf("client certificate (%s): %w", Describe(cs.PeerCertificates[0]), ErrNoRole)
					}
					return nil
				},
			}, nil
		},
	}
}

// ClientConfig is the tls.Config of a client of a server that must hold
// role want: TLS 1.3, this process's certificate presented, the server's
// chain verified against the CA pool of the moment and its role checked.
// crypto/tls's own verification is off (InsecureSkipVerify) only because it
// would check the hostname and a fixed pool: VerifyConnection does the
// chain check itself, with the pool re-read on rotation; hostnames are not
// identities here (doc.go, Verification).
func (s *Source) ClientConfig(want Role) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error { return s.verifyServer(cs, want) },
	}
}

func (s *Source) verifyServer(cs tls.ConnectionState, want Role) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the server presented no certificate", ErrUntrusted)
	}
	_, pool := s.current()
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("%w: the server's certificate (%s) does not verify against --tls_ca %s: %w", ErrUntrusted, Describe(leaf), s.files.CA, err)
	}
	if !slices.Contains(RolesOf(leaf), want) {
		return fmt.Errorf("%w: the server's certificate (%s) does not name role %s, which a %s needs", ErrWrongRole, Describe(leaf), want, want)
	}
	return nil
}
