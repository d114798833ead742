// Package hatest starts a real embedded etcd for tests of package ha and of
// the packages that integrate it (master, node, client, end-to-end tests).
//
//	etcd := hatest.Start(t)                 // 127.0.0.1, free ports, t.TempDir()
//	cfg := ha.Config{Endpoints: etcd.Endpoints(), Address: addr}
//	url := etcd.MasterURL()                 // "etcd://127.0.0.1:PORT" for --master
//	etcd.Stop(); etcd.Restart(t)            // same data, same ports
//
// The server is stopped by t.Cleanup. It imports the etcd server; only test
// code should import this package.
package hatest

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha/etcdserver"
	"github.com/tierstore/tierstore/internal/tlsconf"
)

// Etcd is an embedded etcd member owned by one test.
type Etcd struct {
	*etcdserver.Server
}

// Start starts a member on 127.0.0.1 with free ports and a data directory
// under t.TempDir(), and registers its Stop with t.Cleanup. It fails the test
// if the member does not start.
func Start(t testing.TB) *Etcd {
	t.Helper()
	// Log level fatal: etcd logs every listener it closes at level error.
	s, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir(), LogLevel: "fatal"})
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	t.Cleanup(s.Stop)
	return &Etcd{Server: s}
}

// StartTLS is Start with client TLS: a throwaway CA (tlsconf.NewCA)
// issues etcd's certificate (127.0.0.1 in its SANs) into t.TempDir(), and
// etcd requires clients to present a certificate of that CA. Client
// issues a client's files from the same CA.
func StartTLS(t testing.TB) (*Etcd, *Issuer) {
	t.Helper()
	ca, err := tlsconf.NewCA("hatest etcd ca", time.Hour)
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	is := &Issuer{CA: ca, dir: t.TempDir()}
	f := is.files(t, "etcd")
	s, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir(), LogLevel: "fatal",
		TLS: etcdserver.TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}})
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	t.Cleanup(s.Stop)
	return &Etcd{Server: s}, is
}

// Issuer issues certificates of a StartTLS etcd's CA.
type Issuer struct {
	CA  *tlsconf.CA
	dir string
}

func (is *Issuer) files(t testing.TB, name string) tlsconf.Files {
	t.Helper()
	l, err := is.CA.Issue(name, []tlsconf.Role{tlsconf.Client}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	f, err := is.CA.WriteFiles(is.dir, name, l)
	if err != nil {
		t.Fatalf("hatest: %v", err)
	}
	return f
}

// Client issues a client certificate named name and returns its files
// (ha.EtcdTLS{CA: f.CA, Cert: f.Cert, Key: f.Key}; this package does not
// import ha, whose tests import it).
func (is *Issuer) Client(t testing.TB, name string) tlsconf.Files {
	return is.files(t, name)
}

// Restart starts the stopped member again on its data directory and ports,
// failing the test if it cannot.
func (e *Etcd) Restart(t testing.TB) {
	t.Helper()
	if err := e.Server.Restart(); err != nil {
		t.Fatalf("hatest: restart: %v", err)
	}
}
