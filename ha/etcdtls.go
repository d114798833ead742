package ha

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/tierstore/tierstore/internal/filestamp"
)

// EtcdTLS names the files of a TLS connection to etcd, as an HA master's
// --etcd_tls_ca, --etcd_tls_cert and --etcd_tls_key give them, or an
// etcd:// address's query (etcd://h:2379?ca=FILE&cert=FILE&key=FILE).
// The zero value is plaintext.
//
// CA verifies etcd's server certificate, host name included (the
// endpoint's host must be in the certificate's SANs, as etcd's own clients
// require); Cert and Key, both or neither, are the client certificate
// etcd asks for when it runs with --client-cert-auth (tierstore-etcd with
// --tls_ca does). The files are read when the etcd client is made and
// again when one of them changes on disk (rotation without restart, as
// tierstore's own TLS: docs/security.md).
type EtcdTLS struct {
	CA, Cert, Key string
}

// Enabled reports whether any of the files is set.
func (t EtcdTLS) Enabled() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// Check says what is missing: CA whenever TLS is on, Cert and Key
// together. Errors wrap ErrConfig.
func (t EtcdTLS) Check() error {
	switch {
	case !t.Enabled():
		return nil
	case t.CA == "":
		return fmt.Errorf("%w: etcd TLS needs the CA that signed etcd's certificate (ca / --etcd_tls_ca)", ErrConfig)
	case (t.Cert == "") != (t.Key == ""):
		return fmt.Errorf("%w: etcd TLS: a client certificate needs both cert and key (--etcd_tls_cert, --etcd_tls_key); got cert %q, key %q", ErrConfig, t.Cert, t.Key)
	}
	return nil
}

// config returns the etcd client's tls.Config (nil when plaintext). The
// files are read now, so that a bad setting fails at start (errors wrap
// ErrConfig and name the file), and again at a handshake after one of them
// changed on disk (rotation without restart, as tierstore's own TLS): a new
// client certificate is presented and a new CA verifies etcd from the next
// connection the etcd client opens. A rotation that does not load (a
// half-written file, a certificate without its new key yet) keeps the
// previous material and is tried again at the next handshake.
//
// etcd's certificate must hold the host name the client dialled; an IP
// address is not sent in the handshake (SNI carries names only), so when
// the handshake has no name the certificate must hold the host of one of
// endpoints (the members of one etcd cluster, which the client picks
// among).
func (t EtcdTLS) config(endpoints []string) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	w := &etcdTLSFiles{files: t, hosts: endpointHosts(endpoints)}
	st, err := t.stamps()
	if err != nil {
		return nil, err
	}
	m, err := t.load()
	if err != nil {
		return nil, err
	}
	w.stamps, w.m = st, m
	// crypto/tls's own verification is off only because it would verify
	// against a pool fixed now: VerifyConnection does the same check (the
	// chain to the CA, the host name the client dialled) with the pool of
	// the moment.
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := w.current(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil // none configured: send none
		},
		VerifyConnection: func(cs tls.ConnectionState) error { return w.current().verify(cs, w.hosts) },
	}, nil
}

// etcdTLSFiles holds the loaded material of one EtcdTLS, re-read when a
// file changes. Safe for concurrent use.
type etcdTLSFiles struct {
	files EtcdTLS
	hosts []string // of the endpoints, for a handshake without a server name

	mu     sync.Mutex         // protects stamps and m
	stamps [3]filestamp.Stamp // of CA, Cert, Key as m was loaded (zero: not set)
	m      etcdTLSMaterial
}

// etcdTLSMaterial is one loading of the files.
type etcdTLSMaterial struct {
	pool *x509.CertPool
	cert *tls.Certificate // nil: no client certificate configured
}

func (t EtcdTLS) stamps() ([3]filestamp.Stamp, error) {
	var out [3]filestamp.Stamp
	for i, p := range []string{t.CA, t.Cert, t.Key} {
		if p == "" {
			continue
		}
		st, err := filestamp.Of(p)
		if err != nil {
			return out, fmt.Errorf("%w: etcd TLS: %w", ErrConfig, err)
		}
		out[i] = st
	}
	return out, nil
}

func (t EtcdTLS) load() (etcdTLSMaterial, error) {
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return etcdTLSMaterial{}, fmt.Errorf("%w: etcd TLS CA: %w", ErrConfig, err)
	}
	m := etcdTLSMaterial{pool: x509.NewCertPool()}
	if !m.pool.AppendCertsFromPEM(pem) {
		return etcdTLSMaterial{}, fmt.Errorf("%w: etcd TLS CA %s: no PEM certificate in it", ErrConfig, t.CA)
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return etcdTLSMaterial{}, fmt.Errorf("%w: etcd TLS client certificate %s / key %s: %w", ErrConfig, t.Cert, t.Key, err)
		}
		m.cert = &pair
	}
	return m, nil
}

// current returns the material in use, re-read first if a file changed.
func (w *etcdTLSFiles) current() etcdTLSMaterial {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.files.stamps()
	if err != nil || st == w.stamps {
		return w.m
	}
	if m, err := w.files.load(); err == nil {
		w.stamps, w.m = st, m
	}
	return w.m
}

// verify checks etcd's certificate chain against the pool, and its host
// name: the one the client dialled, or when the handshake has none (an IP
// address) one of hosts.
func (m etcdTLSMaterial) verify(cs tls.ConnectionState, hosts []string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("etcd presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: m.pool, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return err
	}
	if cs.ServerName != "" {
		return leaf.VerifyHostname(cs.ServerName)
	}
	var err error = errors.New("no etcd endpoint to verify the certificate's host against")
	for _, h := range hosts {
		if err = leaf.VerifyHostname(h); err == nil {
			return nil
		}
	}
	return err
}

// endpointHosts returns the hosts of etcd endpoints (host:port, with or
// without a scheme).
func endpointHosts(endpoints []string) []string {
	var out []string
	for _, e := range endpoints {
		if _, rest, ok := strings.Cut(e, "://"); ok {
			e = rest
		}
		if h, _, err := net.SplitHostPort(e); err == nil {
			out = append(out, h)
		} else {
			out = append(out, e)
		}
	}
	return out
}
