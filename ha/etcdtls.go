package ha

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
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
// --tls_ca does). The files are read when the etcd client is made: a
// process is restarted to take new ones (unlike tierstore's own TLS,
// docs/security.md).
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

// config loads the files into the etcd client's tls.Config (nil when
// plaintext). Errors wrap ErrConfig and name the file.
func (t EtcdTLS) config() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd TLS CA: %w", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: etcd TLS CA %s: no PEM certificate in it", ErrConfig, t.CA)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd TLS client certificate %s / key %s: %w", ErrConfig, t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
